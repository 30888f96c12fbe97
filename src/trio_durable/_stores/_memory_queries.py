"""The memory store's queries for people and tools: finding runs, summing up
fans, reading checkpoint pages, pruning ended runs (by age, or given by id).

`MemoryQueries` is a part of `MemoryStore` (a base class), kept apart so
each file stays about one thing; it works on the store's dictionaries.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from .._base._records import (
    TERMINAL_STATUSES,
    Checkpoint,
    CheckpointStatus,
    FanCounts,
    QueueDepth,
    Run,
    RunFilter,
    RunStamp,
    RunStatus,
    signal_token_prefix,
)
from ._base import StoreStatistics

if TYPE_CHECKING:
    from ._memory_hooks import MemoryHooks
    from ._memory_records import MemoryRecords


class MemoryQueries:
    """Queries over `MemoryStore`'s rows (see `Store.find_runs` and the
    methods after it)."""

    _runs: dict[str, Run]
    _checkpoints: dict[str, dict[int, Checkpoint]]
    _by_status: dict[str, dict[str, list[int]]]
    _waiters: dict[str, tuple[str, int]]
    _buffered: dict[str, list[str]]
    _hooks: MemoryHooks
    _records: MemoryRecords
    _holders: dict[str, frozenset[tuple[str, int]]]
    _waiting: dict[str, tuple[tuple[int, float, int, str, int], ...]]
    _end_events: dict[str, trio.Event]
    _stats: StoreStatistics

    # `MemoryValues`'s, deleting the values that go with a pruned run.
    _forget_values: Callable[[str], None]

    async def _enter(self) -> None:
        raise NotImplementedError

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[Run]:
        await self._enter()
        found = [
            run
            for run in self._runs.values()
            if where.matches(run) and (before is None or (run.created_at, run.id) < before)
        ]
        found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
        found = found[: max(limit, 0)]
        self._stats.run_rows_read += len(found)
        return found

    async def count_runs(self, where: RunFilter) -> dict[RunStatus, int]:
        await self._enter()
        counts: dict[RunStatus, int] = {}
        for run in self._runs.values():
            if where.matches(run):
                counts[run.status] = counts.get(run.status, 0) + 1
        return dict(sorted(counts.items()))

    async def fan_counts(self, run_id: str) -> list[FanCounts]:
        await self._enter()
        rows: dict[tuple[int, str], list[Checkpoint]] = {}
        for seq in sorted(self._checkpoints.get(run_id, {})):
            cp = self._checkpoints[run_id][seq]
            if cp.parallel_group is not None:
                rows.setdefault((cp.parallel_group, cp.status), []).append(cp)
        return [
            FanCounts(
                fan=fan,
                status=members[0].status,
                count=len(members),
                size=max(m.parallel_size or 0 for m in members),
                first_seq=members[0].seq,
                last_seq=members[-1].seq,
                attempts=sum(m.attempts for m in members),
                first_enqueued_at=min(_present(m.enqueued_at for m in members), default=None),
                last_finished_at=max(_present(m.finished_at for m in members), default=None),
                kind=min(m.kind for m in members),
                name=min(m.name for m in members),
            )
            for (fan, _), members in sorted(rows.items())
        ]

    async def queue_depths(self) -> list[QueueDepth]:
        await self._enter()
        return [
            QueueDepth(
                queue=name,
                admitted=len(self._holders.get(name, ())),
                waiting=len(self._waiting.get(name, ())),
            )
            for name in sorted(self._holders.keys() | self._waiting.keys())
        ]

    async def queue_position(self, queue: str, run_id: str, seq: int) -> int | None:
        await self._enter()
        # The line is kept in admission order: a walk of a tuple in memory,
        # as admission's own.
        for place, entry in enumerate(self._waiting.get(queue, ()), start=1):
            if (entry[3], entry[4]) == (run_id, seq):
                return place
        return None

    async def run_stamp(self, run_id: str) -> RunStamp | None:
        await self._enter()
        run = self._runs.get(run_id)
        if run is None:
            return None
        self._stats.run_rows_read += 1
        table = self._checkpoints.get(run_id, {})
        counts = {"pending": 0, "running": 0, "completed": 0, "failed": 0}
        for cp in table.values():
            counts[cp.status] += 1
        return RunStamp(
            run_id=run.id,
            namespace=run.namespace,
            status=run.status,
            updated_at=run.updated_at,
            lease_owner=run.lease_owner,
            lease_expiry=run.lease_expiry,
            wake_at=run.wake_at,
            recoveries=run.recoveries,
            checkpoints=len(table),
            **counts,
            attempts=sum(cp.attempts for cp in table.values()),
            seq_sum=sum(table),
            last_enqueued_at=max(_present(cp.enqueued_at for cp in table.values()), default=None),
            last_started_at=max(_present(cp.started_at for cp in table.values()), default=None),
            last_finished_at=max(_present(cp.finished_at for cp in table.values()), default=None),
        )

    async def find_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        *,
        statuses: Collection[CheckpointStatus] | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[Checkpoint]:
        await self._enter()
        table = self._checkpoints.get(run_id, {})
        if statuses is None:
            seqs = sorted(table)
        else:
            index = self._by_status.get(run_id, {})
            seqs = sorted(seq for status in set(statuses) for seq in index.get(status, []))
        start = bisect.bisect_left(seqs, from_seq) + max(offset, 0)
        stop = min(bisect.bisect_right(seqs, to_seq), start + max(limit, 0))
        found = [table[seq] for seq in seqs[start:stop]]
        self._stats.checkpoint_rows_read += len(found)
        return found

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        await self._enter()
        doomed: list[str] = []
        for run in sorted(self._runs.values(), key=lambda r: (r.updated_at, r.id)):
            if len(doomed) >= max(limit, 0):
                break
            cutoff = older_than.get(run.status)
            if run.status not in TERMINAL_STATUSES or cutoff is None or run.updated_at >= cutoff:
                continue
            if self._parent_running(run):
                continue
            doomed.append(run.id)
        for run_id in doomed:
            self._forget(run_id)
        self._stats.batches += 1
        self._stats.transactions += 1
        return sorted(doomed)

    async def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        await self._enter()
        if not run_ids:
            return []
        doomed = []
        for run_id in sorted(set(run_ids)):
            run = self._runs.get(run_id)
            if run is None or run.status not in TERMINAL_STATUSES or self._parent_running(run):
                continue
            doomed.append(run_id)
        for run_id in doomed:
            self._forget(run_id)
        self._stats.batches += 1
        self._stats.transactions += 1
        return doomed

    def _parent_running(self, run: Run) -> bool:
        """Whether ``run``'s parent exists and has not ended (it is kept)."""
        parent = None if run.parent_id is None else self._runs.get(run.parent_id)
        return parent is not None and parent.status not in TERMINAL_STATUSES

    def _forget(self, run_id: str) -> None:
        del self._runs[run_id]
        self._checkpoints.pop(run_id, None)
        self._by_status.pop(run_id, None)
        self._end_events.pop(run_id, None)
        for token in [t for t, (owner, _) in self._waiters.items() if owner == run_id]:
            del self._waiters[token]
        prefix = signal_token_prefix(run_id)
        for token in [t for t in self._buffered if t.startswith(prefix)]:
            del self._buffered[token]
        for queue, holders in list(self._holders.items()):
            kept = frozenset(h for h in holders if h[0] != run_id)
            _keep(self._holders, queue, kept)
        for queue, line in list(self._waiting.items()):
            _keep(self._waiting, queue, tuple(w for w in line if w[3] != run_id))
        self._hooks.forget(run_id)
        self._records.forget(run_id)
        self._forget_values(run_id)


def _keep(mapping: dict[str, Any], key: str, value: Any) -> None:
    if value:
        mapping[key] = value
    else:
        del mapping[key]


def _present(values: Any) -> list[float]:
    return [v for v in values if v is not None]
