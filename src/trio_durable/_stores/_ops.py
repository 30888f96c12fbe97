"""The operations `Store.apply` takes: each a frozen record saying one
write, with the result it gives (see docs/writing-a-store.md for the rule
each keeps). `Op` is their union, the webhook and breakpoint operations of
`_hook_ops` included.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, final

import attrs

from .._base._records import Checkpoint, CheckpointKind, CheckpointStatus, ErrorInfo, Run, RunStatus
from .._base._run_records import RunRecord
from ._hook_ops import HookOp
from ._record_ops import RecordOp


@final
@attrs.define(frozen=True)
class CreateRun:
    """Insert ``run`` unless a run with its id exists, with ``checkpoints``
    and ``records`` (the run's own, such as its deadline), written only if
    the run is inserted: a create that finds the id taken changes nothing,
    so of two starts racing for one id, the loser cannot replace what the
    winner wrote with its run.

    Result: ``(stored run, created)``.
    """

    run: Run
    checkpoints: tuple[Checkpoint, ...] = ()
    records: tuple[RunRecord, ...] = ()


@final
@attrs.define(frozen=True)
class UpdateRun:
    """Change fields of a run.

    ``changes`` maps `Run` field names to new values (``updated_at`` is among
    them when the caller wants it changed). With ``expect_status``, the run
    must be in one of those statuses; with ``expect_owner``, its lease must be
    held by that owner (and not lapsed at ``now``). A failed expectation rolls
    back the whole batch and raises `WriteConflict` (status) or
    `LeaseLostError` (owner). With ``strict=False`` a failed expectation
    only skips this operation. Result: whether the run was changed.
    """

    run_id: str
    changes: dict[str, Any]
    expect_status: frozenset[RunStatus] | None = None
    expect_owner: str | None = None
    now: float | None = None
    strict: bool = True


@final
@attrs.define(frozen=True)
class PutCheckpoint:
    """Insert or replace a checkpoint. Result: None."""

    checkpoint: Checkpoint


@final
@attrs.define(frozen=True)
class ClaimCheckpoint:
    """Replace a checkpoint only if the stored one is ``pending`` (and,
    with ``attempt``, its ``attempts`` equal it: a claim made for an attempt
    that another engine superseded meanwhile changes nothing).

    This is the claim write: of several deliveries racing to settle one
    checkpoint, exactly one wins. Result: True if it was written.
    """

    checkpoint: Checkpoint
    attempt: int | None = None


@final
@attrs.define(frozen=True)
class SettleCheckpoint:
    """Settle a ``pending`` checkpoint in place, keeping its other fields.

    With ``attempt``, the checkpoint's ``attempts`` must equal it (a failure
    of an attempt that was superseded changes nothing). With
    ``unless_run_status``, nothing happens if the run is in one of those
    statuses (results for cancelled or completed runs are dropped). With
    ``kind`` and ``name``, the checkpoint must be of that kind and name (a
    stray result for the same seq of another operation changes nothing).
    With ``or_failed_with`` (an error code), a checkpoint that is ``failed``
    with that code is settled too, as if it were pending: a ``fail_fast``
    fan settles the members it cancels as failed (code ``fan_cancelled``),
    and a success that arrives for one of them later is kept on it. With
    ``append_error``, ``error`` is also added at the end of the
    checkpoint's ``errors``: a step's last attempt failed, and ``errors``
    lists every attempt's error. With ``execution`` (an execution id), the
    checkpoint's ``executions`` must hold it: the result answers a dispatch
    made since the checkpoint was recorded, not one of an earlier
    execution of its run or of another run under the same id. With
    ``unless_rerun``, nothing happens if the checkpoint is ``rerun`` (a
    result without an execution id cannot tell it from what its run
    recorded at that seq before a retry).

    Result: the settled row, or None if the checkpoint was missing or no
    longer pending (a duplicate or late settle changes nothing).
    """

    run_id: str
    seq: int
    status: CheckpointStatus
    output: str | None = None
    error: ErrorInfo | None = None
    finished_at: float | None = None
    attempt: int | None = None
    unless_run_status: frozenset[RunStatus] | None = None
    kind: CheckpointKind | None = None
    name: str | None = None
    or_failed_with: str | None = None
    append_error: bool = False
    execution: str | None = None
    unless_rerun: bool = False


@final
@attrs.define(frozen=True)
class RescheduleCheckpoint:
    """Record a failed attempt of a pending checkpoint and schedule the next.

    Applies only if the checkpoint is pending with ``attempts == attempt``
    (a stale failure of an earlier attempt changes nothing), of ``kind`` and
    ``name`` when given, its ``executions`` hold ``execution`` and it is not
    ``rerun`` with ``unless_rerun`` (as for `SettleCheckpoint`), and the
    run's status is not in ``unless_run_status``. Then ``attempts`` grows by one,
    ``error`` is appended to ``errors``, ``started_at`` is cleared (the next
    attempt is not dispatched yet) and ``wake_at`` is set to when it is due.
    Result: the updated row, or None.
    """

    run_id: str
    seq: int
    attempt: int
    error: ErrorInfo
    wake_at: float
    unless_run_status: frozenset[RunStatus] | None = None
    kind: CheckpointKind | None = None
    name: str | None = None
    execution: str | None = None
    unless_rerun: bool = False


WHOLE_RUN: Final = 0
"""The seq under which a run itself, not one of its steps, holds or waits
for a slot of a flow-control queue (it waits for admission before its body
runs; no step has seq 0). A run waits in one such queue at most.

Such a holder has no checkpoint: while it holds its slot, the store keeps a
record of kind `QUEUE_SLOT` for its run (`queue_slot_record`), written by
the write that gives it the slot (an `AdmitToQueue`, or a
`ReleaseQueueSlot` that lets it in) and deleted by the one that frees it,
so the run reads whether it holds one with its other records. It no
longer needs a slot once its run has ended (or is gone): a release passes
it by, and asking for it takes nothing. Its run gives its slot back
itself, in the write that ends it (under its lease), so `ReleaseQueueSlot`
frees it whatever the run's status."""

QUEUED: Final = "queued"
"""The code of the `Mark` of a step waiting in a flow-control queue's line:
the store clears the mark (and the step's ``wake_at``, its next look at the
line) when it lets the step in, so that its run's next turn sends it."""

QUEUE_SLOT: Final = "queue_slot"
"""The kind of the record a store keeps for a run that holds a slot as a
whole run (see `WHOLE_RUN`)."""


def queue_slot_record(run_id: str, queue: str) -> RunRecord:
    """The record a store keeps for ``run_id`` while it holds a slot of
    ``queue`` as a whole run: its input is the queue's name (JSON)."""
    return RunRecord(run_id=run_id, kind=QUEUE_SLOT, input=json.dumps(queue))


@final
@attrs.define(frozen=True)
class AdmitToQueue:
    """Ask a flow-control queue for a slot for the step at ``(run_id, seq)``
    (or for the run itself, at `WHOLE_RUN`).

    The step's pending checkpoint must exist and carry the `QUEUED` mark
    (its ``mark``'s code). If fewer than ``limit`` steps hold a slot of
    ``queue`` and no waiter of higher priority is ahead, the step takes a
    slot and the mark is cleared, with the checkpoint's ``wake_at`` (its next
    look at the line): it may be sent at once. Otherwise it waits in
    line, by priority (higher first), then by arrival. Asking again while
    holding or waiting changes nothing. Result: True if it holds a slot.
    """

    queue: str
    run_id: str
    seq: int
    priority: int
    limit: int
    at: float


@final
@attrs.define(frozen=True)
class ReleaseQueueSlot:
    """Give back the slot of ``queue`` that ``(run_id, seq)`` holds, if its
    checkpoint is no longer pending or its run has ended (at `WHOLE_RUN`:
    whenever it is held), then let waiters in while fewer than ``limit``
    hold slots.

    The slot row is deleted once, so of several deliveries settling one step
    exactly one releases it. A waiter whose checkpoint is no longer pending,
    or whose run ended, is dropped instead of let in. Each waiter let in has
    its `QUEUED` mark and its ``wake_at`` cleared, so it is due at once.
    Result: the ``(run_id, seq)`` of the steps let in (their runs need a turn
    to send them).
    """

    queue: str
    run_id: str
    seq: int
    limit: int


@final
@attrs.define(frozen=True)
class DeleteCheckpoints:
    """Delete the checkpoints at ``seqs`` of a run. Result: None."""

    run_id: str
    seqs: tuple[int, ...]


@final
@attrs.define(frozen=True)
class WaitSignal:
    """Register a waiter for ``token`` at ``(run_id, seq)``, unless a signal is
    buffered for it.

    If a payload is buffered, the oldest one is consumed and the pending
    checkpoint at ``(run_id, seq)`` is settled as completed with it, in the
    same atomic write, so a consumed signal can never be lost; the result is
    that payload (JSON text). Otherwise the waiter is registered and the
    result is None.
    """

    token: str
    run_id: str
    seq: int
    at: float | None = None


@final
@attrs.define(frozen=True)
class DeliverSignal:
    """Deliver a signal for ``token``.

    If a waiter is registered, its pending checkpoint is settled as completed
    with ``payload`` and the waiter removed; result ``(run_id, seq)``. If the
    waiter's checkpoint is no longer pending, or there is no waiter, the
    payload is buffered for the next wait; result None.
    """

    token: str
    payload: str
    at: float | None = None


@final
@attrs.define(frozen=True)
class RemoveSignalWaiter:
    """Remove the waiter for ``token``, if any. Result: None."""

    token: str


@final
@attrs.define(frozen=True)
class LockRun:
    """Take or extend a run's lease.

    Succeeds when the run's lease is free, lapsed at ``now``, or already held
    by ``owner``; then the lease is ``owner`` until ``expiry``. Taking over a
    lapsed lease of another owner increments the run's ``recoveries``. Result:
    True if the lease is now held by ``owner``.
    """

    run_id: str
    owner: str
    expiry: float
    now: float


@final
@attrs.define(frozen=True)
class ReleaseRun:
    """Give up a run's lease if ``owner`` holds it. Result: None."""

    run_id: str
    owner: str


AnnounceKind = Literal[
    "wake", "cancel", "end", "breakpoints", "due", "schedules", "values", "stream", "builds"
]


@final
@attrs.define(frozen=True, kw_only=True)
class Announce:
    """Tell the processes watching the store (`RunWatch.watch`) that a run
    changed, once the batch commits (a batch that fails announces nothing).
    Only a `RunWatch` store takes it. Result: None.

    Attributes:
      run_id: The run.
      kind: ``"wake"``: the run needs a turn (a client started, signalled or
        retried it, or an engine that lacks its workflow passes it on);
        ``"cancel"``: it was told to cancel (a turn in flight is cut short);
        ``"end"``: it ended (callers waiting for its result read it);
        ``"breakpoints"``: breakpoints were set or cleared (``run_id`` is
        the breakpoint's id), engines read them again;
        ``"due"``: the run (a debounce window's, not to be started yet)
        is due at a time its engines' pollers may not know: they look
        again;
        ``"schedules"``: a schedule was created, changed or deleted
        (``run_id`` is its name), engines read their schedules again;
        ``"values"``: the run wrote keyed values its callers wait for (a
        published value, an update's outcome), they read again.
        ``"stream"``: the run emitted values (readers of its stream read);
        ``"builds"``: a workflow's deployment changed (``run_id`` is the
        workflow's name), engines read the deployments again.
      workflow: Its workflow, or None if the writer does not know it.
      version: Its version, or None.
      origin: Who wrote it (an engine or client id); its own watch skips it.
    """

    run_id: str
    kind: AnnounceKind
    workflow: str | None = None
    version: str | None = None
    origin: str


@final
@attrs.define(frozen=True)
class PutValue:
    """Insert, replace or delete the keyed value at ``(scope, key)`` (a
    `StoredValue`), stamped ``at``.

    ``value`` is JSON text, or None to delete the row. A value inserted has
    version 1; each write of a stored one adds 1. With ``expect_version``
    the write applies only if the row is absent (``0``) or stored with that
    version (``n > 0``); None writes whatever is stored. A failed
    expectation rolls back the whole batch and raises `WriteConflict`; with
    ``strict=False`` it only skips this operation. Result: the new version
    (0 after a delete, whether a row was there or not), or None if skipped.

    ``run_id`` names the run the value goes with: `Store.prune_runs`
    deletes it with that run (a claim, a window, a stream value...). A
    write with ``run_id`` None keeps the run a stored value goes with; one
    that names a run hands the value over to it (a claim taken over).
    """

    scope: str
    key: str
    value: str | None
    at: float
    expect_version: int | None = None
    strict: bool = True
    run_id: str | None = None


Op = (
    CreateRun
    | UpdateRun
    | PutCheckpoint
    | ClaimCheckpoint
    | SettleCheckpoint
    | RescheduleCheckpoint
    | AdmitToQueue
    | ReleaseQueueSlot
    | DeleteCheckpoints
    | WaitSignal
    | DeliverSignal
    | RemoveSignalWaiter
    | LockRun
    | ReleaseRun
    | Announce
    | HookOp
    | RecordOp
    | PutValue
)
