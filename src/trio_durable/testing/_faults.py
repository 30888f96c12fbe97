"""Fault injection for simulations: a store whose writes fail on purpose.

`FaultyStore` wraps a `MemoryStore`. Each write may fail *before* it is
applied (nothing changed) or *after* (everything changed, yet the caller is
told it failed: the case of a timeout on a commit that went through). Both
raise `StoreError`, which the engine must survive without losing or
duplicating work. Every choice comes from the simulation's seeded random
source. The wrapper also records every checkpoint (and remote workflow's decision
record) that a write moves from pending to settled, so the harness can
check that each one settles once.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any, final

import attrs
import trio

from .._base._exceptions import StoreError
from .._base._failures import FAN_CANCELLED, LOST
from .._base._records import (
    Checkpoint,
)
from .._base._run_records import RunRecord
from .._kernel._decision_record import DECISION
from .._stores._base import ChangeFeed, TurnState
from .._stores._memory import MemoryStore
from .._stores._ops import DeleteCheckpoints, Op
from .._stores._record_ops import ClaimRecord, DeleteRecords, PutRecord, SettleRecord
from .._stores._wrapping import StoreWrapper

Key = tuple[str, int | str]
"""A checkpoint, by run and seq; a decision record, by run and kind."""
Row = Checkpoint | RunRecord


@final
@attrs.define(frozen=True, kw_only=True)
class Faults:
    """Which faults a simulation injects, and how often (all drawn from the
    simulation's seed).

    Attributes:
      duplicate: Probability that the broker delivers a message twice.
      delay: Messages become visible after up to this many seconds.
      reorder: The broker delivers visible messages in random order.
      store_fail_before: Probability that a store write fails unapplied.
      store_fail_after: Probability that a store write is applied and then
        reported as failed.
      engine_crashes: How many engine crashes (its nursery cancelled, its
        leases left to lapse) happen over the simulation; each engine comes
        back after a downtime.
      worker_crashes: The same for workers (their unacked tasks go back to
        the broker, their announcements expire).
      clock_jumps: How many times the clock jumps ahead, across lease and
        timer deadlines.
      forge: Probability that an intruder publishes a forged message beside
        each task the fleet sends (a result for it, or a task of its own;
        see `trio_durable.testing._forgery`). Only with ``signing=``: a
        fleet that signs nothing accepts anything, by design.
    """

    duplicate: float = 0.0
    delay: float = 0.0
    reorder: bool = False
    store_fail_before: float = 0.0
    store_fail_after: float = 0.0
    engine_crashes: int = 0
    worker_crashes: int = 0
    clock_jumps: int = 0
    forge: float = 0.0

    @classmethod
    def none(cls) -> Faults:
        """No faults: the reference execution."""
        return cls()

    @classmethod
    def everything(cls) -> Faults:
        """A mix of every fault, at rates that keep a run of an hour busy."""
        return cls(
            duplicate=0.05,
            delay=2.0,
            reorder=True,
            store_fail_before=0.01,
            store_fail_after=0.01,
            engine_crashes=3,
            worker_crashes=3,
            clock_jumps=2,
            forge=0.05,
        )


def _kept_late(old: Row, new: Row) -> bool:
    """A late success kept on a step settled failed before its result came
    (a cancelled fan member, a lost step): no second settle."""
    return (
        old.status == "failed"
        and old.error is not None
        and old.error.code in (FAN_CANCELLED, LOST)
        and new.status == "completed"
    )


@final
class FaultyStore(StoreWrapper, ChangeFeed):
    """A `MemoryStore` whose writes fail on purpose (see `Faults`): every
    other method of the protocol passes through (`StoreWrapper`).

    Args:
      inner: The memory store.
      rng: Where the faults are drawn from.
      faults: Which to inject.
      inspect: Shown every batch of operations as it arrives.
    """

    inner: MemoryStore

    def __init__(
        self,
        inner: MemoryStore,
        rng: random.Random,
        faults: Faults,
        inspect: Callable[[Sequence[Op]], None] | None = None,
    ) -> None:
        self.inner = inner
        # Shown every batch of operations as it arrives, applied or not
        # (what reaches the store, for `_sealed`).
        self.inspect = inspect
        # Set (and replaced) at each write (a turn's lease write included),
        # for crashes that land in the middle of an engine's work.
        self.wrote = trio.Event()
        self.scope = inner.scope
        self._rng = rng
        self._faults = faults
        self.armed = True
        self.injected: list[str] = []
        # (run id, seq or record kind) -> how many times a write settled
        # it, and how many times a retry reset it (after which it may
        # settle again).
        self.settles: dict[Key, int] = {}
        self.resets: dict[Key, int] = {}

    def _fault(self, kind: str, probability: float) -> bool:
        if not self.armed or probability <= 0 or self._rng.random() >= probability:
            return False
        self.injected.append(kind)
        return True

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if self.inspect is not None:
            self.inspect(ops)
        self.wrote.set()
        self.wrote = trio.Event()
        if self._fault("store.fail_before", self._faults.store_fail_before):
            await trio.lowlevel.checkpoint()
            raise StoreError("injected: the write failed before it was applied")
        # The snapshot, the write and the count happen with no checkpoint
        # between: a snapshot taken before the store's own checkpoint could
        # be stale by the time the write lands, and count another writer's
        # settle as this one's.
        await self.inner._enter()
        before = self._pending_states(ops)
        results = self.inner.apply_entered(ops)
        self._record(before, ops)
        if self._fault("store.fail_after", self._faults.store_fail_after):
            raise StoreError("injected: the write was applied, then reported as failed")
        return results

    def _pending_states(self, ops: Sequence[Op]) -> dict[Key, tuple[str | None, Row | None]]:
        keys: set[Key] = set()
        for op in ops:
            if isinstance(op, PutRecord | ClaimRecord):
                if op.record.kind == DECISION:
                    keys.add((op.record.run_id, DECISION))
            elif isinstance(op, SettleRecord):
                if op.kind == DECISION:
                    keys.add((op.run_id, DECISION))
            elif isinstance(op, DeleteRecords):
                if DECISION in op.kinds:
                    keys.add((op.run_id, DECISION))
            elif isinstance(op, DeleteCheckpoints):
                keys.update((op.run_id, seq) for seq in op.seqs)
            else:
                checkpoint = getattr(op, "checkpoint", None)
                if isinstance(checkpoint, Checkpoint):
                    keys.add((checkpoint.run_id, checkpoint.seq))
                elif isinstance(run_id := getattr(op, "run_id", None), str) and hasattr(op, "seq"):
                    keys.add((run_id, op.seq))
            token = getattr(op, "token", None)
            if token is not None and token in self.inner._waiters:
                keys.add(self.inner._waiters[token])
        return {key: (self._status(key), self._row(key)) for key in keys}

    def _row(self, key: Key) -> Row | None:
        run_id, where = key
        if isinstance(where, str):
            return self.inner._records.rows.get(run_id, {}).get(where)
        return self.inner._checkpoints.get(run_id, {}).get(where)

    def _status(self, key: Key) -> str | None:
        cp = self._row(key)
        return None if cp is None else cp.status

    def _record(self, before: dict[Key, tuple[str | None, Row | None]], ops: Sequence[Op]) -> None:
        for key, (old, old_row) in before.items():
            new = self._status(key)
            new_row = self._row(key)
            settled = ("completed", "failed")
            if _decision_applied(old_row, new_row):
                # A remote workflow's decision record, its decision
                # applied: the next decision task's answer settles it again.
                self.resets[key] = self.resets.get(key, 0) + 1
            elif old in settled and new in settled and new_row != old_row:
                # A settled checkpoint written again with another record: a
                # second settle (retirements of handoffs rename, not settle;
                # a late success kept on a member a fail_fast fan cancelled
                # replaces no outcome the run used).
                if (
                    new_row is not None
                    and old_row is not None
                    and getattr(new_row, "name", None) == getattr(old_row, "name", None)
                    and not _kept_late(old_row, new_row)
                ):
                    self.settles[key] = self.settles.get(key, 0) + 1
            elif old == "pending" and new in settled:
                self.settles[key] = self.settles.get(key, 0) + 1
            elif old in settled and new in ("pending", None):
                self.resets[key] = self.resets.get(key, 0) + 1
            elif old is None and new in settled:
                # Recorded settled at once (a local step, a timer that was due).
                self.settles[key] = self.settles.get(key, 0) + 1

    # -- the lease write, and the change feed; the rest passes through ---------

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        self.wrote.set()
        self.wrote = trio.Event()
        if self._fault("store.fail_before", self._faults.store_fail_before):
            await trio.lowlevel.checkpoint()
            raise StoreError("injected: the lease write failed")
        return await self.inner.begin_turn(run_id, owner, expiry, now)

    def run_end_event(self, run_id: str) -> trio.Event:
        return self.inner.run_end_event(run_id)

    def due_event(self, before: float) -> trio.Event:
        return self.inner.due_event(before)

    def unwoken_runs(self) -> int:
        return self.inner.unwoken_runs()

    def unwoken_event(self) -> trio.Event:
        return self.inner.unwoken_event()


def _decision_applied(old: Row | None, new: Row | None) -> bool:
    return (
        isinstance(old, RunRecord)
        and new is not None
        and old.kind == DECISION
        and old.status == "completed"
        and old.output is not None
        and new.status == "completed"
        and new.output is None
    )
