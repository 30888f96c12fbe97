"""The SQLite store under `trio.testing.MockClock`: the same virtual times as
the memory store, for the same workload.

Every test here runs once on a `MemoryStore` and once on a SQLite file, and
asserts the same exact virtual times for both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable._base._records import Checkpoint, Run
from trio_durable._stores._ops import PutCheckpoint, UpdateRun
from trio_durable._stores._sqlite import open_sqlite_store, threads_keep_time

app = td.App("sqlite-clock")

log: list[tuple[str, float]] = []
"""(what, trio time) as the steps below record them."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    log.clear()
    yield
    log.clear()


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'store.db'}"


@app.step()
async def note(what: str) -> str:
    log.append((what, trio.current_time()))
    return what


@app.workflow()
async def note_then_nap(ctx: td.Context) -> str:
    await ctx.step(note, "first step")
    await ctx.sleep(7200)
    return await ctx.step(note, "after the nap")


@app.workflow()
async def minute(ctx: td.Context, index: int) -> int:
    await ctx.sleep(60)
    return index


@app.workflow()
async def nap_then_fan(ctx: td.Context, members: int, concurrency: int) -> list[int]:
    await ctx.sleep(7200)
    return await ctx.all(minute, list(range(members)), concurrency=concurrency)


@app.workflow()
async def wait_a_day(ctx: td.Context) -> Any:
    try:
        return await ctx.wait_signal("go", timeout=86_400)
    except td.SignalTimeout:
        log.append(("timed out", trio.current_time()))
        return "timed out"


async def test_an_engine_cut_off_after_an_hour_runs_the_first_step_at_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, store_url: str
) -> None:
    with trio.move_on_after(3600) as scope:
        async with open_test_engine(app, store=store_url) as engine:
            await engine.start(note_then_nap, run_id="r")
            await engine.result("r")
    assert scope.cancelled_caught
    assert trio.current_time() == 3600
    assert log == [("first step", 0.0)]


async def test_a_nap_then_a_fan_in_waves_ends_exactly_on_time(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, store_url: str
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        await engine.start(nap_then_fan, 20, 5, run_id="p")
        assert await engine.result("p") == list(range(20))
        # Two hours, then four waves of five one-minute children.
        assert trio.current_time() == 7200 + 4 * 60


async def test_a_day_long_signal_timeout_waits_for_the_signal(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, store_url: str
) -> None:
    async with open_test_engine(app, store=store_url, reconcile_interval=1e9) as engine:
        await engine.start(wait_a_day, run_id="w")
        await engine.drain()
        await trio.sleep(3600)
        await engine.signal("w", "go", "in time")
        assert await engine.result("w") == "in time"
        assert trio.current_time() == 3600
    assert log == []


# -- one richer workload, on both stores ----------------------------------------------


@app.step()
async def add_one(x: int) -> int:
    await trio.sleep(1)
    return x + 1


@app.step(group="remote", retry=td.Retry(attempts=3, backoff=5.0, jitter=0.0))
async def double(x: int) -> int:
    await trio.sleep(2)
    if x == 13 and not any(what == "unlucky" for what, _ in log):
        log.append(("unlucky", trio.current_time()))
        raise ConnectionError("unlucky once")
    return 2 * x


@app.workflow()
async def leaf(ctx: td.Context, n: int) -> int:
    await ctx.sleep(10 * n)
    return await ctx.step(double, n)


@app.workflow()
async def everything(ctx: td.Context, n: int) -> dict[str, Any]:
    a = await ctx.step(add_one, n)
    await ctx.sleep(3600)
    b = await ctx.step(double, a)
    go = await ctx.wait_signal("go", timeout=86_400)
    c = await ctx.child(leaf, b)
    children = await ctx.all(leaf, list(range(1, 8)), concurrency=3)
    steps = await ctx.all(double, [n, n + 1, n + 2, n + 3], concurrency=2)
    try:
        late = await ctx.wait_signal("never", timeout=600)
    except td.SignalTimeout:
        late = None
    return {"a": a, "b": b, "go": go, "c": c, "children": children, "steps": steps, "late": late}


@asynccontextmanager
async def open_everything(
    open_test_engine: EngineFactory, store_url: str
) -> AsyncIterator[td.Engine]:
    async with open_test_engine(
        app, store=store_url, broker=td.MemoryBroker(), serve=["remote"]
    ) as engine:
        yield engine


async def run_everything(open_test_engine: EngineFactory, store_url: str) -> list[Any]:
    async with open_everything(open_test_engine, store_url) as engine:
        with engine.subscribe() as events:
            await engine.start(everything, 5, run_id="a")
            await engine.start(everything, 12, run_id="b")
            await trio.sleep(5000)
            await engine.signal("a", "go", "first")
            await trio.sleep(1234.5)
            await engine.signal("b", "go", "second")
            outputs = [await engine.result("a"), await engine.result("b")]
            await engine.drain()
            end = trio.current_time()
            seen = []
            while True:
                try:
                    event = events.receive_nowait()
                except trio.WouldBlock:
                    break
                seen.append(
                    (event.at - WALL_START, event.kind, event.run_id, event.seq, event.name)
                )
    # Events at one instant may come in either order: compare them as sets
    # of (time, what) pairs, sorted.
    return [outputs, end, sorted(seen, key=repr), list(log)]


async def test_a_rich_workload_has_the_same_virtual_times_on_sqlite_as_in_memory(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tmp_path: Path
) -> None:
    in_memory = await run_everything(open_test_engine, "memory://")
    log.clear()
    start = trio.current_time()
    on_sqlite = await run_everything(open_test_engine, f"sqlite:///{tmp_path / 'store.db'}")
    # The second run started later: shift its times back.
    outputs, end, events, steps = on_sqlite
    on_sqlite = [
        outputs,
        end - start,
        sorted(((at - start, *rest) for at, *rest in events), key=repr),
        [(what, at - start) for what, at in steps],
    ]
    assert in_memory[0] == on_sqlite[0]
    assert in_memory[1] == on_sqlite[1]
    assert in_memory[2] == on_sqlite[2]
    assert in_memory[3] == on_sqlite[3]
    # The workload did what it says: every kind of event happened.
    kinds = {kind for _, kind, *_ in in_memory[2]}
    assert {"run.started", "run.suspended", "run.completed", "step.completed"} <= kinds
    assert "step.failed" in kinds or any(what == "unlucky" for what, _ in in_memory[3])


# -- where the queries run -------------------------------------------------------------


async def where_queries_run(url: str) -> set[int]:
    """The threads that ran a read, a write and a group of concurrent writes."""
    threads: set[int] = set()

    def note_thread(cur: Any) -> tuple[None, None]:
        threads.add(threading.get_ident())
        return None, None

    async with open_sqlite_store(url) as store:
        await store._commit.submit(note_thread, writes=False)
        await store._commit.submit(note_thread, writes=True)
        async with trio.open_nursery() as nursery:
            for _ in range(10):
                nursery.start_soon(partial(store._commit.submit, note_thread, writes=True))
    return threads


async def test_under_a_mock_clock_queries_run_on_the_trio_thread(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    assert await where_queries_run(f"sqlite:///{tmp_path / 'store.db'}") == {threading.get_ident()}


async def test_under_trios_own_clock_queries_run_on_worker_threads(tmp_path: Path) -> None:
    threads = await where_queries_run(f"sqlite:///{tmp_path / 'store.db'}")
    assert threads
    assert threading.get_ident() not in threads


async def test_group_commit_works_on_the_trio_thread(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'store.db'}") as store:

        async def workflow(i: int) -> None:
            await store.create_run(Run(id=f"r{i}", workflow="w"))
            turn = await store.begin_turn(f"r{i}", "e", 10.0, 0.0)
            assert turn is not None
            await store.apply(
                [
                    PutCheckpoint(
                        Checkpoint(
                            run_id=f"r{i}", seq=1, name="s", kind="local", status="completed"
                        )
                    ),
                    UpdateRun(f"r{i}", {"status": "completed"}, expect_owner="e", now=1.0),
                ]
            )

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(workflow, i)

        stats = store.statistics()
        assert stats.batches == 600
        # Writers that are ready together share one transaction.
        assert stats.transactions < stats.batches // 100
        assert len(await store.list_runs(statuses={"completed"})) == 200
    assert trio.current_time() == 0


class SystemClock(trio.abc.Clock):
    """A clock of the program's own that has the name of Trio's."""

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return time.monotonic()

    def deadline_to_sleep_time(self, deadline: float) -> float:
        return deadline - self.current_time()


@pytest.mark.parametrize(
    ("clock", "threads"),
    [(None, True), (trio.testing.MockClock(), False), (SystemClock(), False)],
)
def test_only_trios_own_clock_sends_queries_to_threads(
    clock: trio.abc.Clock | None, threads: bool
) -> None:
    async def main() -> bool:
        return threads_keep_time()

    assert trio.run(main, clock=clock) is threads
