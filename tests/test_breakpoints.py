"""Breakpoints: runs pause durably before a step, show it, and resume by an
action (continue or skip), from the engine, a client in another store
object, or another engine after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import trio_durable as td
from conftest import fixed_wall

app = td.App("breakpoints")

CALLS: list[str] = []


@app.step()
async def charge(amount: int) -> str:
    CALLS.append(f"charge {amount}")
    return f"charged {amount}"


@app.step(group="ship")
async def ship(order: str) -> str:
    return f"shipped {order}"


@app.workflow()
async def order(ctx: td.Context, amount: int) -> list[str]:
    first = await ctx.step(charge, amount)
    second = await ctx.step(charge, amount + 1)
    return [first, second]


@app.workflow()
async def delivery(ctx: td.Context, name: str) -> str:
    shipped = await ctx.step(ship, name)
    return shipped


async def _paused(source: td.Engine | td.Client, run_id: str) -> td.PausedStep:
    """The run's pause, once it paused."""
    while True:
        found = await source.paused_steps(run_id)
        if found:
            [paused] = found
            return paused
        await trio.sleep(0.01)


async def test_a_breakpoint_pauses_before_each_new_step(autojump_clock: trio.abc.Clock) -> None:
    CALLS.clear()
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine:
        bp = await engine.set_breakpoint(workflow="order", step="charge")
        assert await engine.set_breakpoint(workflow="order", step="charge") == bp
        assert await engine.breakpoints() == [bp]
        handle = await engine.start(order, 10, run_id="o1")
        with trio.fail_after(30):
            paused = await _paused(engine, "o1")
        assert (paused.seq, paused.step, paused.breakpoint_id) == (1, "charge", bp.id)
        assert CALLS == []
        run = await engine.get("o1")
        assert (run.status, run.wake_at) == ("suspended", None)
        history = await engine.history("o1")
        [entry] = history.entries
        assert (entry.seq, entry.status, entry.paused) == (1, "pending", True)
        assert (await engine.run_detail("o1")).timeline[0].paused  # type: ignore[union-attr]
        # Nothing wakes it but an action: not the reconcile pass either.
        await trio.sleep(600)
        assert CALLS == []

        await engine.continue_run("o1")
        with trio.fail_after(30):
            second = await _paused(engine, "o1")
        assert second.seq == 2
        assert CALLS == ["charge 10"]
        await engine.skip_step("o1", "skipped")
        with trio.fail_after(30):
            assert await handle.result() == ["charged 10", "skipped"]
        assert CALLS == ["charge 10"]
        history = await engine.history("o1")
        assert [(e.status, e.paused) for e in history.entries] == [
            ("completed", False),
            ("completed", False),
        ]
        # Acting on a run not paused changes nothing.
        with pytest.raises(td.InvalidRunStateError):
            await engine.continue_run("o1")
        with pytest.raises(td.InvalidRunStateError):
            await engine.skip_step("o1", 1)
        with pytest.raises(td.RunNotFoundError):
            await engine.continue_run("missing")
        await engine.clear_breakpoint(bp.id)
        with pytest.raises(td.BreakpointNotFoundError):
            await engine.clear_breakpoint(bp.id)
        assert await engine.breakpoints() == []
        # Without the breakpoint, runs go through.
        with trio.fail_after(30):
            assert await (await engine.start(order, 1)).result() == ["charged 1", "charged 2"]


async def test_replaying_a_recorded_step_never_pauses(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=2, wall_clock=fixed_wall) as engine:
        bp = await engine.set_breakpoint(workflow="order", step="charge")
        handle = await engine.start(order, 1, run_id="o2")
        with trio.fail_after(30):
            await _paused(engine, "o2")
        await engine.clear_breakpoint(bp.id)
        # Paused runs stay paused when their breakpoint goes.
        await trio.sleep(60)
        assert (await engine.paused_steps("o2"))[0].seq == 1
        await engine.continue_run("o2")
        with trio.fail_after(30):
            assert await handle.result() == ["charged 1", "charged 2"]


async def test_a_remote_step_pauses_and_continues(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with td.open_engine(
        app, store=store, seed=3, wall_clock=fixed_wall, serve=["ship"]
    ) as engine:
        await engine.set_breakpoint(workflow="delivery", step="ship")
        first = await engine.start(delivery, "a", run_id="d1")
        second = await engine.start(delivery, "b", run_id="d2")
        with trio.fail_after(30):
            await _paused(engine, "d1")
            await _paused(engine, "d2")
        assert [p.run_id for p in await engine.paused_steps()] == ["d1", "d2"]
        await engine.continue_run("d1")
        await engine.skip_step("d2", "skipped b")
        with trio.fail_after(30):
            assert await first.result() == "shipped a"
            assert await second.result() == "skipped b"
        [entry] = (await engine.history("d1")).entries
        assert (entry.kind, entry.status, entry.attempts) == ("remote", "completed", 1)


async def test_a_cancelled_paused_run_is_no_longer_listed(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=4, wall_clock=fixed_wall) as engine:
        await engine.set_breakpoint(workflow="order", step="charge")
        handle = await engine.start(order, 1, run_id="o3")
        with trio.fail_after(30):
            await _paused(engine, "o3")
            await engine.cancel("o3")
            with pytest.raises(td.RunCancelled):
                await handle.result()
        assert await engine.paused_steps() == []
        with pytest.raises(td.InvalidRunStateError):
            await engine.continue_run("o3")


async def test_breakpoints_reach_engines_and_survive_restarts(tmp_path: Path) -> None:
    await breakpoints_across_engines(f"sqlite:///{tmp_path / 'bp.db'}")


async def breakpoints_across_engines(url: str) -> None:
    """A client on its own store object sets the breakpoint; the engine
    learns it from the announcement; the run pauses, the engine closes, a
    client continues it and a second engine finishes it (also run on
    PostgreSQL: tests/integration/test_postgres_hooks.py)."""
    CALLS.clear()
    async with td.open_store(url) as client_store, td.open_client(client_store) as client:
        async with td.open_engine(app, store=url, seed=5) as first:
            # The engine has read the (empty) breakpoints already.
            with trio.fail_after(10):
                assert await (await first.start(order, 0)).result() == ["charged 0", "charged 1"]
            bp = await client.set_breakpoint(workflow="order", step="charge")
            handle = await client.start("order", 7, run_id="x")
            with trio.fail_after(10):
                paused = await _paused(client, "x")
            assert paused.breakpoint_id == bp.id
            assert CALLS == ["charge 0", "charge 1"]
        async with td.open_engine(app, store=url, seed=6) as second:
            await client.continue_run("x")
            with trio.fail_after(10):
                paused = await _paused(second, "x")
            assert paused.seq == 2
            await client.clear_breakpoint(bp.id)
            await second.skip_step("x", "not charged")
            with trio.fail_after(10):
                assert await handle.result() == ["charged 7", "not charged"]
            # The cleared breakpoint reached the engine too.
            with trio.fail_after(10):
                assert await (await client.start("order", 1)).result() == [
                    "charged 1",
                    "charged 2",
                ]


def test_bad_breakpoint_input_is_refused() -> None:
    async def main() -> None:
        async with td.open_engine(app) as engine:
            for workflow, step in (("", "s"), ("w", ""), (None, "s")):
                with pytest.raises(td.UsageError):
                    await engine.set_breakpoint(workflow=workflow, step=step)  # type: ignore[arg-type]
            with pytest.raises(td.SerializationError):
                await engine.skip_step("missing", object())

    trio.run(main)
