"""Retention: `open_engine(retention=...)` and `Engine.prune`."""

from __future__ import annotations

import datetime

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._base._records import signal_token

app = td.App("retention")


@app.step()
async def boom(n: int) -> int:
    raise td.FatalError(f"boom {n}")


@app.workflow()
async def quick(ctx: td.Context, n: int) -> int:
    await ctx.sleep(float(n))
    return n


@app.workflow()
async def broken(ctx: td.Context, n: int) -> int:
    return await ctx.step(boom, n)


@app.workflow()
async def parent(ctx: td.Context, n: int) -> int:
    done = await ctx.child(quick, 0)
    await ctx.sleep(float(n))
    return done


@app.workflow()
async def listener(ctx: td.Context) -> object:
    return await ctx.wait_signal("go")


async def _ids(engine: td.Engine) -> list[str]:
    return sorted(r.id for r in (await engine.list_runs(limit=500)).runs)


async def test_the_pruner_deletes_ended_runs_by_age_and_status(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    retention = td.Retention(
        completed=100, failed=datetime.timedelta(seconds=1000), batch=2, interval=10
    )
    store = td.MemoryStore()
    async with open_test_engine(app, store=store, retention=retention) as engine:
        for i in range(5):
            await engine.start(quick, 0, run_id=f"q{i}")
        await engine.start(quick, 10_000, run_id="sleeper")
        await engine.start(broken, 1, run_id="bad")
        await engine.start(parent, 500, run_id="p")
        await engine.start(listener, run_id="l")
        await trio.testing.wait_all_tasks_blocked()
        await engine.signal("l", "other", 1)  # buffered, never consumed
        await engine.signal("l", "go", 1)
        await engine.result("l")
        assert await store.buffered_signals(signal_token("l", "other")) == ["1"]
        # t=0: everything just ended; the pruner (every 10 s) keeps it all.
        await trio.sleep(95)
        assert len(await _ids(engine)) == 10
        # The pass at 110 s (older than 100 s, strictly) deletes the
        # completed runs, in batches of 2 per write; the child of a parent
        # still sleeping stays, as does the failed run.
        await trio.sleep(20)
        assert await _ids(engine) == ["bad", "p", "p.child.1", "sleeper"]
        assert await store.get_checkpoints("q0") == []
        assert await store.buffered_signals(signal_token("l", "other")) == []
        # The parent ends at 500; its child (ended long ago) goes at the
        # next pass, the parent itself after 100 s more.
        await trio.sleep(500 - trio.current_time() + 15)
        assert await _ids(engine) == ["bad", "p", "sleeper"]
        await trio.sleep(100)
        assert await _ids(engine) == ["bad", "sleeper"]
        await trio.sleep(1000)
        assert await _ids(engine) == ["sleeper"]
        with pytest.raises(td.RunNotFoundError):
            await engine.get("bad")


async def test_prune_on_demand_with_a_limit(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        for i in range(7):
            await engine.start(quick, 0, run_id=f"q{i}")
        await engine.start(broken, 1, run_id="bad")
        await engine.drain()
        await trio.sleep(60)
        keep_all = td.Retention()
        assert await engine.prune(keep_all) == 0
        retention = td.Retention(completed=30, batch=2)
        assert await engine.prune(retention, limit=3) == 3
        assert len(await _ids(engine)) == 5
        assert await engine.prune(retention) == 4
        assert await _ids(engine) == ["bad"]
        assert await engine.prune(td.Retention(failed=0)) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"completed": -1}, "finite and >= 0"),
        ({"failed": "1d"}, "seconds or a timedelta"),
        ({"dead": float("inf")}, "finite"),
        ({"events": -5}, "finite and >= 0"),
        ({"batch": 0}, "batch must be"),
        ({"interval": 0}, "interval must be positive"),
        ({"interval": "soon"}, "interval must be a number"),
    ],
)
def test_retention_refuses_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(td.UsageError, match=message):
        td.Retention(**kwargs)  # type: ignore[arg-type]


async def test_prune_and_open_engine_refuse_bad_input(open_test_engine: EngineFactory) -> None:
    with pytest.raises(td.UsageError, match="retention must be"):
        async with open_test_engine(app, retention={"completed": 1}):
            pass  # pragma: no cover
    async with open_test_engine(app) as engine:
        with pytest.raises(td.UsageError, match=r"td\.Retention"):
            await engine.prune({"completed": 1})  # type: ignore[arg-type]
        with pytest.raises(td.UsageError, match="limit must be"):
            await engine.prune(td.Retention(completed=1), limit=-1)
