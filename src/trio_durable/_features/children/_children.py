"""Child runs: the records that start one, the completion its end writes on
its parent's checkpoint, and how the parent reads that completion back.

A parent starts a child in its own turn's write: a ``child`` checkpoint and
the child's run, created together; the child is woken once they committed.
A child of a workflow the parent's engine runs itself is created leased to
that engine, as `Engine.start` creates a run, so that its first turn takes
up the run as created (`leased_child`) instead of writing the lease first.
An awaited child's end settles that checkpoint with its completion,
``{"ok": true, "value": ...}`` or ``{"ok": false, "error", "code",
"details"}``, in the same write that ends the child. The members of a fan
of children that end together count their fan's pending members once
between them, not once each (`member_ended`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._base import _serde
from ..._base._exceptions import RunFailed
from ..._base._on_error import RETIRED_PREFIX
from ..._base._records import ACTIVE_STATUSES, Checkpoint, ErrorInfo, FanMode, Run
from ..._kernel._barrier import join_barrier
from ..._kernel._definitions import Workflow
from ..._kernel._hooks import Feature
from ..._stores._ops import CreateRun, SettleCheckpoint, UpdateRun
from ..flow_control._admission import creation_ops, start_controls

if TYPE_CHECKING:
    from ..._base._records import RunStatus
    from ..._kernel._definitions import Registry
    from ..._kernel._replay import TurnDraft
    from ..._kernel._runtime import Runtime
    from ..._kernel._turn import Turn
    from ..._stores._base import Store
    from ..._stores._ops import Op


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


def output_type(app: Registry, workflow: str, version: str) -> Any:
    """The return annotation of a registered workflow version (``Any`` if
    this app lacks it): what its output is structured as."""
    if not app.has_workflow(workflow, version):
        return Any
    _, returns = _serde.signature_types(app.get_workflow(workflow, version).fn)
    return returns


def child_outcome(app: Registry, wf: Workflow[..., Any], cp: Checkpoint) -> Any:
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


def child_value(app: Registry, wf: Workflow[..., Any], cp: Checkpoint) -> Any:
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
    turn: TurnDraft,
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
    # Leased to the parent's engine for as long as the parent's turn holds
    # its lease: the child's first turn starts once the turn's write commits.
    # A child given by name (a handoff's handler, an entity), or whose run
    # controls decide its admission in its first turn, is left to be taken
    # up by a turn of its own.
    leased = False
    if isinstance(workflow, Workflow):
        controls = start_controls(workflow, input_json)
        workflow = (workflow.name, workflow.version)
        leased = (
            controls is None
            and run.lease_owner is not None
            and run.lease_expiry is not None
            and run.lease_expiry > now
        )
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
    if leased:
        child = attrs.evolve(
            child,
            status="running",
            lease_owner=run.lease_owner,
            lease_expiry=run.lease_expiry,
        )
    turn.ops.append(CreateRun(child))
    if controls is not None:
        turn.ops.extend(creation_ops(child_id, controls, now))
    turn.started_children.append(child)
    turn.wake_after.append(child_id)


def leased_child(started: Mapping[str, Run], run_id: str, owner: str) -> Run | None:
    """The run of a child a turn started (``started``: its started
    children by id) leased to ``owner`` (see `record_child`), as created:
    what its first turn reads, as a turn that took the lease would (a new
    child has no checkpoints). None for any other run."""
    child = started.get(run_id)
    if child is not None and child.lease_owner == owner and child.status == "running":
        return child
    return None


def cancel_request(run_id: str, compensate: bool, now: float) -> UpdateRun:
    """The write that asks a run to cancel (skipped if it already ended)."""
    return UpdateRun(
        run_id,
        {"status": "cancelling", "compensate": compensate, "updated_at": now},
        expect_status=ACTIVE_STATUSES,
        strict=False,
    )


Barrier = Callable[["Store", Iterable[Checkpoint]], Awaitable[list[str]]]

# Per engine: the fans whose pending members a child's end is counting, each
# with whether another member ended since that count began.
_counting: Final[weakref.WeakKeyDictionary[Runtime, dict[tuple[str, int, int], bool]]] = (
    weakref.WeakKeyDictionary()
)


async def member_ended(
    rt: Runtime, settled: Checkpoint, barrier: Barrier = join_barrier
) -> list[str]:
    """The runs to wake after a child's end settled ``settled`` on its
    parent: `join_barrier`, but the members of one fan that end while one
    of them counts its pending members leave the count to that one, which
    counts once more when it is done. The last count then begins after
    every such end committed, so the parent is woken once it finds none
    pending, as when each counts, but a thousand members ending together
    cost a handful of counts instead of a thousand. ``barrier`` is the
    join barrier to count with (the caller's own name for it).

    Raises:
      StoreError: A count failed (a member that left its count to this
        one is then woken by the reconcile pass, as a lost wake is).
    """
    first, size = settled.parallel_group, settled.parallel_size
    if (
        first is None
        or size is None
        or settled.status == "pending"
        or (settled.parallel_mode == "fail_fast" and settled.status == "failed")
    ):
        return await barrier(rt.store, [settled])
    fans = _counting.setdefault(rt, {})
    key = (settled.run_id, first, size)
    if key in fans:
        fans[key] = True
        return []
    fans[key] = False
    try:
        while True:
            wakes = await barrier(rt.store, [settled])
            if wakes or not fans[key]:
                return wakes
            # Members ended during the count: it may predate their writes.
            fans[key] = False
    finally:
        del fans[key]


@final
class Children(Feature):
    """Child runs: a child's end settles its parent's checkpoint and wakes
    the parent through the join barrier; a cancelled run cancels the
    children it waits on."""

    def end_ops(
        self,
        turn: Turn,
        status: RunStatus,
        output: str | None,
        error: ErrorInfo | None,
        returned_by: tuple[str, str] | None,
    ) -> Sequence[Op]:
        run = turn.state.run
        if run.parent_id is None or run.parent_seq is None:
            return ()
        return (
            SettleCheckpoint(
                run.parent_id,
                run.parent_seq,
                "completed" if status == "completed" else "failed",
                completion(status == "completed", output, error, returned_by=returned_by),
                error,
                turn.runtime.clock.now(),
            ),
        )

    async def ended(self, turn: Turn, ops: Sequence[Op], results: Sequence[Any]) -> None:
        rt, run = turn.runtime, turn.state.run
        offset = len(results) - len(ops)
        for op, settled in zip(ops, results[offset:], strict=True):
            if (
                isinstance(op, SettleCheckpoint)
                and op.run_id == run.parent_id
                and op.seq == run.parent_seq
                and settled is not None
            ):
                # Counted right after the write, so that members ending
                # together count their fan a few times (`member_ended`);
                # then the next member of a fan with a window starts.
                for parent in await member_ended(rt, settled, join_barrier):
                    rt.scheduler.wake(parent)
                await rt.features.settled(rt, [settled])

    async def cancelling(self, turn: Turn, error: ErrorInfo) -> None:
        rt, state = turn.runtime, turn.state
        run = state.run
        now = rt.clock.now()
        for cp in sorted(state.checkpoints.values(), key=lambda cp: cp.seq):
            if (
                cp.status != "pending"
                or cp.name.startswith(RETIRED_PREFIX)
                or cp.kind != "child"
                or cp.child_id is None
            ):
                # A retired handoff's handler is no longer the run's to wait
                # for or to cancel, and its record stays as it was.
                continue
            state.ops.append(cancel_request(cp.child_id, run.compensate, now))
            state.ops.append(
                SettleCheckpoint(
                    run.id, cp.seq, "failed", completion(False, error=error), error, now
                )
            )
            state.wake_after.append(cp.child_id)
            state.cancelled_children.append(cp.child_id)
