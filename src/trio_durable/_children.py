"""Child runs: the records that start one, the completion its end writes on
its parent's checkpoint, and how the parent reads that completion back.

A parent starts a child in its own turn's write: a ``child`` checkpoint and
the child's run, created together; the child is woken once they committed.
An awaited child's end settles that checkpoint with its completion,
``{"ok": true, "value": ...}`` or ``{"ok": false, "error", "code",
"details"}``, in the same write that ends the child.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from . import _serde
from ._admission import creation_ops, start_controls
from ._definitions import Workflow
from ._exceptions import RunFailed
from ._records import ACTIVE_STATUSES, Checkpoint, ErrorInfo, FanMode, Run
from ._stores._ops import CreateRun, UpdateRun

if TYPE_CHECKING:
    from ._app import App
    from ._replay import TurnState


@attrs.define(frozen=True)
class Failed:
    """A child's (or fan member's) failure, as its parent reads it."""

    error: str
    code: str | None
    details: Any
    id: str = ""


def completion(
    ok: bool,
    value_json: str | None = None,
    error: ErrorInfo | None = None,
    *,
    returned_by: tuple[str, str] | None = None,
) -> str:
    """The JSON text a child's end writes onto its parent's checkpoint.

    ``returned_by`` is the ``(workflow, version)`` whose return annotation
    types the value when that is not the child's own workflow: a child that
    handed off returns its handler's output.
    """
    if ok:
        source = ""
        if returned_by is not None:
            source = (
                f',"workflow":{json.dumps(returned_by[0])},"version":{json.dumps(returned_by[1])}'
            )
        return '{"ok":true,"value":' + (value_json or "null") + source + "}"
    assert error is not None
    return json.dumps(
        {"ok": False, "error": error.message, "code": error.code, "details": error.details},
        separators=(",", ":"),
    )


def completion_source(data: dict[str, Any]) -> tuple[str, str] | None:
    """The ``(workflow, version)`` a completion names as the source of its
    value (see `completion`), or None."""
    workflow, version = data.get("workflow"), data.get("version")
    if isinstance(workflow, str) and isinstance(version, str):
        return workflow, version
    return None


def output_type(app: App, workflow: str, version: str) -> Any:
    """The return annotation of a registered workflow version (``Any`` if
    this app lacks it): what its output is structured as."""
    if not app.has_workflow(workflow, version):
        return Any
    _, returns = _serde.signature_types(app.get_workflow(workflow, version).fn)
    return returns


def child_outcome(app: App, wf: Workflow[..., Any], cp: Checkpoint) -> Any:
    """What a settled child checkpoint gives its parent: the child's value,
    structured as its workflow returns it (or its handler, if it handed
    off), or a `Failed`."""
    data = json.loads(cp.output) if cp.output else None
    if not isinstance(data, dict):
        error = cp.error or ErrorInfo(message="child ended without a completion")
        return Failed(error.message, error.code, error.details)
    if data.get("ok"):
        source = completion_source(data)
        if source is not None:
            # The child handed off: the value is its handler's output.
            returns = output_type(app, *source)
        else:
            _, returns = _serde.signature_types(wf.fn)
        return _serde.structure(data.get("value"), returns)
    return Failed(str(data.get("error")), data.get("code"), data.get("details"))


def child_value(app: App, wf: Workflow[..., Any], cp: Checkpoint) -> Any:
    """What an awaited child's settled checkpoint returns to its parent's
    body: the child's value.

    Raises:
      RunFailed: The child failed or was cancelled; its error's code and
        details are the exception's.
    """
    value = child_outcome(app, wf, cp)
    if isinstance(value, Failed):
        recorded = cp.error or ErrorInfo(message=value.error)
        raise RunFailed(
            cp.child_id or "",
            value.error,
            value.code,
            value.details,
            step=recorded.step,
            traceback=recorded.traceback,
        )
    return value


def record_child(
    turn: TurnState,
    workflow: tuple[str, str] | Workflow[..., Any],
    seq: int,
    child_id: str,
    input_json: str,
    now: float,
    *,
    awaited: bool,
    fan: tuple[int, int, FanMode] | None = None,
    error: ErrorInfo | None = None,
    search_attributes: Mapping[str, Any] | None = None,
) -> None:
    """Record in ``turn`` the start of a child run of ``workflow`` (name and
    version) at ``seq``: its checkpoint (pending if awaited, else completed
    with the child's id; ``error`` is the failure an on-error handler is
    given) and its run, woken once the turn's writes commit.

    A `Workflow` with run controls starts its child with its admission
    (see `_admission`); given by name and version, a child that needs one
    gets it in its first turn.

    Raises:
      InvalidArgumentsError: A key function of the workflow's run controls
        failed on the child's inputs; nothing is recorded.
    """
    run = turn.run
    controls = None
    if isinstance(workflow, Workflow):
        controls = start_controls(workflow, input_json)
        workflow = (workflow.name, workflow.version)
    turn.put(
        Checkpoint(
            run_id=run.id,
            seq=seq,
            name=workflow[0],
            kind="child",
            status="pending" if awaited else "completed",
            input=input_json,
            output=None if awaited else json.dumps(child_id),
            error=error,
            child_id=child_id,
            parallel_group=fan[0] if fan else None,
            parallel_size=fan[1] if fan else None,
            parallel_mode=fan[2] if fan else None,
            enqueued_at=now,
            started_at=now,
            finished_at=None if awaited else now,
        )
    )
    child = Run(
        id=child_id,
        workflow=workflow[0],
        version=workflow[1],
        namespace=run.namespace,
        input=input_json,
        parent_id=run.id,
        parent_seq=seq if awaited else None,
        created_at=now,
        updated_at=now,
        search_attributes=dict(search_attributes or {}),
    )
    turn.ops.append(CreateRun(child))
    if controls is not None:
        turn.ops.extend(creation_ops(child_id, controls, now))
    turn.started_children.append(child)
    turn.wake_after.append(child_id)


def cancel_request(run_id: str, compensate: bool, now: float) -> UpdateRun:
    """The write that asks a run to cancel (skipped if it already ended)."""
    return UpdateRun(
        run_id,
        {"status": "cancelling", "compensate": compensate, "updated_at": now},
        expect_status=ACTIVE_STATUSES,
        strict=False,
    )
