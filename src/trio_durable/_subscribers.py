"""Which workflows an event starts: the subscriptions `App.workflow` takes
(``events=``), checked at registration, and looked up by event name.

Kept apart from `_events`, which sends events through the store: `_app`
checks a subscriber here while it registers it, and so cannot import what
imports `_app` back.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._exceptions import RegistrationError

if TYPE_CHECKING:
    from ._app import App
    from ._definitions import Workflow


def check_subscriber(target: str, fn: Callable[..., Any], collect: str, debounced: bool) -> None:
    """Refuse a subscriber whose body cannot take an event's payload as its
    one input after the context (with ``debounce_collect="all"``, the list of
    the window's payloads).

    Raises:
      RegistrationError: The body needs more than one input, or takes none.
    """
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ][1:]
    named = [p for p in params if p.kind != p.VAR_POSITIONAL]
    required = [p.name for p in named if p.default is p.empty]
    takes_one = len(required) <= 1 and (named or len(named) < len(params))
    if not takes_one:
        what = (
            "the list of a window's payloads" if debounced and collect == "all" else "its payload"
        )
        raise RegistrationError(
            f"{target} subscribes to events, so it must take {what} as its one input after"
            f" the context, but it {_takes(required, named)}"
        )


def _takes(required: list[str], named: list[inspect.Parameter]) -> str:
    if not named:
        return "takes no input"
    return f"needs {len(required)} ({', '.join(required)})"


def subscribers(app: App, name: str) -> list[Workflow[..., Any]]:
    """The workflows of ``app`` whose latest version subscribes to the
    event ``name``, in the order their names were first registered."""
    names = dict.fromkeys(wf.name for wf in app.workflows)
    found: list[Workflow[..., Any]] = []
    for workflow in names:
        latest = app.get_workflow(workflow)
        if name in latest.controls.events:
            found.append(latest)
    return found
