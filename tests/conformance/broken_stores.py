"""Stores that break the store protocol on purpose, one way each, to show
that the store conformance suite notices.

Each wraps a real `MemoryStore` and changes one thing; everything it does
not override goes to the store it wraps. The single-operation helpers
(`create_run`, `save_checkpoint_if_pending`, ...) come from `StoreHelpers`,
so they write through the wrapper's `apply` and share its fault.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import attrs
import trio

import trio_durable as td
from trio_durable.stores import (
    AdmitToQueue,
    Announce,
    ClaimCheckpoint,
    CreateRun,
    Op,
    PutCheckpoint,
    RescheduleCheckpoint,
    RunFilter,
    RunStamp,
    RunStatus,
    SettleCheckpoint,
    Store,
    StoredValue,
    StoreHelpers,
    StoreStatistics,
    UpdateRun,
)
from trio_durable.testing.conformance import StoreFactory


class StoreWrapper(StoreHelpers):
    """A store that does what the `MemoryStore` it wraps does."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(ops)


def factory_of(wrapper: Callable[[td.MemoryStore], StoreWrapper]) -> StoreFactory:
    """Fresh stores, each a new `MemoryStore` inside ``wrapper``; two handles
    on one store are two wrappers of one `MemoryStore`."""

    @asynccontextmanager
    async def open_one() -> AsyncIterator[Store]:
        inner = td.MemoryStore()
        try:
            yield wrapper(inner)
        finally:
            await inner.aclose()

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        inner = td.MemoryStore()
        try:
            yield wrapper(inner), wrapper(inner)
        finally:
            await inner.aclose()

    return StoreFactory(open_one, open_pair)


# -- Writes ------------------------------------------------------------------------------


class PiecemealBatches(StoreWrapper):
    """Applies a batch one operation at a time: when one fails, those
    before it stay written (no atomic batch)."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        results: list[Any] = []
        for op in ops:
            results.extend(await self.inner.apply([op]))
        return results


class LosesErrorUpdates(StoreWrapper):
    """An `UpdateRun` loses the run's error it writes (a column forgotten),
    and says it wrote it all."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(
            [
                attrs.evolve(op, changes={k: v for k, v in op.changes.items() if k != "error"})
                if isinstance(op, UpdateRun)
                else op
                for op in ops
            ]
        )


class ClaimsAnything(StoreWrapper):
    """Its claim (`ClaimCheckpoint`) writes the checkpoint whatever its
    status: a late or duplicate result settles it again."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        claims = [isinstance(op, ClaimCheckpoint) for op in ops]
        replaced = [
            PutCheckpoint(op.checkpoint) if isinstance(op, ClaimCheckpoint) else op for op in ops
        ]
        results = await self.inner.apply(replaced)
        return [True if claim else result for claim, result in zip(claims, results, strict=True)]


class CreatesCheckpointsAnyway(StoreWrapper):
    """Writes a `CreateRun`'s checkpoints whether or not it inserts the run:
    a start that lost the race for an id replaces the winner's deadline."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        written: list[Op] = []
        at: list[int] = []
        for op in ops:
            at.append(len(written))
            written.append(op)
            if isinstance(op, CreateRun):
                written.extend(PutCheckpoint(cp) for cp in op.checkpoints)
        results = await self.inner.apply(written)
        return [results[i] for i in at]


class ForgetsTheLastError(StoreWrapper):
    """Ignores `SettleCheckpoint.append_error`: a step's last failed attempt
    is missing from its ``errors``."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(
            [
                attrs.evolve(op, append_error=False) if isinstance(op, SettleCheckpoint) else op
                for op in ops
            ]
        )


class IgnoresExecutions(StoreWrapper):
    """Ignores the execution conditions of settles and reschedules
    (``execution``, ``unless_rerun``): a result replayed from an earlier
    execution settles the step's new one."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(
            [
                attrs.evolve(op, execution=None, unless_rerun=False)
                if isinstance(op, SettleCheckpoint | RescheduleCheckpoint)
                else op
                for op in ops
            ]
        )


class ForgetsExecutions(StoreWrapper):
    """Keeps no checkpoint's ``executions`` nor ``rerun`` (a column it does
    not have): the settles that name one find none."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        def forget(cp: td.Checkpoint) -> td.Checkpoint:
            return attrs.evolve(cp, executions=(), rerun=False)

        written: list[Op] = []
        for op in ops:
            if isinstance(op, PutCheckpoint | ClaimCheckpoint):
                op = attrs.evolve(op, checkpoint=forget(op.checkpoint))
            elif isinstance(op, CreateRun):
                op = attrs.evolve(op, checkpoints=tuple(map(forget, op.checkpoints)))
            written.append(op)
        return await self.inner.apply(written)


class ChokesOnNulInErrors(StoreWrapper):
    """Cannot read the code of a stored error whose message holds a NUL
    (as a store reading it through PostgreSQL's ``jsonb`` could not): a
    settle with ``or_failed_with`` fails on such a checkpoint."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        for op in ops:
            if isinstance(op, SettleCheckpoint) and op.or_failed_with is not None:
                for cp in await self.inner.get_checkpoints(op.run_id, op.seq, op.seq):
                    if cp.error is not None and "\x00" in cp.error.message:
                        raise td.StoreError("unsupported Unicode escape sequence")
        return await self.inner.apply(ops)


class OverAdmits(StoreWrapper):
    """Admits every step to a flow-control queue, whatever its limit."""

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        return await self.inner.apply(
            [attrs.evolve(op, limit=10**9) if isinstance(op, AdmitToQueue) else op for op in ops]
        )


class HearsItself(StoreWrapper):
    """Its watch delivers the watcher's own announcements too (it watches
    under a name no writer uses)."""

    async def watch(
        self,
        origin: str,
        deliver: Callable[[Sequence[Announce] | None], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.inner.watch(f"{origin}-elsewhere", deliver, task_status=task_status)


class NeverCloses(StoreWrapper):
    """`aclose` does nothing: calls after it go on working."""

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


class StaleStatistics(StoreWrapper):
    """`statistics` is a new, zero `StoreStatistics` on every call."""

    def statistics(self) -> StoreStatistics:
        return StoreStatistics()


# -- Reads -------------------------------------------------------------------------------


class OldestFirst(StoreWrapper):
    """`find_runs` lists oldest first (it should list newest first)."""

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[td.Run]:
        found = await self.inner.find_runs(where, before=before, limit=limit)
        return found[::-1]


class ForgetsSearchConditions(StoreWrapper):
    """`find_runs` and `count_runs` ignore conditions on search attributes."""

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[td.Run]:
        return await self.inner.find_runs(
            attrs.evolve(where, search=()), before=before, limit=limit
        )

    async def count_runs(self, where: RunFilter) -> dict[RunStatus, int]:
        return await self.inner.count_runs(attrs.evolve(where, search=()))


class NewestSignalFirst(StoreWrapper):
    """`buffered_signals` lists the newest first."""

    async def buffered_signals(self, token: str) -> list[str]:
        return (await self.inner.buffered_signals(token))[::-1]


class NewestBreakpointFirst(StoreWrapper):
    """`list_breakpoints` lists the newest first."""

    async def list_breakpoints(self) -> list[td.Breakpoint]:
        return (await self.inner.list_breakpoints())[::-1]


class IgnoresPrefixes(StoreWrapper):
    """`list_values` lists the whole scope, whatever the prefix."""

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        return await self.inner.list_values(scope, after=after, limit=limit)


class PagesFromTheStart(StoreWrapper):
    """`list_values` starts from the first key, whatever ``after`` says."""

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        return await self.inner.list_values(scope, prefix=prefix, limit=limit)


class FrozenStamps(StoreWrapper):
    """`run_stamp` gives the first stamp it read of a run ever after."""

    def __init__(self, inner: td.MemoryStore) -> None:
        super().__init__(inner)
        self.first: dict[str, RunStamp] = {}

    async def run_stamp(self, run_id: str) -> RunStamp | None:
        if run_id not in self.first:
            stamp = await self.inner.run_stamp(run_id)
            if stamp is None:
                return None
            self.first[run_id] = stamp
        return self.first[run_id]


# -- Two handles -------------------------------------------------------------------------


def separate_handles() -> StoreFactory:
    """Two "handles on one store" that are two separate stores."""

    def open_one() -> AbstractAsyncContextManager[Store]:
        return td.open_store("memory://")

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        async with open_one() as first, open_one() as second:
            yield first, second

    return StoreFactory(open_one, open_pair)
