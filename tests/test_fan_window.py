"""Fans with ``concurrency=`` slide a window (see `_fan_window`).

On the memory store and on SQLite, under a mock clock: at most
``concurrency`` members are in flight at any moment (read off the store
after every event), a slow member holds back no other, a ``fail_fast`` fan
starts nothing after its failure, results come in input order, the rows a
fan reads grow linearly with its members, and an engine that dies
mid-window leaves the fan to another engine sharing the store, which
starts every member once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._brokers._base import RESULTS, Outgoing
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._features.children import _fan_window
from trio_durable._features.children._fan_window import (
    WINDOW_SCOPE,
    WINDOW_WAIT,
    read_window,
    window_key,
)
from trio_durable._features.children._fans import RESCUE_FIRST
from trio_durable._stores._base import Store
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable._wire._messages import Task

app = td.App("fan_window")

Mode = Literal["fail_fast", "wait_all"]
FAIL_FAST: Mode = "fail_fast"
WAIT_ALL: Mode = "wait_all"


@attrs.define(frozen=True)
class Job:
    index: int
    seconds: float = 1.0
    fail: bool = False


executions: Counter[int] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    executions.clear()
    yield
    executions.clear()


@app.step(group="g")
async def work(job: Job) -> int:
    executions[job.index] += 1
    await trio.sleep(job.seconds)
    if job.fail:
        raise td.FatalError(f"job {job.index} failed", code="boom")
    return job.index * 10


@app.workflow()
async def member(ctx: td.Context, job: Job) -> int:
    await ctx.sleep(job.seconds)
    if job.fail:
        raise td.FatalError(f"member {job.index} failed", code="boom")
    return job.index * 10


@app.workflow()
async def steps(ctx: td.Context, jobs: list[Job], concurrency: int, mode: Mode) -> Any:
    try:
        return await ctx.all(work, jobs, concurrency=concurrency, mode=mode)
    except td.GatherError as exc:
        return {"failed": [f.index for f in exc.failures]}


@app.workflow()
async def children(ctx: td.Context, jobs: list[Job], concurrency: int, mode: Mode) -> Any:
    try:
        return await ctx.all(member, jobs, concurrency=concurrency, mode=mode)
    except td.GatherError as exc:
        return {"failed": [f.index for f in exc.failures]}


@app.workflow()
async def settled(ctx: td.Context, jobs: list[Job], concurrency: int) -> list[str]:
    outcomes = await ctx.all_settled(work, jobs, concurrency=concurrency)
    return [o["status"] for o in outcomes]


class CountingBroker(MemoryBroker):  # type: ignore[misc]
    """Counts the tasks sent per seq (redeliveries are not sends)."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: Counter[int] = Counter()

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        for m in messages:
            if not m.queue.startswith(RESULTS):
                self.sends[Task.decode(m.body).seq] += 1
        await super().dispatch(messages)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """One store instance, for one engine or several sharing it."""
    if request.param == "memory":
        yield td.MemoryStore()
        return
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'store.db'}") as sqlite:
        yield sqlite


def in_flight(cps: Sequence[Any]) -> int:
    """Members started and not settled."""
    return sum(1 for cp in cps if cp.status == "pending" and cp.started_at is not None)


@asynccontextmanager
async def watch_window(
    engine: td.Engine, run_id: str, limit: int, seen: list[int]
) -> AsyncIterator[None]:
    """After every event of the engine, read the run's members off the store
    and check that at most ``limit`` are in flight (``seen`` collects the
    counts)."""

    async def check(rx: trio.MemoryReceiveChannel[td.Event]) -> None:
        async for _ in rx:
            cps = await engine.store.get_checkpoints(run_id)
            seen.append(in_flight(cps))
            assert seen[-1] <= limit

    with engine.subscribe() as rx:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(check, rx)
            yield
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("workflow", [steps, children], ids=["steps", "children"])
async def test_at_most_concurrency_in_flight_and_a_slow_member_holds_back_none(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store: Store,
    workflow: td.Workflow[..., Any],
) -> None:
    # Member 0 takes 100 s; the other 29 take 1 to 3 s each.
    jobs = [Job(index=i, seconds=100 if i == 0 else 1 + i % 3) for i in range(30)]
    seen: list[int] = []
    async with open_test_engine(app, store=store, serve=["g"]) as engine:
        async with watch_window(engine, "p", 4, seen):
            await engine.start(workflow, jobs, 4, WAIT_ALL, run_id="p")
            result = await engine.result("p")
            assert trio.current_time() == 100.0
        await engine.drain()
        cps = await engine.store.get_checkpoints("p")
    assert result == [i * 10 for i in range(30)]
    assert max(seen) == 4
    # The others ran three at a time beside member 0 and were all done long
    # before it: waves of four would have waited 100 s in the first.
    others = [cp for cp in cps if cp.seq != 1]
    assert max(cp.finished_at for cp in others if cp.finished_at) - cps[0].enqueued_at < 25  # type: ignore[operator]
    # Started in index order.
    starts = [cp.started_at for cp in cps]
    assert starts == sorted(starts)  # type: ignore[type-var]
    assert await engine.store.get_value(WINDOW_SCOPE, window_key("p", 1)) is None


@pytest.mark.parametrize("workflow", [steps, children], ids=["steps", "children"])
async def test_fail_fast_starts_nothing_after_a_failure(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store: Store,
    workflow: td.Workflow[..., Any],
) -> None:
    jobs = [Job(index=i, seconds=5.0, fail=i == 1) for i in range(10)]
    jobs[1] = Job(index=1, seconds=1.0, fail=True)
    async with open_test_engine(app, store=store, serve=["g"]) as engine:
        await engine.start(workflow, jobs, 3, FAIL_FAST, run_id="p")
        assert await engine.result("p") == {"failed": [1]}
        assert trio.current_time() == 1.0
        await engine.drain()
        cps = await engine.store.get_checkpoints("p")
        started = [cp.seq - 1 for cp in cps if cp.started_at is not None]
        # Members 0, 1, 2 started; the failure started none in its place.
        assert started == [0, 1, 2]
        codes = [cp.error.code if cp.error else None for cp in cps]
        assert codes == ["fan_cancelled", "boom", *["fan_cancelled"] * 8]
        assert await engine.store.get_value(WINDOW_SCOPE, window_key("p", 1)) is None
        if workflow is children:
            runs = await engine.store.list_runs(parent_id="p")
            assert sorted(r.id for r in runs) == [f"p.all.1.{i}" for i in range(3)]
    if workflow is steps:
        assert sorted(executions) == [0, 1, 2]


async def test_all_settled_makes_way_after_failures_and_keeps_input_order(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, store: Store
) -> None:
    # Later members end first.
    jobs = [Job(index=i, seconds=10 - i, fail=i % 3 == 0) for i in range(10)]
    async with open_test_engine(app, store=store, serve=["g"]) as engine:
        await engine.start(settled, jobs, 2, run_id="p")
        assert await engine.result("p") == [
            "rejected" if i % 3 == 0 else "fulfilled" for i in range(10)
        ]


@pytest.mark.parametrize("workflow", [steps, children], ids=["steps", "children"])
async def test_rows_read_grow_linearly_with_the_members(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store: Store,
    workflow: td.Workflow[..., Any],
) -> None:
    # 1,000 members of 1 to 3 s, 50 at a time: about 40 s of fan, so no
    # rescue look (at RESCUE_FIRST) happens.
    jobs = [Job(index=i, seconds=1 + i % 3) for i in range(1000)]
    async with open_test_engine(app, store=store, serve=["g"], worker_concurrency=64) as engine:
        before = store.statistics().checkpoint_rows_read
        await engine.start(workflow, jobs, 50, WAIT_ALL, run_id="p")
        assert await engine.result("p") == [i * 10 for i in range(1000)]
        assert trio.current_time() < RESCUE_FIRST
        await engine.drain()
        turns = engine.statistics().turns
    read = store.statistics().checkpoint_rows_read - before
    if workflow is steps:
        assert turns == 2
        # Each start read the row it started (950), the last turn every
        # member (1,000); waves of 50 read 50 * (1 + ... + 20) = 10,500.
        assert read == 950 + 1000
    else:
        # And each child's turn after its timer read that one row; the
        # first window's 50 children, started by the parent's first turn,
        # may read theirs once more (a wake from that turn's commit).
        assert 950 + 1000 + 1000 <= read <= 950 + 1000 + 1000 + 50


@pytest.mark.parametrize("concurrency", [3, 1])
async def test_a_crash_mid_window_leaves_the_fan_to_another_engine(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
) -> None:
    broker = CountingBroker()
    jobs = [Job(index=i, seconds=1 + i % 2) for i in range(12)]
    advance = _fan_window._advance
    dying = trio.Event()

    async def dies_after_settling(*args: Any) -> bool:
        # The engine dies between the write that settled members and the
        # start of the next ones (at 3 s): those starts are lost with it.
        if trio.current_time() >= 3.0:
            dying.set()
            await trio.sleep_forever()
        return await advance(*args)

    monkeypatch.setattr(_fan_window, "_advance", dies_after_settling)
    with trio.CancelScope() as crash:
        async with open_test_engine(
            app, store=store, broker=broker, serve=["g"], engine_id="first"
        ) as engine:
            await engine.start(steps, jobs, concurrency, WAIT_ALL, run_id="p")
            await dying.wait()
            crash.cancel()
    monkeypatch.setattr(_fan_window, "_advance", advance)
    cps = await store.get_checkpoints("p")
    assert any(cp.mark is not None and cp.mark.code == WINDOW_WAIT for cp in cps)
    # A member that ended is still counted in flight: no start followed it.
    window = read_window(await store.get_value(WINDOW_SCOPE, window_key("p", 1)))
    assert window is not None
    assert any(cps[i].status == "completed" for i in window.inflight)

    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], engine_id="second"
    ) as engine:
        assert await engine.result("p") == [i * 10 for i in range(12)]
        if concurrency == 1:
            # Nothing was left in flight to make way: the parent's look for
            # lost starts (RESCUE_FIRST after the fan began) made it.
            assert trio.current_time() >= RESCUE_FIRST
        else:
            # The members still in flight went on making way (one start
            # fewer at a time) until the parent's last turn.
            assert trio.current_time() < RESCUE_FIRST
        await engine.drain()
    # Every member was sent once, whichever engine sent it.
    assert broker.sends == Counter({seq: 1 for seq in range(1, 13)})


# -- remote workflows: the fan is a worker's decision, the engine runs it ----------

worker_app = td.App("fan_window_remote")


@worker_app.step(group="rg")
async def rwork(job: Job) -> int:
    executions[job.index] += 1
    await trio.sleep(job.seconds)
    return job.index * 10


@worker_app.workflow(group="decide")
async def rmember(ctx: td.Context, job: Job) -> int:
    await ctx.sleep(job.seconds)
    return job.index * 10


@worker_app.workflow(group="decide")
async def rfan(ctx: td.Context, jobs: list[Job]) -> dict[str, list[int]]:
    stepped = await ctx.all(rwork, jobs, concurrency=3, mode="wait_all")
    children = await ctx.all(rmember, jobs, concurrency=2)
    return {"steps": stepped, "children": children}


engine_app = td.App("fan_window_engine")
engine_app.remote_workflow("rfan", group="decide")
engine_app.remote_workflow("rmember", group="decide")


async def test_a_remote_workflows_fans_slide_a_window(
    autojump_clock: trio.testing.MockClock, store: Store
) -> None:
    broker = td.MemoryBroker()
    jobs = [Job(index=i, seconds=1 + (i * 7) % 4) for i in range(12)]
    seen: list[int] = []
    async with (
        td.open_engine(engine_app, store=store, broker=broker, seed=0) as engine,
        td.open_worker(worker_app, broker=broker, groups=["rg", "decide"]),
    ):
        async with watch_window(engine, "p", 3, seen):
            await engine.start("rfan", jobs, run_id="p")
            result = await engine.result("p")
        await engine.drain()
        cps = await store.get_checkpoints("p", 1, 24)
        [marker] = [r for r in await store.get_records("p") if r.kind == "decision"]
    assert result == {"steps": [i * 10 for i in range(12)], "children": [i * 10 for i in range(12)]}
    assert max(seen) == 3
    assert all(executions[i] == 1 for i in range(12))
    assert all(cp.status == "completed" for cp in cps)
    # Members past the window started as others ended, later than the fan.
    assert all(cps[i].started_at > cps[0].started_at for i in range(3, 12))  # type: ignore[operator]
    # One decision to start, one at each fan's end: the members' ends made
    # way on the engine, not through decisions (waves would ask a worker
    # once per wave: 4 + 6 more).
    assert marker.attempts == 3


@app.step(group="gpu", requires=("gpu",))
async def render(job: Job) -> int:
    executions[job.index] += 1
    await trio.sleep(job.seconds)
    return job.index * 10


@app.workflow()
async def renders(ctx: td.Context, jobs: list[Job]) -> list[int]:
    return await ctx.all(render, jobs, concurrency=3)


async def test_a_step_that_requires_capabilities_slides_its_window_too(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    jobs = [Job(index=i, seconds=1 + i % 2) for i in range(20)]
    async with open_test_engine(app, serve=["gpu"], capabilities=["gpu"]) as engine:
        await engine.start(renders, jobs, run_id="p")
        assert await engine.result("p") == [i * 10 for i in range(20)]
        await engine.drain()
        # The members' ends started the next ones: the parent turned twice.
        assert engine.statistics().turns == 2
