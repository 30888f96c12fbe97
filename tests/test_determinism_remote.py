"""The deterministic helpers and patches in a remote workflow's body,
decided on a worker: the same answers at every decision, and the markers
the body records reach the store through the decision."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory

worker_app = td.App("remote-determinism")
seen: list[tuple[str, Any]] = []


@worker_app.step()
async def note(x: int) -> int:
    return x


@worker_app.workflow(group="deciders", check_arguments=True)
async def decided(ctx: td.Context, x: int) -> dict[str, Any]:
    first = {"now": ctx.now().timestamp(), "id": str(ctx.uuid4()), "draw": ctx.random().random()}
    seen.append(("first", first))
    new = ctx.patched("remote-change")
    await ctx.step(note, x)
    await ctx.sleep(5)
    return {"first": first, "patched": new, "after": ctx.now().timestamp()}


service = td.App("remote-determinism")
service.remote_workflow("decided", group="deciders")


async def test_helpers_and_patches_in_a_remote_workflow(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    seen.clear()
    broker = td.MemoryBroker()
    async with (
        open_test_engine(service, broker=broker) as engine,
        td.open_worker(worker_app, broker=broker, groups=["deciders"]),
    ):
        run = await engine.start("decided", 3, run_id="d")
        result = await engine.result(run.id)
        names = [(cp.seq, cp.name) for cp in await engine.store.get_checkpoints(run.id)]
        kinds = [(r.kind, r.output) for r in await engine.store.get_records(run.id)]
    # Every decision replayed the body and drew the same values.
    assert len(seen) >= 2
    assert [value for _, value in seen] == [result["first"]] * len(seen)
    # The run's creation time travels with the decision task.
    assert result["first"]["now"] == WALL_START
    assert result["patched"] is True
    assert result["after"] >= WALL_START + 5
    assert (1, "patch:remote-change") in names
    assert (2, "note") in names
    # The worker's decision carried where its argument check began.
    assert "checked_from" in dict(kinds)
