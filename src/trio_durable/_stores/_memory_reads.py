"""The memory store's reads of the engine's hot path: a run, its checkpoints,
the runs due, signals and hooks.

`MemoryReads` is a part of `MemoryStore` (a base class), kept apart so each
file stays about one thing; it works on the store's dictionaries (the
writes, in `_memory`, keep them and their indexes).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Collection
from typing import TYPE_CHECKING

from .._base._records import (
    TERMINAL_STATUSES,
    Breakpoint,
    Checkpoint,
    CheckpointStatus,
    PausedStep,
    Run,
    RunStatus,
    Webhook,
)
from ._base import StoreStatistics

if TYPE_CHECKING:
    from .._base._run_records import RunRecord
    from ._memory_hooks import MemoryHooks
    from ._memory_records import MemoryRecords


class MemoryReads:
    """`MemoryStore`'s reads (see `Store.get_run` and the methods after it)."""

    _runs: dict[str, Run]
    _checkpoints: dict[str, dict[int, Checkpoint]]
    _by_status: dict[str, dict[str, list[int]]]
    _due: dict[str, float]
    _due_heap: list[tuple[float, str]]
    _unwoken: dict[str, None]
    _waiters: dict[str, tuple[str, int]]
    _buffered: dict[str, list[str]]
    _hooks: MemoryHooks
    _records: MemoryRecords
    _stats: StoreStatistics

    async def _enter(self) -> None:
        raise NotImplementedError

    async def get_run(self, run_id: str) -> Run | None:
        await self._enter()
        run = self._runs.get(run_id)
        if run is not None:
            self._stats.run_rows_read += 1
        return run

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        await self._enter()
        found: list[Run] = []
        for run in sorted(self._runs.values(), key=lambda r: (r.created_at, r.id)):
            if len(found) >= limit:  # before appending, so that limit=0 returns nothing
                break
            if statuses is not None and run.status not in statuses:
                continue
            if workflow is not None and run.workflow != workflow:
                continue
            if parent_id is not None and run.parent_id != parent_id:
                continue
            found.append(run)
        self._stats.run_rows_read += len(found)
        return found

    async def get_records(self, run_id: str) -> list[RunRecord]:
        await self._enter()
        return list(self._records.of(run_id))

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        await self._enter()
        table = self._checkpoints.get(run_id, {})
        if from_seq is not None and to_seq is not None and to_seq - from_seq < len(table):
            # A narrow range (a fan's next members) is looked up, not sorted
            # out of the whole run.
            found = [table[seq] for seq in range(from_seq, to_seq + 1) if seq in table]
        else:
            found = [
                table[seq]
                for seq in sorted(table)
                if (from_seq is None or seq >= from_seq) and (to_seq is None or seq <= to_seq)
            ]
        self._stats.checkpoint_rows_read += len(found)
        return found

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        await self._enter()
        index = self._by_status.get(run_id, {})
        total = 0
        for status in dict.fromkeys(statuses):  # a status named twice counts once
            seqs = index.get(status, [])
            total += bisect.bisect_right(seqs, to_seq) - bisect.bisect_left(seqs, from_seq)
        return total if limit is None else min(total, limit)

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        await self._enter()
        found: list[str] = []
        kept: list[tuple[float, str]] = []
        seen: set[str] = set()
        while self._due_heap and len(found) < limit:
            due, run_id = self._due_heap[0]
            if due > now:
                break
            heapq.heappop(self._due_heap)
            if self._due.get(run_id) != due or run_id in seen:
                continue  # a stale heap entry: the run's due time moved
            seen.add(run_id)
            found.append(run_id)
            kept.append((due, run_id))
        for entry in kept:
            heapq.heappush(self._due_heap, entry)
        return found

    async def next_due_time(self) -> float | None:
        await self._enter()
        while self._due_heap:
            due, run_id = self._due_heap[0]
            if self._due.get(run_id) == due:
                return due
            heapq.heappop(self._due_heap)
        return None

    async def list_stalled_runs(self, limit: int) -> list[str]:
        await self._enter()
        stalled: list[str] = []
        # A scan of the suspended runs without a wake time, once per
        # reconcile interval at most.
        candidates = sorted(
            (self._runs[run_id] for run_id in self._unwoken), key=lambda r: (r.created_at, r.id)
        )
        for run in candidates:
            if len(stalled) >= limit:
                break
            if not any(
                cp.status in ("pending", "running") and not self._detached(cp)
                for cp in self._checkpoints.get(run.id, {}).values()
            ):
                stalled.append(run.id)
        return stalled

    def _detached(self, cp: Checkpoint) -> bool:
        """Whether ``cp`` is a child checkpoint whose child run no longer
        reports to it (it will settle nothing)."""
        if cp.kind != "child" or cp.child_id is None:
            return False
        child = self._runs.get(cp.child_id)
        return child is not None and child.parent_seq != cp.seq

    async def buffered_signals(self, token: str) -> list[str]:
        await self._enter()
        return list(self._buffered.get(token, []))

    async def get_webhook(self, token_hash: str) -> Webhook | None:
        await self._enter()
        return self._hooks.webhooks.get(token_hash)

    async def list_breakpoints(self) -> list[Breakpoint]:
        await self._enter()
        return self._hooks.list_breakpoints()

    async def paused_steps(self, run_id: str | None = None) -> list[PausedStep]:
        await self._enter()
        return [
            paused
            for paused in self._hooks.paused_steps(run_id)
            if (run := self._runs.get(paused.run_id)) is not None
            and run.status not in TERMINAL_STATUSES
        ]

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        await self._enter()
        return self._waiters.get(token)
