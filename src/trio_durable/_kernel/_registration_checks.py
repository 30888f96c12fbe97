"""The checks a registration passes before `App` records it: names (and
that one is not taken), a body's signature (and that a subscriber to events
can take their payload), worker groups, the options of queues, steps,
workflows and entities, and a search attribute's type. Each refuses with
`RegistrationError` (a search attribute, `SearchAttributeError`).

They need nothing of what registration makes (`_definitions`): this module
imports only leaves, so calling it ties nothing into the import cycle that
the typing of a workflow's body (its `Context`) makes.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Container, Mapping, Sequence
from typing import Any

from .._base._controls import RateLimit, RunControls
from .._base._exceptions import RegistrationError, SearchAttributeError
from .._base._index_text import refuse_nul
from .._base._policies import VERSIONINGS, Retry, finite
from .._base._search_values import SearchAttributeType, declared_type
from .._base._search_values import check_name as check_attribute_name
from .._brokers._base import is_broker_safe

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,199}$")


def check_name(kind: str, name: str) -> str:
    """``name``, refused unless it is a valid name of a ``kind`` (app,
    workflow, step, queue, entity) of registration."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise RegistrationError(
            f"{kind} name {name!r} is invalid: use letters, digits, '_', '.', '-' "
            "(starting with a letter or '_', at most 200 characters)"
        )
    return name


def check_unregistered(kind: str, name: str, registered: Container[str], app: str) -> None:
    """Refuse ``name`` for a ``kind`` (step, queue, ...) of which
    ``registered`` holds one of that name already in the app ``app``."""
    if name in registered:
        raise RegistrationError(f"{kind} {name!r} is already registered in app {app!r}")


def check_body(kind: str, fn: Callable[..., Any], name: str | None, *, context: bool) -> str:
    """Refuse a body that is not an ``async def`` or that no call could
    fill (see `check_parameters`), and return the name it registers under:
    ``name``, else the function's own."""
    if not inspect.iscoroutinefunction(fn):
        raise RegistrationError(f"{kind} {fn!r} must be an async def")
    registered = check_name(kind, fn.__name__ if name is None else name)
    check_parameters(f"{kind} {registered!r}", fn, context=context)
    return registered


def check_parameters(target: str, fn: Callable[..., Any], *, context: bool) -> None:
    """Refuse what no call could fill: inputs are passed positionally, after
    the context for a workflow."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError) as exc:
        raise RegistrationError(f"{target}: cannot read its signature ({exc})") from exc
    if context:
        first = params[0] if params else None
        if first is None or first.kind not in (first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
            raise RegistrationError(
                f"{target} must take the context first:"
                f" async def {fn.__name__}(ctx: td.Context, ...)"
            )
        if first.annotation is not first.empty and not _is_context(fn, first):
            raise RegistrationError(
                f"{target} must take the context first, but its first parameter"
                f" {first.name!r} is annotated {_annotation_text(first.annotation)},"
                " not td.Context"
            )
    for param in params:
        if param.kind == param.KEYWORD_ONLY and param.default is param.empty:
            raise RegistrationError(
                f"{target} has the required keyword-only parameter {param.name!r}:"
                " inputs are passed positionally"
            )


def _annotation_text(annotation: object) -> str:
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__qualname__", None) or repr(annotation)


def _is_context(fn: Callable[..., Any], param: inspect.Parameter) -> bool:
    """Whether ``param`` is annotated `Context` (or `typing.Any`, which
    claims nothing, or something that cannot be resolved at run time).

    `Context` is recognised by where it is defined: ``_context`` imports
    what registration makes, so this module cannot import it back.
    """
    hint = param.annotation
    if isinstance(hint, str):
        try:
            hint = typing.get_type_hints(fn)[param.name]
        except Exception:
            # An annotation names something only a type checker sees (an
            # import under TYPE_CHECKING, perhaps of Context by another
            # name): what cannot be resolved cannot be judged.
            return True
    return hint is Any or (
        getattr(hint, "__module__", None) == "trio_durable._front._context"
        and getattr(hint, "__qualname__", None) == "Context"
    )


def check_subscriber(target: str, fn: Callable[..., Any], controls: RunControls) -> None:
    """Refuse a body whose run ``controls`` subscribe it to events but that
    cannot take an event's payload as its one input after the context (with
    ``debounce_collect="all"``, the list of the window's payloads).

    Raises:
      RegistrationError: The body needs more than one input, or takes none.
    """
    if not controls.events:
        return
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
            "the list of a window's payloads"
            if controls.debounce is not None and controls.debounce_collect == "all"
            else "its payload"
        )
        raise RegistrationError(
            f"{target} subscribes to events, so it must take {what} as its one input after"
            f" the context, but it {_takes(required, named)}"
        )


def _takes(required: list[str], named: list[inspect.Parameter]) -> str:
    if not named:
        return "takes no input"
    return f"needs {len(required)} ({', '.join(required)})"


def check_group(kind: str, group: str | None) -> None:
    """Refuse a worker group (of a ``kind``, workflow or step) that is not
    a broker-safe token."""
    if group is not None and not is_broker_safe(group):
        raise RegistrationError(
            f"{kind} group {group!r} is not broker-safe: use letters, digits, '_', '.', '-'"
            " (at most 100, not starting with '.' or '-')"
        )


def check_queue_options(concurrency: int, priority: int, rate_limit: RateLimit | None) -> None:
    """Refuse the options of `App.queue` that are out of range."""
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise RegistrationError(
            f"queue concurrency must be a positive integer, not {concurrency!r}"
        )
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise RegistrationError(f"queue priority must be an integer, not {priority!r}")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise RegistrationError(f"queue rate_limit must be a td.RateLimit, not {rate_limit!r}")


def check_versioning(versioning: object) -> None:
    """Refuse a ``versioning`` that is not one of `VERSIONINGS`."""
    if versioning not in VERSIONINGS:
        raise RegistrationError(
            f"versioning must be one of {', '.join(map(repr, VERSIONINGS))}, not {versioning!r}"
        )


def check_workflow_options(
    version: str, group: str | None, check_arguments: bool, versioning: object = "auto_upgrade"
) -> None:
    """Refuse the options of `App.workflow` that its run controls do not
    cover (`run_controls` checks those)."""
    check_versioning(versioning)
    if not isinstance(version, str) or not version:
        raise RegistrationError(f"workflow version must be a non-empty string, not {version!r}")
    refuse_nul("a workflow's version", version, RegistrationError)
    check_group("workflow", group)
    if not isinstance(check_arguments, bool):
        raise RegistrationError(f"check_arguments must be a bool, not {check_arguments!r}")


def check_step_options(
    *,
    group: str | None,
    requires: Sequence[str],
    queue: str | None,
    retry: Retry | None,
    timeout: float | None,
) -> None:
    """Refuse the options of `App.step` that are out of range, or that only
    a remote step (one with a group) takes."""
    if retry is not None and not isinstance(retry, Retry):
        raise RegistrationError(f"retry must be a td.Retry, not {retry!r}")
    check_group("step", group)
    if isinstance(requires, str) or not all(isinstance(r, str) and r for r in requires):
        raise RegistrationError(f"requires must be a list of capability names, not {requires!r}")
    if requires and group is None:
        raise RegistrationError("requires= only applies to remote steps (give a group=)")
    if queue is not None and group is None:
        raise RegistrationError("queue= only applies to remote steps (give a group=)")
    if timeout is not None:
        finite("step timeout", timeout)
        if timeout <= 0:
            raise RegistrationError(f"step timeout must be positive, not {timeout!r}")


def check_entity_key(name: str, key: object) -> None:
    """Refuse a key type of `App.entity` other than ``str`` and ``int``."""
    if key is not str and key is not int:
        raise RegistrationError(f"entity {name!r}: key must be str or int, not {key!r}")


def check_search_attribute(
    declared: Mapping[str, SearchAttributeType], name: str, type: object, app: str
) -> SearchAttributeType:
    """The type the search attribute ``name`` is declared with as ``type``,
    refused if the app ``app`` declared it (in ``declared``) with another
    one: one name has one type for good.

    Raises:
      SearchAttributeError: The name or type is invalid, or the name is
        declared with another type.
    """
    kind = declared_type(type)
    if declared.get(check_attribute_name(name), kind) != kind:
        raise SearchAttributeError(
            f"search attribute {name!r} is declared as {declared[name]} in app {app!r}, not {kind}"
        )
    return kind
