"""Runs that act on other runs: ``start_child(..., cancel_with_parent=True)``
and ``ctx.signal`` (a durable message from one run to another, once per
key)."""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

app = td.App("messages")

undone: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()


@app.step()
async def undo_hold(name: str) -> None:
    undone.append(name)


@app.step()
async def hold(name: str) -> str:
    return name


@app.workflow()
async def sleeper(ctx: td.Context, name: str) -> str:
    await ctx.step(hold, name, compensate=undo_hold)
    await ctx.sleep(10_000)
    return name


@app.workflow()
async def sleeper_that_continues(ctx: td.Context, name: str, round: int) -> str:
    await ctx.sleep(100)
    ctx.continue_as_new(name, round + 1)


@app.workflow()
async def starter(ctx: td.Context) -> str:
    await ctx.start_child(sleeper, "linked", cancel_with_parent=True)
    await ctx.start_child(sleeper, "free")
    await ctx.start_child(sleeper_that_continues, "chain", 1, cancel_with_parent=True)
    await ctx.sleep(10_000)
    return "done"


async def test_cancel_takes_the_children_started_with_cancel_with_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(starter, run_id="p")
        await trio.sleep(250)
        await engine.drain()
        assert (await engine.get("p.child.3.gen.3")).status == "suspended"
        await engine.cancel("p", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("p")
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.1")
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.3")
        assert (await engine.get("p.child.3.gen.3")).status == "cancelled"
        assert (await engine.get("p.child.2")).status == "suspended"
        # The parent's compensate choice reaches the child.
        assert undone == ["linked"]
        [started] = await store.get_checkpoints("p", 1, 1)
        assert json.loads(started.output or "") == {"id": "p.child.1", "cancel_with_parent": True}
        [free] = await store.get_checkpoints("p", 2, 2)
        assert json.loads(free.output or "") == "p.child.2"


async def test_a_timeout_takes_the_children_started_with_cancel_with_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(starter, run_id="p", timeout=50)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("p")
        assert info.value.code == "timeout"
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.1")
        assert (await engine.get("p.child.2")).status == "suspended"
        assert undone == ["linked"]
        assert trio.current_time() == 50.0
