"""`Engine.drain` is exact, and leaving `open_engine` leaves nothing behind."""

from __future__ import annotations

import trio
import trio.lowlevel
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("drain")


@app.step()
async def pause(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@app.workflow()
async def busy(ctx: td.Context, seconds: float) -> float:
    return await ctx.step(pause, seconds)


@app.workflow()
async def napper(ctx: td.Context, seconds: float) -> str:
    await ctx.step(pause, 0)
    await ctx.sleep(seconds)
    return "rested"


@app.workflow()
async def waiter(ctx: td.Context) -> str:
    value: str = await ctx.wait_signal("go")
    return value


@app.workflow()
async def family(ctx: td.Context, n: int) -> list[float]:
    first = await ctx.child(busy, 1.0)
    rest = await ctx.all(busy, [float(i) for i in range(n)], concurrency=2)
    return [first, *rest]


def _tasks() -> list[trio.lowlevel.Task]:
    """Every task in the run, by walking the task tree from the root."""
    found: list[trio.lowlevel.Task] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        assert task is not None
        found.append(task)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return found


def _turn_tasks() -> list[str]:
    return sorted(t.name for t in _tasks() if t.name.startswith("trio_durable turn "))


def _engine_tasks() -> list[str]:
    return sorted(t.name for t in _tasks() if "trio_durable" in t.name)


async def test_after_drain_nothing_is_written_until_the_next_timer(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(napper, 100, run_id="n")
        await engine.start(family, 3, run_id="f")
        await engine.start(waiter, run_id="w")
        await engine.drain()
        # The fan's members ran 0, 1 and 2 s in waves of two: 1 + 1 + 2 s.
        assert trio.current_time() == 4.0
        assert (await engine.get("f")).status == "completed"
        assert (await engine.get("n")).status == "suspended"
        assert (await engine.get("w")).status == "suspended"
        assert _turn_tasks() == []
        assert engine.statistics().runs_active == 0
        ops = engine.store.statistics().ops

        await trio.testing.wait_all_tasks_blocked()
        assert engine.store.statistics().ops == ops
        # The timer is due at t=100: nothing happens before it.
        autojump_clock.jump(95.5)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 99.5
        assert engine.store.statistics().ops == ops
        await trio.sleep_until(99.999)
        assert engine.store.statistics().ops == ops
        assert _turn_tasks() == []
        assert (await engine.get("n")).status == "suspended"

        await trio.sleep_until(100)
        await engine.drain()
        assert trio.current_time() == 100.0
        assert await engine.result("n") == "rested"
        assert engine.store.statistics().ops > ops


async def test_drain_returns_exactly_when_the_last_effect_ends(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await trio.sleep(3)
        t0 = trio.current_time()
        await engine.start(busy, 5.0, run_id="b")
        await trio.testing.wait_all_tasks_blocked()
        assert _turn_tasks() == ["trio_durable turn b"]
        await engine.drain()
        assert trio.current_time() == t0 + 5
        run = await engine.get("b")
        assert run.status == "completed"
        assert run.updated_at == WALL_START + t0 + 5
        assert _turn_tasks() == []


async def test_drain_counts_a_timer_that_is_due_now(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(napper, 10, run_id="n")
        await engine.drain()
        assert trio.current_time() == 0.0
        await trio.sleep(10)
        # Due now: drain waits for that turn rather than returning first.
        await engine.drain()
        assert (await engine.get("n")).status == "completed"
        assert trio.current_time() == 10.0


async def test_drain_returns_at_once_with_runs_waiting_on_a_signal_or_a_timer(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(waiter, run_id="w")
        await engine.start(napper, 30 * 86_400, run_id="n")
        await engine.drain()
        assert trio.current_time() == 0.0
        assert (await engine.get("w")).status == "suspended"
        assert (await engine.get("n")).wake_at == WALL_START + 30 * 86_400
        # With nothing executing, drain returns without a pause.
        with trio.fail_after(0.001):
            await engine.drain()
        assert trio.current_time() == 0.0

        await engine.signal("w", "go", "now")
        await engine.drain()
        assert await engine.result("w") == "now"
        assert trio.current_time() == 0.0


def _descendants(task: trio.lowlevel.Task) -> set[trio.lowlevel.Task]:
    found: set[trio.lowlevel.Task] = set()
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found |= {child, *_descendants(child)}
    return found


async def test_leaving_open_engine_cancels_and_joins_everything(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()

    async def use_engine() -> None:
        async with open_test_engine(app, store=store) as engine:
            await engine.start(busy, 1000.0, run_id="b")
            await engine.start(napper, 50, run_id="n")
            await engine.start(waiter, run_id="w")
            await trio.sleep(1)
            assert _turn_tasks() == ["trio_durable turn b"]
            assert "trio_durable due-run poller" in _engine_tasks()
            assert len(_descendants(trio.lowlevel.current_task())) >= 3
        # Everything the engine ran was under this task, and is gone.
        assert _descendants(trio.lowlevel.current_task()) == set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(use_engine)
        await trio.testing.wait_all_tasks_blocked()
        assert len(_descendants(trio.lowlevel.current_task())) > 3
    assert trio.current_time() == 1.0
    assert _engine_tasks() == []
    assert _descendants(trio.lowlevel.current_task()) == set()
    # The busy run's lease was given back, so another engine can resume it
    # at once; its unfinished turn wrote nothing.
    b = await store.get_run("b")
    assert b is not None
    assert (b.status, b.lease_owner, b.lease_expiry) == ("running", None, None)
    assert await store.get_checkpoints("b") == []

    # A fresh engine on the same store picks the run up and finishes it.
    async with open_test_engine(app, store=store, engine_id="second") as engine:
        assert await engine.result("b") == 1000.0
        assert trio.current_time() == 1001.0
        await engine.drain()
    assert _engine_tasks() == []
