"""The in-memory store: dictionaries on the Trio thread.

It keeps everything in this process, so it suits tests, simulations and
benchmarks of the engine itself. It never touches a thread, which keeps
`trio.testing.MockClock`'s autojump working. A batch is atomic: each mutation
pushes an undo onto a journal, and a failed expectation replays the journal
backwards.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import os
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, final

import attrs
import trio

from .._base._exceptions import InvalidURLError
from .._base._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    Run,
)
from .._base._urls import mask_url
from ._base import StoreStatistics, TurnState, run_due_at
from ._helpers import StoreHelpers
from ._memory_hooks import MemoryHooks, put_undoable
from ._memory_queries import MemoryQueries
from ._memory_reads import MemoryReads
from ._memory_records import MemoryRecords
from ._memory_values import MemoryValues
from ._ops import (
    QUEUE_SLOT,
    QUEUED,
    WHOLE_RUN,
    AdmitToQueue,
    Announce,
    ClaimCheckpoint,
    CreateRun,
    DeleteCheckpoints,
    DeliverSignal,
    LockRun,
    Op,
    PutCheckpoint,
    PutValue,
    ReleaseQueueSlot,
    ReleaseRun,
    RemoveSignalWaiter,
    RescheduleCheckpoint,
    SettleCheckpoint,
    UpdateRun,
    WaitSignal,
    queue_slot_record,
)
from ._record_ops import ClaimRecord, DeleteRecords, PutRecord, SettleRecord
from ._rules import expectation_failure, op_applies, rescheduled, take_lease
from ._watch import LocalWatches

_Undo = Callable[[], None]
_instances = itertools.count(1)


@final
class MemoryStore(MemoryReads, MemoryQueries, MemoryValues, StoreHelpers):
    """A `Store` that keeps its rows in this process's memory.

    One instance may be shared by several engines in one Trio run (that is how
    simulations model a fleet on one database). Nothing survives the process.
    """

    def __init__(self) -> None:
        # Names the fleet of engines sharing this store, so their results
        # queue on a shared broker is theirs alone: also against memory
        # stores of other processes on one broker server (hence the pid).
        self.scope = f"memory-{os.getpid()}-{next(_instances)}"
        self._runs: dict[str, Run] = {}
        self._checkpoints: dict[str, dict[int, Checkpoint]] = {}
        # run id -> status -> sorted seqs, so a count over a seq range is two
        # bisections instead of a scan (the join barrier asks once per batch).
        self._by_status: dict[str, dict[str, list[int]]] = {}
        self._due: dict[str, float] = {}
        self._due_heap: list[tuple[float, str]] = []
        self._waiters: dict[str, tuple[str, int]] = {}
        self._buffered: dict[str, list[str]] = {}
        self._stats = StoreStatistics()
        self._closed = False
        self._end_events: dict[str, trio.Event] = {}
        # queue -> holders (run id, seq), and queue -> waiters in admission
        # order; both immutable values so the journal can restore them.
        self._holders: dict[str, frozenset[tuple[str, int]]] = {}
        self._waiting: dict[str, tuple[tuple[int, float, int, str, int], ...]] = {}
        self._arrivals = 0
        self._due_watchers: list[tuple[float, trio.Event]] = []
        # Suspended runs with no wake time: the only ones that can stall.
        self._unwoken: dict[str, None] = {}
        self._unwoken_event = trio.Event()
        # Announcements reach the watches of engines and clients in this
        # process (`RunWatch`).
        self._watches = LocalWatches()
        self.watch = self._watches.watch
        self._hooks = MemoryHooks()
        self._records = MemoryRecords()
        self._values, self._value_keys, self._values_of_run = {}, {}, {}

    # -- change feed ----------------------------------------------------------
    # Engines sharing this store live in this process, so instead of polling
    # they can wait for the change itself. That keeps a 30-day timer under
    # MockClock from costing a poll every few virtual seconds.

    def run_end_event(self, run_id: str) -> trio.Event:
        """An event set when the run reaches a terminal status (at once if it
        already has)."""
        event = self._end_events.get(run_id)
        if event is None:
            event = self._end_events[run_id] = trio.Event()
            run = self._runs.get(run_id)
            if run is not None and run.status in TERMINAL_STATUSES:
                event.set()
        return event

    def due_event(self, before: float) -> trio.Event:
        """An event set when a run becomes due earlier than ``before``.

        Set it yourself once you no longer wait for it: the store then drops
        it.
        """
        event = trio.Event()
        self._due_watchers = [w for w in self._due_watchers if not w[1].is_set()]
        self._due_watchers.append((before, event))
        return event

    def unwoken_runs(self) -> int:
        """How many runs are suspended with no wake time."""
        return len(self._unwoken)

    def unwoken_event(self) -> trio.Event:
        """An event set when a run may have stalled: it became suspended with
        no wake time, or a checkpoint of such a run changed."""
        return self._unwoken_event

    def _may_stall(self) -> None:
        self._unwoken_event.set()
        self._unwoken_event = trio.Event()

    def _notify(self, run: Run, due: float | None) -> None:
        if run.status in TERMINAL_STATUSES:
            event = self._end_events.pop(run.id, None)
            if event is not None:
                event.set()
        if due is not None and self._due_watchers:
            keep: list[tuple[float, trio.Event]] = []
            for before, event in self._due_watchers:
                if event.is_set():
                    continue
                if due < before:
                    event.set()
                else:
                    keep.append((before, event))
            self._due_watchers = keep

    # -- bookkeeping ----------------------------------------------------------

    def statistics(self) -> StoreStatistics:
        return self._stats

    async def aclose(self) -> None:
        self._closed = True
        await trio.lowlevel.checkpoint()

    async def _enter(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        await trio.lowlevel.checkpoint()

    def _set_run(self, run: Run, journal: list[_Undo]) -> None:
        old = self._runs.get(run.id)
        old_due = self._due.get(run.id)
        self._runs[run.id] = run
        self._set_due(run.id, run_due_at(run))
        self._set_unwoken(run)

        def undo() -> None:
            if old is None:
                del self._runs[run.id]
                self._unwoken.pop(run.id, None)
            else:
                self._runs[run.id] = old
                self._set_unwoken(old)
            self._set_due(run.id, old_due)

        journal.append(undo)

    def _set_unwoken(self, run: Run) -> None:
        if run.status == "suspended" and run.wake_at is None:
            if run.id not in self._unwoken:
                self._unwoken[run.id] = None
                self._may_stall()
        else:
            self._unwoken.pop(run.id, None)

    def _set_due(self, run_id: str, due: float | None) -> None:
        if due is None:
            self._due.pop(run_id, None)
        elif self._due.get(run_id) != due:
            self._due[run_id] = due
            heapq.heappush(self._due_heap, (due, run_id))

    def _index_add(self, run_id: str, status: str, seq: int) -> None:
        seqs = self._by_status.setdefault(run_id, {}).setdefault(status, [])
        bisect.insort(seqs, seq)

    def _index_remove(self, run_id: str, status: str, seq: int) -> None:
        seqs = self._by_status[run_id][status]
        del seqs[bisect.bisect_left(seqs, seq)]

    def _set_checkpoint(
        self, cp: Checkpoint | None, key: tuple[str, int], journal: list[_Undo]
    ) -> None:
        run_id, seq = key
        table = self._checkpoints.setdefault(run_id, {})
        old = table.get(seq)
        self._replace_checkpoint(table, key, old, cp)
        if run_id in self._unwoken:
            # What a suspended run waits for may just have been settled: if
            # the wake that should follow is lost, the run stalls here.
            self._may_stall()

        def undo() -> None:
            self._replace_checkpoint(table, key, cp, old)

        journal.append(undo)

    def _replace_checkpoint(
        self,
        table: dict[int, Checkpoint],
        key: tuple[str, int],
        old: Checkpoint | None,
        new: Checkpoint | None,
    ) -> None:
        run_id, seq = key
        if old is not None:
            self._index_remove(run_id, old.status, seq)
        if new is None:
            table.pop(seq, None)
        else:
            table[seq] = new
            self._index_add(run_id, new.status, seq)

    # -- writes ---------------------------------------------------------------

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        await self._enter()
        return self.apply_entered(ops)

    def apply_entered(self, ops: Sequence[Op]) -> list[Any]:
        """Apply `ops` as one batch, at once: what `apply` does after its
        checkpoint, for a wrapper that must see the rows just before and
        just after, with no other write between."""
        journal: list[_Undo] = []
        results: list[Any] = []
        try:
            for op in ops:
                results.append(self._apply_one(op, journal))
        except BaseException:
            for undo in reversed(journal):
                undo()
            raise
        for op in ops:
            if isinstance(op, CreateRun | UpdateRun | LockRun | ReleaseRun):
                run_id = op.run.id if isinstance(op, CreateRun) else op.run_id
                run = self._runs.get(run_id)
                if run is not None:
                    self._notify(run, self._due.get(run_id))
        self._stats.batches += 1
        self._stats.ops += len(ops)
        self._stats.transactions += 1
        self._watches.publish([op for op in ops if isinstance(op, Announce)])
        return results

    def _apply_one(self, op: Op, journal: list[_Undo]) -> Any:
        match op:
            case CreateRun(run):
                existing = self._runs.get(run.id)
                if existing is not None:
                    return (existing, False)
                self._set_run(run, journal)
                for cp in op.checkpoints:
                    self._set_checkpoint(cp, (cp.run_id, cp.seq), journal)
                for record in op.records:
                    self._records.apply(PutRecord(record), run.status, journal)
                return (run, True)
            case UpdateRun():
                current = self._runs.get(op.run_id)
                problem = expectation_failure(current, op)
                if problem is not None:
                    if op.strict:
                        raise problem
                    return False
                assert current is not None
                self._set_run(attrs.evolve(current, **op.changes), journal)
                return True
            case PutCheckpoint(cp):
                self._set_checkpoint(cp, (cp.run_id, cp.seq), journal)
                return None
            case ClaimCheckpoint(cp, attempt):
                existing_cp = self._checkpoints.get(cp.run_id, {}).get(cp.seq)
                if existing_cp is None or existing_cp.status != "pending":
                    return False
                if attempt is not None and existing_cp.attempts != attempt:
                    return False
                self._set_checkpoint(cp, (cp.run_id, cp.seq), journal)
                return True
            case SettleCheckpoint(
                run_id, seq, status, output, error, finished_at, unless_run_status=unless_run_status
            ):
                existing_cp = self._checkpoints.get(run_id, {}).get(seq)
                if existing_cp is None or not op_applies(existing_cp, op):
                    return None
                if unless_run_status and self._run_status(run_id) in unless_run_status:
                    return None
                errors = existing_cp.errors
                if op.append_error and error is not None:
                    errors = (*errors, error)
                settled = attrs.evolve(
                    existing_cp,
                    status=status,
                    output=output,
                    error=error,
                    errors=errors,
                    finished_at=finished_at,
                    mark=None,
                )
                self._set_checkpoint(settled, (run_id, seq), journal)
                return settled
            case RescheduleCheckpoint():
                existing_cp = self._checkpoints.get(op.run_id, {}).get(op.seq)
                if existing_cp is None or not op_applies(existing_cp, op):
                    return None
                if op.unless_run_status and self._run_status(op.run_id) in op.unless_run_status:
                    return None
                retry = rescheduled(existing_cp, op)
                self._set_checkpoint(retry, (op.run_id, op.seq), journal)
                return retry
            case AdmitToQueue(qname, run_id, seq, priority, limit, at):
                key = (run_id, seq)
                holders = self._holders.get(qname, frozenset())
                if key in holders:
                    self._unmark(run_id, seq, journal)
                    return True
                if seq == WHOLE_RUN and self._slot_done(run_id, seq):
                    return False  # its run ended: it needs no slot
                waiting = self._waiting.get(qname, ())
                mine = [w for w in waiting if (w[3], w[4]) == key]
                ahead = [w for w in waiting if (w[3], w[4]) != key and -w[0] > priority]
                if len(holders) < limit and not ahead:
                    put_undoable(self._holders, qname, holders | {key}, journal)
                    if mine:
                        rest = tuple(w for w in waiting if (w[3], w[4]) != key)
                        put_undoable(self._waiting, qname, rest or None, journal)
                    self._unmark(run_id, seq, journal)
                    if seq == WHOLE_RUN:
                        self._hold_slot(run_id, qname, journal)
                    return True
                if not mine:
                    self._arrivals += 1
                    entry = (-priority, at, self._arrivals, run_id, seq)
                    put_undoable(self._waiting, qname, tuple(sorted((*waiting, entry))), journal)
                return False
            case ReleaseQueueSlot(qname, run_id, seq, limit):
                key = (run_id, seq)
                holders = self._holders.get(qname, frozenset())
                if key not in holders or (seq != WHOLE_RUN and not self._slot_done(run_id, seq)):
                    return []
                holders = holders - {key}
                if seq == WHOLE_RUN:
                    self._records.apply(DeleteRecords(run_id, (QUEUE_SLOT,)), None, journal)
                line = list(self._waiting.get(qname, ()))
                admitted: list[tuple[str, int]] = []
                while line and len(holders) < limit:
                    entry = line.pop(0)
                    candidate = (entry[3], entry[4])
                    if self._slot_done(*candidate):
                        continue  # it ended while waiting: it needs no slot
                    holders = holders | {candidate}
                    self._unmark(*candidate, journal)
                    if candidate[1] == WHOLE_RUN:
                        self._hold_slot(candidate[0], qname, journal)
                    admitted.append(candidate)
                put_undoable(self._holders, qname, holders or None, journal)
                put_undoable(self._waiting, qname, tuple(line) or None, journal)
                return admitted
            case DeleteCheckpoints(run_id, seqs):
                for seq in seqs:
                    if seq in self._checkpoints.get(run_id, {}):
                        self._set_checkpoint(None, (run_id, seq), journal)
                return None
            case WaitSignal(token, run_id, seq, at):
                queue = self._buffered.get(token)
                if queue:
                    payload = queue[0]
                    put_undoable(self._buffered, token, queue[1:] or None, journal)
                    self._apply_one(
                        SettleCheckpoint(run_id, seq, "completed", payload, None, at), journal
                    )
                    return payload
                put_undoable(self._waiters, token, (run_id, seq), journal)
                return None
            case DeliverSignal(token, payload, at):
                waiter = self._waiters.get(token)
                if waiter is not None:
                    put_undoable(self._waiters, token, None, journal)
                    settled_cp = self._apply_one(
                        SettleCheckpoint(waiter[0], waiter[1], "completed", payload, None, at),
                        journal,
                    )
                    if settled_cp is not None:
                        return waiter
                queue = self._buffered.get(token, [])
                put_undoable(self._buffered, token, [*queue, payload], journal)
                return None
            case RemoveSignalWaiter(token):
                put_undoable(self._waiters, token, None, journal)
                return None
            case Announce():
                return None  # published by `apply` once the batch held
            case PutValue():
                return self._put_value(op, journal)
            case PutRecord() | ClaimRecord() | SettleRecord() | DeleteRecords():
                run_id = op.record.run_id if isinstance(op, PutRecord | ClaimRecord) else op.run_id
                return self._records.apply(op, self._run_status(run_id), journal)
            case LockRun(run_id, owner, expiry, now):
                return self._lock(run_id, owner, expiry, now, journal) is not None
            case ReleaseRun(run_id, owner):
                current = self._runs.get(run_id)
                if current is not None and current.lease_owner == owner:
                    self._set_run(
                        attrs.evolve(current, lease_owner=None, lease_expiry=None), journal
                    )
                return None
        return self._hooks.apply(op, journal)

    def _slot_done(self, run_id: str, seq: int) -> bool:
        """Whether a step (or, at `WHOLE_RUN`, a run) no longer needs a queue
        slot: its checkpoint is settled (or gone), or its run ended."""
        if seq == WHOLE_RUN:
            return self._run_status(run_id) in (None, *TERMINAL_STATUSES)
        cp = self._checkpoints.get(run_id, {}).get(seq)
        return cp is None or cp.status != "pending" or self._run_status(run_id) in TERMINAL_STATUSES

    def _hold_slot(self, run_id: str, queue: str, journal: list[_Undo]) -> None:
        self._records.apply(PutRecord(queue_slot_record(run_id, queue)), None, journal)

    def _unmark(self, run_id: str, seq: int, journal: list[_Undo]) -> None:
        cp = self._checkpoints.get(run_id, {}).get(seq)
        if (
            cp is not None
            and cp.status == "pending"
            and cp.mark is not None
            and cp.mark.code == QUEUED
        ):
            # Due at once: its run's next turn sends it, not its next look.
            self._set_checkpoint(
                attrs.evolve(cp, mark=None, error=None, wake_at=None), (run_id, seq), journal
            )

    def _run_status(self, run_id: str) -> str | None:
        run = self._runs.get(run_id)
        return None if run is None else run.status

    def _lock(
        self, run_id: str, owner: str, expiry: float, now: float, journal: list[_Undo]
    ) -> Run | None:
        current = self._runs.get(run_id)
        locked = None if current is None else take_lease(current, owner, expiry, now)
        if locked is not None:
            self._set_run(locked, journal)
        return locked

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        await self._enter()
        current = self._runs.get(run_id)
        if current is None or current.status in TERMINAL_STATUSES:
            return None
        journal: list[_Undo] = []
        locked = self._lock(run_id, owner, expiry, now, journal)
        if locked is None:
            return None
        if locked.status in ("pending", "suspended"):
            locked = attrs.evolve(locked, status="running")
            self._set_run(locked, journal)
        checkpoints = tuple(
            self._checkpoints[run_id][seq] for seq in sorted(self._checkpoints.get(run_id, {}))
        )
        self._stats.batches += 1
        self._stats.transactions += 1
        self._stats.run_rows_read += 1
        self._stats.checkpoint_rows_read += len(checkpoints)
        return TurnState(run=locked, checkpoints=checkpoints, records=self._records.of(run_id))


@asynccontextmanager
async def open_memory_store(url: str = "memory://") -> AsyncIterator[MemoryStore]:
    """Open a fresh `MemoryStore`.

    Raises:
      InvalidURLError: The URL is not ``memory://``: it takes no name, user,
        options or path (each store opened is a fresh one).
    """
    if not isinstance(url, str) or url.lower() not in ("memory://", "memory:///"):
        shown = mask_url(url) if isinstance(url, str) else url
        raise InvalidURLError(
            f"a memory store URL is 'memory://' (no name, options or path), not {shown!r}"
        )
    store = MemoryStore()
    try:
        yield store
    finally:
        await store.aclose()
