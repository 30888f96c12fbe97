"""Stores over other stores (a codec's, large payloads'): what they share.

`StoreWrapper` reads and writes every method of the `Store` protocol
straight through to the store it wraps; a wrapper overrides the methods
that carry payloads and inherits the rest, which read none (counts, due
times, stamps, queues, ...). What a wrapper does not define (a store's own
extras, such as a memory store's scope) is the wrapped store's.

The optional protocols (`ChangeFeed`, `RunWatch`) are checked on the class,
not through ``__getattr__``, so `wrapped` gives a wrapper the variant of its
class that offers those of them the wrapped store offers. `RunDeleter`'s
``delete_runs`` every wrapper has (the blob store's deletes blobs after
it): `check_deletes_runs` asks whether the store under the wrappers has it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import trio

from .._base._records import (
    Breakpoint,
    Checkpoint,
    CheckpointStatus,
    FanCounts,
    PausedStep,
    QueueDepth,
    Run,
    RunFilter,
    RunStamp,
    RunStatus,
    StoredValue,
    Webhook,
)
from .._base._run_records import RunRecord
from ._base import (
    ChangeFeed,
    RunDeleter,
    RunWatch,
    Store,
    StoreStatistics,
    TurnState,
    cannot_delete_runs,
    delete_runs,
    offers,
)
from ._helpers import StoreHelpers
from ._ops import Announce, Op

W = TypeVar("W", bound="StoreWrapper")


class StoreWrapper(StoreHelpers):
    """A `Store` that passes everything to ``inner``; subclasses override
    what carries payloads."""

    inner: Store

    def __getattr__(self, name: str) -> Any:
        # Only reached for what the class does not define: a store's extras.
        if name.startswith("_") or name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(ops)

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        return await self.inner.begin_turn(run_id, owner, expiry, now)

    async def get_run(self, run_id: str) -> Run | None:
        return await self.inner.get_run(run_id)

    async def get_records(self, run_id: str) -> list[RunRecord]:
        return await self.inner.get_records(run_id)

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        return await self.inner.list_runs(
            statuses=statuses, workflow=workflow, parent_id=parent_id, limit=limit
        )

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        return await self.inner.get_checkpoints(run_id, from_seq, to_seq)

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[Run]:
        return await self.inner.find_runs(where, before=before, limit=limit)

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
        return await self.inner.find_checkpoints(
            run_id, from_seq, to_seq, statuses=statuses, offset=offset, limit=limit
        )

    async def buffered_signals(self, token: str) -> list[str]:
        return await self.inner.buffered_signals(token)

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        return await self.inner.get_value(scope, key)

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        return await self.inner.list_values(scope, prefix=prefix, after=after, limit=limit)

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        return await self.inner.prune_runs(older_than, limit)

    async def prune_values(self, scope: str, older_than: float, limit: int) -> int:
        return await self.inner.prune_values(scope, older_than, limit)

    async def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        # Every wrapper has it, so `check_deletes_runs` asks the store under them.
        return await delete_runs(self.inner, run_ids)

    # Reads of no payload.

    async def count_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        statuses: Collection[CheckpointStatus],
        limit: int | None = None,
    ) -> int:
        return await self.inner.count_checkpoints(run_id, from_seq, to_seq, statuses, limit)

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        return await self.inner.list_due_runs(now, limit)

    async def next_due_time(self) -> float | None:
        return await self.inner.next_due_time()

    async def list_stalled_runs(self, limit: int) -> list[str]:
        return await self.inner.list_stalled_runs(limit)

    async def signal_waiter(self, token: str) -> tuple[str, int] | None:
        return await self.inner.signal_waiter(token)

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

    async def list_breakpoints(self) -> list[Breakpoint]:
        return await self.inner.list_breakpoints()

    async def paused_steps(self, run_id: str | None = None) -> list[PausedStep]:
        return await self.inner.paused_steps(run_id)

    def statistics(self) -> StoreStatistics:
        return self.inner.statistics()

    async def aclose(self) -> None:
        await self.inner.aclose()


class _FeedThrough:
    """`ChangeFeed`, the wrapped store's."""

    inner: Any

    def run_end_event(self, run_id: str) -> trio.Event:
        event: trio.Event = self.inner.run_end_event(run_id)
        return event

    def due_event(self, before: float) -> trio.Event:
        event: trio.Event = self.inner.due_event(before)
        return event

    def unwoken_runs(self) -> int:
        count: int = self.inner.unwoken_runs()
        return count

    def unwoken_event(self) -> trio.Event:
        event: trio.Event = self.inner.unwoken_event()
        return event


class _WatchThrough:
    """`RunWatch`, the wrapped store's (announcements carry no payload)."""

    inner: Any

    async def watch(
        self,
        origin: str,
        deliver: Callable[[Sequence[Announce] | None], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.inner.watch(origin, deliver, task_status=task_status)


def check_deletes_runs(store: Store) -> None:
    """Check that `delete_runs` works on ``store``: that the store under its
    wrappers is a `RunDeleter`.

    Raises:
      UsageError: It is not.
    """
    while isinstance(store, StoreWrapper):
        store = store.inner
    if not offers(store, RunDeleter):
        raise cannot_delete_runs(store)


_variants: dict[tuple[type[Any], bool, bool], type[Any]] = {}


def wrapped(base: type[W], inner: Store) -> type[W]:
    """``base``, or its variant that is also a `ChangeFeed` and a `RunWatch`
    where ``inner`` is (made once per combination)."""
    feed, watch = isinstance(inner, ChangeFeed), isinstance(inner, RunWatch)
    if not (feed or watch):
        return base
    key = (base, feed, watch)
    if key not in _variants:
        mixins = (_FeedThrough,) * feed + (_WatchThrough,) * watch
        _variants[key] = type(base.__name__, (*mixins, base), {"__doc__": base.__doc__})
    return _variants[key]
