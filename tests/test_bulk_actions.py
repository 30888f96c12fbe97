"""Bulk actions (`cancel_many`, `retry_many`, `terminate_many`): they act
on the runs a `RunSelection` matches, in batches, report a dry run
without writing, and resume after an interruption without acting on a run
twice, even one that failed again since, on the memory and SQLite stores."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, StoreEngineFactory

app = td.App("bulk")

attempts: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    attempts.clear()
    yield
    attempts.clear()


@app.step(retry=td.Retry(attempts=1))
async def charge(order: str, code: str) -> str:
    attempts[order] += 1
    raise td.FatalError("no", code=code)


@app.workflow()
async def checkout(ctx: td.Context, order: str, code: str) -> str:
    return await ctx.step(charge, order, code)


@app.workflow()
async def waits(ctx: td.Context, order: str) -> str:
    return str(await ctx.wait_signal("go"))


class Interrupt(Exception):
    pass


DECLINED = td.RunSelection(status="failed", code="declined")
"""The runs `_failed_runs` fails with code ``declined`` (12 of its 15)."""


async def _failed_runs(engine: td.Engine) -> None:
    for i in range(12):
        await engine.start(checkout, f"o{i}", "declined", run_id=f"o{i:02}")
    for i in range(3):
        await engine.start(checkout, f"x{i}", "other", run_id=f"x{i}")
    await engine.drain()


async def test_a_dry_run_counts_and_writes_nothing(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (store, engine):
        await _failed_runs(engine)
        report = await engine.retry_many(DECLINED, dry_run=True)
        assert (report.matched, report.acted, report.dry_run, report.finished) == (
            12,
            0,
            True,
            False,
        )
        assert report.first_ids == tuple(f"o{i:02}" for i in range(11, 1, -1))
        assert report.operation == f"{DECLINED.key('retry')}.1"
        # Nothing was written: not even the operation.
        assert await store.get_value("bulk", DECLINED.key("retry")) is None
        assert {run.status for run in (await engine.list_runs()).runs} == {"failed"}


async def test_retry_many_resumes_without_retrying_a_run_twice(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (_, engine):
        await _failed_runs(engine)
        seen: list[td.BulkProgress] = []

        def interrupt(progress: td.BulkProgress) -> None:
            seen.append(progress)
            raise Interrupt

        with pytest.raises(Interrupt):
            await engine.retry_many(DECLINED, batch_size=5, on_progress=interrupt)
        assert [(p.done, p.total) for p in seen] == [(5, 12)]
        # The runs it retried fail again at once, with the same code.
        await engine.drain()
        assert sum(attempts.values()) == 15 + 5
        progress: list[tuple[int, int]] = []
        report = await engine.retry_many(
            DECLINED, batch_size=5, on_progress=lambda p: progress.append((p.done, p.total))
        )
        assert (report.matched, report.acted, report.skipped, report.finished) == (7, 7, 5, True)
        assert report.operation == seen[0].operation
        assert progress == [(5, 7), (7, 7)]
        await engine.drain()
        # Each run of the code was retried exactly once; the others never.
        assert attempts == Counter({**{f"o{i}": 2 for i in range(12)}, "x0": 1, "x1": 1, "x2": 1})
        # Finished, the same call is a new operation, which retries them again.
        again = await engine.retry_many(DECLINED, dry_run=True)
        assert (again.operation, again.matched) == (f"{DECLINED.key('retry')}.2", 12)


async def test_cancel_and_terminate_many(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (store, engine):
        await _failed_runs(engine)
        for i in range(6):
            await engine.start(waits, str(i), run_id=f"w{i}")
        await engine.drain()
        cancelled = await engine.cancel_many(
            td.RunSelection(workflow="waits", created_after=0.0), batch_size=4
        )
        assert (cancelled.matched, cancelled.acted) == (6, 6)
        await engine.drain()
        statuses = Counter(run.status for run in (await engine.list_runs(workflow="waits")).runs)
        assert statuses == Counter({"cancelled": 6})
        for i in range(3):
            await engine.start(waits, str(i), run_id=f"t{i}")
        await engine.drain()
        async with td.open_client(store) as client:
            terminated = await client.terminate_many(td.RunSelection(), reason="cleanup")
        assert (terminated.matched, terminated.acted) == (3, 3)
        for i in range(3):
            with pytest.raises(td.RunTerminated, match="cleanup"):
                await engine.result(f"t{i}")
        # Nothing is left for either to act on.
        assert (await engine.cancel_many(td.RunSelection())).matched == 0
        assert (await engine.terminate_many(td.RunSelection(), dry_run=True)).matched == 0
        # Neither touched the failed runs.
        assert (await engine.list_runs(status="failed")).runs.__len__() == 15


@app.workflow()
async def parent(ctx: td.Context, order: str) -> str:
    return await ctx.child(checkout, order, "in-child")


async def test_top_level_id_prefix_and_parent_narrow_a_selection(
    open_store_engine: StoreEngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_store_engine(app) as (_, engine):
        await _failed_runs(engine)
        await engine.start(parent, "p", run_id="p0")
        await engine.drain()
        everything = await engine.retry_many(td.RunSelection(status="failed"), dry_run=True)
        assert everything.matched == 17
        top = await engine.retry_many(td.RunSelection(top_level=True), dry_run=True)
        assert top.matched == 16
        assert "p0.child.1" not in top.first_ids
        prefix = td.RunSelection(id_prefix="x", top_level=True)
        report = await engine.retry_many(prefix)
        assert (report.matched, report.acted, sorted(report.first_ids)) == (
            3,
            3,
            ["x0", "x1", "x2"],
        )
        children = await engine.retry_many(td.RunSelection(parent_id="p0"), dry_run=True)
        assert children.first_ids == ("p0.child.1",)
        with pytest.raises(td.UsageError, match="top_level and parent_id"):
            await engine.retry_many(td.RunSelection(parent_id="p0", top_level=True), dry_run=True)
        with pytest.raises(td.UsageError, match="id_prefix"):
            await engine.retry_many(td.RunSelection(id_prefix=""), dry_run=True)


async def test_bad_input_is_refused(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        with pytest.raises(td.UsageError, match="batch_size"):
            await engine.retry_many(td.RunSelection(), batch_size=0)
        with pytest.raises(td.UsageError, match="operation's name"):
            await engine.retry_many(td.RunSelection(), operation="")
        with pytest.raises(td.UsageError, match="RunSelection"):
            await engine.cancel_many({"status": "failed"})  # type: ignore[arg-type]
        with pytest.raises(td.UsageError, match="unknown run status 'nonsense'"):
            td.RunSelection(status="nonsense")  # type: ignore[arg-type]
