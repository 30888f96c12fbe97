"""Breakpoints on a remote workflow's local steps: the worker deciding the
turn stops its body before the step, the engine pauses the run there, and
an action (continue or skip) resumes it as for a local body
(docs/webhooks-and-breakpoints.md). On the memory broker and store, under
the autojump clock."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

calls: Counter[str] = Counter()

workers = td.App("remote-breakpoints")


@workers.step()
async def audit(amount: int) -> str:
    calls["audit"] += 1
    return f"audited {amount}"


@workers.workflow(group="deciders")
async def ledger(ctx: td.Context, amount: int) -> list[str]:
    first = await ctx.step(audit, amount)
    second = await ctx.step(audit, amount + 1)
    return [first, second]


service = td.App("remote-breakpoints-service")
service.remote_workflow("ledger", group="deciders")


@asynccontextmanager
async def fleet() -> AsyncIterator[td.Engine]:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        yield engine


async def paused_at(engine: td.Engine, run_id: str, seq: int) -> td.PausedStep:
    """The run's pause at ``seq``, once a turn paused it there."""
    with trio.fail_after(60):
        while True:
            found = [p for p in await engine.paused_steps(run_id) if p.seq == seq]
            if found:
                return found[0]
            await trio.sleep(1)


async def test_a_remote_bodys_local_step_pauses_and_continues(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls.clear()
    async with fleet() as engine:
        bp = await engine.set_breakpoint(workflow="ledger", step="audit")
        handle = await engine.start("ledger", 5, run_id="l")
        paused = await paused_at(engine, "l", 1)
        assert (paused.workflow, paused.step, paused.breakpoint_id) == ("ledger", "audit", bp.id)
        await trio.sleep(600)
        # Paused durably: the worker never ran the step.
        assert calls["audit"] == 0
        assert (await engine.get("l")).status == "suspended"
        [entry] = (await engine.history("l")).entries
        assert (entry.seq, entry.name, entry.status) == (1, "audit", "pending")
        await engine.continue_run("l")
        # The next step pauses too: the breakpoint is still on.
        await paused_at(engine, "l", 2)
        assert calls["audit"] == 1
        await engine.clear_breakpoint(bp.id)
        await engine.continue_run("l")
        assert await handle.result() == ["audited 5", "audited 6"]
        assert calls["audit"] == 2
        assert await engine.paused_steps("l") == []


async def test_a_remote_bodys_paused_local_step_is_skipped(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls.clear()
    async with fleet() as engine:
        bp = await engine.set_breakpoint(workflow="ledger", step="audit")
        await engine.start("ledger", 5, run_id="s")
        await paused_at(engine, "s", 1)
        await engine.skip_step("s", "skipped")
        await paused_at(engine, "s", 2)
        await engine.clear_breakpoint(bp.id)
        await engine.skip_step("s", "also skipped")
        assert await engine.result("s") == ["skipped", "also skipped"]
        assert calls["audit"] == 0


async def test_a_breakpoint_cleared_before_the_pause_is_written_lets_the_step_run(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The decision task named the step paused; the breakpoint goes before
    # the engine applies the decision: the step runs in the next decision.
    calls.clear()
    broker = td.MemoryBroker()
    async with td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine:
        bp = await engine.set_breakpoint(workflow="ledger", step="audit")
        handle = await engine.start("ledger", 1, run_id="c")
        await engine.drain()  # the decision task is out, naming "audit" paused
        await engine.clear_breakpoint(bp.id)
        async with td.open_worker(workers, broker=broker, groups=["deciders"]):
            assert await handle.result() == ["audited 1", "audited 2"]
        assert await engine.paused_steps("c") == []
        assert calls["audit"] == 2
        # The first decision stopped before the step; the second, asked
        # with the breakpoint gone, ran the body to its end.
        [record] = [r for r in await engine.store.get_records("c") if r.kind == "decision"]
        assert record.attempts == 2
