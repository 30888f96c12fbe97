"""Which workflows an event starts: the subscriptions `App.workflow` takes
(``events=``), looked up by event name (`_registration_checks` checks them
at registration)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry, Workflow


def subscribers(app: Registry, name: str) -> list[Workflow[..., Any]]:
    """The workflows of ``app`` whose latest version subscribes to the
    event ``name``, in the order their names were first registered."""
    names = dict.fromkeys(wf.name for wf in app.workflows)
    found: list[Workflow[..., Any]] = []
    for workflow in names:
        latest = app.get_workflow(workflow)
        if name in latest.controls.events:
            found.append(latest)
    return found
