"""A cancelled run's cleanup (``ctx.shield()`` after ``except td.Cancelled``)
may wait: for a timer, a signal, a remote step, a child or a fan. The run
is ``suspended`` while it waits, goes on with the cleanup when the wait is
over (on this engine or another, after a crash) and ends ``cancelled``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall, shared_store

app = td.App("cancel-cleanup-waits")

done: list[str] = []
"""What the steps did, in order."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    done.clear()
    yield
    done.clear()


@app.step()
async def release(x: int) -> None:
    done.append(f"release {x}")


@app.step()
async def notify(x: int) -> None:
    done.append(f"notify {x}")


@app.step(group="cleaners")
async def refund(x: int) -> int:
    done.append(f"refund {x}")
    return x * 10


@app.workflow()
async def undo_order(ctx: td.Context, x: int) -> str:
    await ctx.step(release, x)
    return f"undone {x}"


@app.workflow()
async def sleeps_in_cleanup(ctx: td.Context, x: int) -> str:
    try:
        await ctx.wait_signal("go")
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(release, x)
            await ctx.sleep(30)
            await ctx.step(notify, x)
        raise
    return "went"


@app.workflow()
async def asks_in_cleanup(ctx: td.Context, x: int) -> str:
    try:
        await ctx.sleep(3600)
    except td.Cancelled:
        with ctx.shield():
            answer = await ctx.wait_signal("release?")
            if answer == "yes":
                await ctx.step(release, x)
        raise
    return "slept"


@app.workflow()
async def refunds_in_cleanup(ctx: td.Context, x: int) -> str:
    try:
        await ctx.sleep(3600)
    except td.Cancelled:
        with ctx.shield():
            paid = await ctx.step(refund, x)
            children = await ctx.child(undo_order, x)
            fanned = await ctx.all(undo_order, [x + 1, x + 2], concurrency=1)
            done.append(f"cleanup got {paid} {children} {fanned}")
        raise
    return "slept"


async def _statuses(store: td.Store, run_id: str) -> str:
    run = await store.get_run(run_id)
    assert run is not None
    return run.status


async def test_a_timer_in_cleanup_suspends_the_run_until_it_fires(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(sleeps_in_cleanup, 1, run_id="s")
        await engine.drain()
        await engine.cancel("s")
        cancelled_at = trio.current_time()
        await engine.drain()
        # The cleanup released and now waits for its timer: suspended.
        assert done == ["release 1"]
        run = await engine.get("s")
        assert run.status == "suspended"
        assert run.wake_at is not None
        with pytest.raises(td.RunCancelled):
            await engine.result("s")
        assert trio.current_time() - cancelled_at == pytest.approx(30)
        cps = [(cp.seq, cp.name, cp.status) for cp in await engine.store.get_checkpoints("s")]
        records = [(r.kind, r.status) for r in await engine.store.get_records("s")]
    assert done == ["release 1", "notify 1"]
    assert records == [("cancelled_at", "completed")]
    assert cps == [
        (1, "go", "pending"),
        (2, "release", "completed"),
        (3, "sleep", "completed"),
        (4, "notify", "completed"),
    ]


async def test_a_signal_wait_in_cleanup_goes_on_when_the_signal_comes(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(asks_in_cleanup, 2, run_id="a")
        await engine.drain()
        await engine.cancel("a")
        await engine.drain()
        assert await _statuses(engine.store, "a") == "suspended"
        assert done == []
        await engine.signal("a", "release?", "yes")
        with pytest.raises(td.RunCancelled):
            await engine.result("a")
    assert done == ["release 2"]


async def test_a_second_cancel_while_the_cleanup_waits_changes_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(asks_in_cleanup, 3, run_id="twice")
        await engine.drain()
        await engine.cancel("twice")
        await engine.drain()
        await engine.cancel("twice")
        await engine.drain()
        # Woken by the second cancel, the run replays its cleanup to the
        # same wait and suspends again.
        assert await _statuses(engine.store, "twice") == "suspended"
        await engine.signal("twice", "release?", "yes")
        with pytest.raises(td.RunCancelled):
            await engine.result("twice")
        cancelled_at = [
            r for r in await engine.store.get_records("twice") if r.kind == "cancelled_at"
        ]
    assert done == ["release 3"]
    assert len(cancelled_at) == 1


async def test_cleanup_runs_a_remote_step_a_child_and_a_fan(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(app, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(app, broker=broker, groups=["cleaners"], seed=1, wall_clock=fixed_wall),
    ):
        await engine.start(refunds_in_cleanup, 4, run_id="r")
        await engine.drain()
        await engine.cancel("r", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("r")
        children = await engine.store.list_runs(parent_id="r")
    assert done == [
        "refund 4",
        "release 4",
        "release 5",
        "release 6",
        "cleanup got 40 undone 4 ['undone 5', 'undone 6']",
    ]
    assert sorted(child.status for child in children) == ["completed"] * 3


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_another_engine_finishes_a_cleanup_that_waited_when_the_first_closed(
    kind: str,
    autojump_clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    async with shared_store(kind, tmp_path) as store:
        async with open_test_engine(app, store=store, engine_id="first") as first:
            await first.start(sleeps_in_cleanup, 5, run_id="x")
            await first.drain()
            await first.cancel("x")
            await first.drain()
            assert await _statuses(store, "x") == "suspended"
        # The first engine is gone while the cleanup waits for its timer.
        async with open_test_engine(app, store=store, engine_id="second") as second:
            with pytest.raises(td.RunCancelled):
                await second.result("x")
        assert await _statuses(store, "x") == "cancelled"
    assert done == ["release 5", "notify 5"]
