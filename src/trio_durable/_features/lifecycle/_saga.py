"""Undoing and redoing a run's work: saga compensation and retry planning.

Compensation runs the undo of every completed step that declared one, newest
first, each at ``-seq`` of the step it undoes. Retry puts a failed or dead run
back to ``pending`` with its failures reset, in one write that spans the
children it retries as well; what it deletes or resets of each run stays in
that run's history (`_retried`).

Retry also re-arms what a cancel disarmed, since it retries cancelled
children: a signal wait gets its waiter back (a signal buffered meanwhile is
handed over in the same write), and a remote step whose attempt was out when
its run was cancelled (its result was dropped) is sent again as a new
attempt. Timers need nothing: the run's first turn after the retry suspends
on their recorded due time again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import attrs

from ..._base import _serde
from ..._base._exceptions import StepFailed
from ..._base._on_error import HANDOFF_BASE, RETIRED_PREFIX, without_on_error_tags
from ..._base._records import Checkpoint, ErrorInfo, Mark, Run, RunStatus, signal_token
from ..._kernel._cancellation import CANCEL_SENT, CANCELLED_AT, TERMINATE
from ..._kernel._decision_record import ask_afresh
from ..._kernel._definitions import Registry
from ..._kernel._executions import rerun_record
from ..._stores._ops import (
    QUEUED,
    ClaimCheckpoint,
    DeleteCheckpoints,
    Op,
    PutCheckpoint,
    UpdateRun,
    WaitSignal,
)
from ..._stores._record_ops import DeleteRecords
from ..children._children import completion
from ..on_error._handoff import output_source
from ..steps._local import execute
from ..steps._remote import RESEND
from ._retried import keep_replaced, next_retry

if TYPE_CHECKING:
    from ..._kernel._replay import Replay
    from ..._stores._base import Store

logger = logging.getLogger("trio_durable")

CHILD_RETRYABLE: Final[frozenset[RunStatus]] = frozenset(
    {"failed", "dead", "cancelled", "terminated"}
)


async def compensate(replay: Replay) -> None:
    """Run the undos of the completed steps, newest first.

    Each undo sits at ``-seq`` of the step it undoes and is written as soon
    as it ends (fenced by the lease), so a turn that crashed halfway skips
    the undos that already ran instead of repeating their effects.
    """
    rt, turn = replay.runtime, replay.turn
    done = sorted(
        (cp for cp in turn.checkpoints.values() if cp.seq > 0 and cp.compensation),
        key=lambda cp: -cp.seq,
    )
    for cp in done:
        if cp.status != "completed" or -cp.seq in turn.checkpoints:
            continue
        assert cp.compensation is not None
        undo = rt.app.get_step(cp.compensation)
        if undo is None:
            turn.put(
                Checkpoint(
                    run_id=turn.run.id,
                    seq=-cp.seq,
                    name=cp.compensation,
                    kind="local",
                    status="failed",
                    error=ErrorInfo(
                        message=f"no step {cp.compensation!r} is registered",
                        code="unknown_step",
                    ),
                )
            )
            continue
        args = _serde.load_args(cp.input or "[]", cp_step_fn(rt.app, cp))
        try:
            await execute(replay, undo, -cp.seq, args, cp.input or "[]", undo_of=cp.seq)
        except StepFailed:
            logger.warning("undo %r of run %r failed", undo.name, turn.run.id)
        if not turn.dispatch:
            fence = UpdateRun(turn.run.id, {}, expect_owner=rt.engine_id)
            await rt.store.apply([*turn.ops, fence])
            turn.ops.clear()


async def plan_retry(
    store: Store,
    app: Registry,
    now: float,
    run: Run,
    ops: list[Op],
    wakes: list[Run],
    expect: frozenset[RunStatus],
) -> None:
    """Add to ``ops`` the writes that retry ``run`` (expected to be in
    ``expect``) at durable time ``now``, and the failed children it retries
    too; add to ``wakes`` the runs to wake once they committed."""
    checkpoints = await store.get_checkpoints(run.id)
    records = await store.get_records(run.id)
    retry = await next_retry(store, run.id)
    first_op = len(ops)
    undone = {-cp.seq for cp in checkpoints if cp.seq < 0}
    deletes: list[int] = []
    # A remote workflow's run: the retried run asks a worker afresh.
    ops.extend(ask_afresh(records))
    for cp in checkpoints:
        if cp.seq >= HANDOFF_BASE:
            if not cp.name.startswith(RETIRED_PREFIX):
                # Retire the handoff: kept in the timeline, never followed
                # again, and its handler no longer settles it.
                ops.append(PutCheckpoint(attrs.evolve(cp, name=f"{RETIRED_PREFIX}{cp.child_id}")))
                if cp.child_id is not None:
                    ops.append(UpdateRun(cp.child_id, {"parent_seq": None}, strict=False))
            continue
        if cp.seq < 0 or cp.seq in undone:
            # A compensation record, or a step whose effect was undone: the
            # retried body must run it again.
            deletes.append(cp.seq)
        elif cp.status == "failed" and cp.kind == "child" and cp.child_id is not None:
            child = await store.get_run(cp.child_id)
            reset = attrs.evolve(cp, status="pending", output=None, error=None, finished_at=None)
            if child is None:
                deletes.append(cp.seq)
            elif child.status == "completed":
                source = await output_source(store, app, child)
                output = completion(True, child.output, returned_by=source)
                ops.append(PutCheckpoint(attrs.evolve(reset, status="completed", output=output)))
            elif child.status in CHILD_RETRYABLE:
                ops.append(PutCheckpoint(reset))
                await plan_retry(store, app, now, child, ops, wakes, CHILD_RETRYABLE)
            else:
                ops.append(PutCheckpoint(reset))
        elif cp.status == "failed":
            deletes.append(cp.seq)
        elif cp.status == "pending":
            ops.extend(_rearm(now, run, cp))
    if deletes:
        ops.append(DeleteCheckpoints(run.id, tuple(deletes)))
        # What the retried body records at these seqs again is marked
        # `rerun`: a result without an execution id cannot tell it from
        # what was deleted.
        ops.extend(rerun_record(run.id, records, checkpoints, deletes, now))
    # A cancel's delivery point (a later cancel of the retried run is
    # delivered afresh), and a remote workflow's record of a cancel sent:
    # the retried run is not being cancelled.
    gone = tuple(r.kind for r in records if r.kind in (CANCELLED_AT, CANCEL_SENT, TERMINATE))
    if gone:
        ops.append(DeleteRecords(run.id, gone))
    changes: dict[str, Any] = {
        "status": "pending",
        "error": None,
        "output": None,
        "wake_at": None,
        "compensate": False,
        "recoveries": 0,
        "tags": without_on_error_tags(run.tags),
        "updated_at": now,
    }
    ops.append(UpdateRun(run.id, changes, expect_status=expect))
    # What this retry deletes or resets stays in the run's history, written
    # with it: after the fenced update, so a retry that lost a race keeps
    # nothing.
    ops.append(keep_replaced(run, retry, now, None, ops[first_op:], checkpoints, records))
    # As written: the caller of a retry is given the run as it left it.
    wakes.append(attrs.evolve(run, **changes))


def _rearm(now: float, run: Run, cp: Checkpoint) -> list[Op]:
    """What a retry writes so that a pending checkpoint can still settle."""
    if cp.kind == "signal":
        # A cancel removed the waiter; a run that failed or died kept it,
        # and registering it again changes nothing.
        return [WaitSignal(signal_token(run.id, cp.name), run.id, cp.seq, now)]
    if cp.kind != "remote" or run.status != "cancelled":
        # A result for a failed or dead run still settles its checkpoint, so
        # an attempt that is out needs nothing.
        return []
    if cp.started_at is not None:
        # Out when the run was cancelled: its result was (or will be)
        # dropped. A new attempt, so a late failure of the old one changes
        # nothing; a late success of it still settles the step. It is due
        # at once, and asks its flow-control queue for a slot again if it
        # goes through one (the slot went back when the run ended).
        dropped = ErrorInfo(
            message=f"attempt {cp.attempts} was out when the run was cancelled;"
            " its result was dropped",
            code="cancelled",
        )
        resend = Mark(code=RESEND, message="to be sent again: its run was retried")
        return [
            ClaimCheckpoint(
                attrs.evolve(
                    cp,
                    attempts=cp.attempts + 1,
                    errors=(*cp.errors, dropped),
                    mark=resend,
                    started_at=None,
                    wake_at=None,
                )
            )
        ]
    if cp.mark is not None and cp.mark.code == QUEUED:
        # Its place in line may be gone (a release skips the waiters of
        # ended runs): ask again at once rather than at its next look.
        return [ClaimCheckpoint(attrs.evolve(cp, wake_at=None))]
    return []


def cp_step_fn(app: Registry, cp: Checkpoint) -> Callable[..., Any]:
    """The function whose annotations structure a recorded step's input."""
    step = app.get_step(cp.name)
    if step is None:
        return _untyped
    return step.fn


async def _untyped(*args: Any) -> None:
    """Stands in for a step that is no longer registered."""
