"""A store of your own: the worked example of docs/writing-a-store.md.

`CountingStore` counts the operations the engine writes, by kind, and keeps
the rows themselves in a `trio_durable.MemoryStore`. It imports only public
names, implements the `trio_durable.stores.Store` protocol, and passes the
store conformance suite (tests/test_writing_a_store.py runs it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import trio_durable as td
from trio_durable.stores import (
    CheckpointStatus,
    FanCounts,
    Op,
    QueueDepth,
    RunFilter,
    RunRecord,
    RunStamp,
    RunStatus,
    StoredValue,
    StoreHelpers,
    StoreStatistics,
    TurnState,
    Webhook,
)


class CountingStore(StoreHelpers):
    """A `Store` that counts, by kind, the operations applied through it."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner
        # Engines that share a store (and a broker) share a results queue
        # named after its scope: say which database this is.
        self.scope = inner.scope
        self.applied: Counter[str] = Counter()

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        results = await self.inner.apply(ops)
        # Counted once the batch is written: a batch that raised wrote nothing.
        self.applied.update(type(op).__name__ for op in ops)
        return results

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        return await self.inner.begin_turn(run_id, owner, expiry, now)

    # The reads go straight through.

    async def get_run(self, run_id: str) -> td.Run | None:
        return await self.inner.get_run(run_id)

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[td.Run]:
        return await self.inner.list_runs(
            statuses=statuses, workflow=workflow, parent_id=parent_id, limit=limit
        )

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[td.Checkpoint]:
        return await self.inner.get_checkpoints(run_id, from_seq, to_seq)

    async def get_records(self, run_id: str) -> list[RunRecord]:
        return await self.inner.get_records(run_id)

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        return await self.inner.count_checkpoints(run_id, from_seq, to_seq, statuses, limit)

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[td.Run]:
        return await self.inner.find_runs(where, before=before, limit=limit)

    async def count_runs(self, where: RunFilter) -> dict[RunStatus, int]:
        return await self.inner.count_runs(where)

    async def fan_counts(self, run_id: str) -> list[FanCounts]:
        return await self.inner.fan_counts(run_id)

    async def queue_depths(self) -> list[QueueDepth]:
        return await self.inner.queue_depths()

    async def queue_position(self, queue: str, run_id: str, seq: int) -> int | None:
        return await self.inner.queue_position(queue, run_id, seq)

    async def run_stamp(self, run_id: str) -> RunStamp | None:
        return await self.inner.run_stamp(run_id)

    async def get_webhook(self, token_hash: str) -> Webhook | None:
        return await self.inner.get_webhook(token_hash)

    async def list_breakpoints(self) -> list[td.Breakpoint]:
        return await self.inner.list_breakpoints()

    async def paused_steps(self, run_id: str | None = None) -> list[td.PausedStep]:
        return await self.inner.paused_steps(run_id)

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        return await self.inner.get_value(scope, key)

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        return await self.inner.list_values(scope, prefix=prefix, after=after, limit=limit)

    async def find_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        *,
        statuses: Collection[CheckpointStatus] | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[td.Checkpoint]:
        return await self.inner.find_checkpoints(
            run_id, from_seq, to_seq, statuses=statuses, offset=offset, limit=limit
        )

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        return await self.inner.prune_runs(older_than, limit)

    async def prune_values(self, scope: str, older_than: float, limit: int) -> int:
        return await self.inner.prune_values(scope, older_than, limit)

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        return await self.inner.list_due_runs(now, limit)

    async def next_due_time(self) -> float | None:
        return await self.inner.next_due_time()

    async def list_stalled_runs(self, limit: int) -> list[str]:
        return await self.inner.list_stalled_runs(limit)

    async def buffered_signals(self, token: str) -> list[str]:
        return await self.inner.buffered_signals(token)

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        return await self.inner.signal_waiter(token)

    def statistics(self) -> StoreStatistics:
        return self.inner.statistics()

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def open_counting_store(url: str = "counting://") -> AsyncIterator[CountingStore]:
    """Open a fresh `CountingStore`, and close it on exit.

    Registered under the entry-point group ``trio_durable.stores`` as
    ``counting``, it is what ``td.open_store("counting://")`` opens.
    """
    if url != "counting://":
        raise td.InvalidURLError(f"a counting store URL is 'counting://', not {url!r}")
    store = CountingStore(td.MemoryStore())
    try:
        yield store
    finally:
        await store.aclose()
