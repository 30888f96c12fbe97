"""A worker's load in its announcements (`WorkerDescriptor.load`): tasks in
flight, completed and failed, and completed per minute over the last
minute of heartbeats; none in a held announcement (the memory broker's,
which no heartbeat refreshes); and what a reader makes of an announcement
without it (a worker older than the field)."""

from __future__ import annotations

import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from test_fleet import HEARTBEAT, ServerLikeBroker, running_worker
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._front._descriptor import LoadMeter
from trio_durable.brokers import (
    WorkerDescriptor,
    WorkerLoad,
    descriptor_from_json,
    descriptor_to_json,
)

app = td.App("loaded")
gate = {"open": trio.Event()}


@app.step(group="payments")
async def charge(amount: int) -> int:
    await gate["open"].wait()
    return amount


@app.workflow()
async def pay(ctx: td.Context, amount: int) -> int:
    return await ctx.step(charge, amount)


async def test_heartbeats_carry_the_workers_load(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    gate["open"] = trio.Event()
    broker = ServerLikeBroker(MemoryBroker())
    loads: dict[float, WorkerLoad | None] = {}

    async def look() -> None:
        [d] = await broker.worker_descriptors()
        assert not d.held
        loads[d.announced_at - WALL_START] = d.load

    async with (
        running_worker(app, broker, groups=["payments"], instance_id="w-1"),
        open_test_engine(app, broker=broker) as engine,
    ):
        await look()
        for i in range(6):
            await engine.start(pay, i, run_id=f"pay-{i}")
        # Held in their step through the heartbeat at 5 s: six in flight.
        await trio.sleep_until(HEARTBEAT + 1.0)
        await look()
        gate["open"].set()
        for i in range(6):
            assert await engine.result(f"pay-{i}") == i
        await trio.sleep_until(2 * HEARTBEAT + 1.0)
        await look()
        # A minute on, nothing more done: the rate falls to 0 over a window
        # of a minute.
        await trio.sleep_until(14 * HEARTBEAT + 1.0)
        await look()
    assert loads == {
        0.0: WorkerLoad(),
        HEARTBEAT: WorkerLoad(in_flight=6, window=HEARTBEAT),
        2 * HEARTBEAT: WorkerLoad(
            completed=6, completed_per_minute=6 * 60 / (2 * HEARTBEAT), window=2 * HEARTBEAT
        ),
        14 * HEARTBEAT: WorkerLoad(completed=6, completed_per_minute=0.0, window=60.0),
    }


async def test_a_held_announcement_carries_no_load(autojump_clock: trio.testing.MockClock) -> None:
    """On the memory broker a worker announces once: a load in it would
    stay what it was as the worker opened, so it has none."""
    broker = MemoryBroker()
    async with running_worker(app, broker, groups=["payments"], instance_id="w-1"):
        [d] = await broker.worker_descriptors()
    assert (d.held, d.load) == (True, None)


def test_the_rate_covers_the_last_minute_of_heartbeats() -> None:
    meter = LoadMeter(100.0)
    assert meter.read(100.0, 0, 0, 0) == WorkerLoad()
    # 30 done in the first 30 s: 60 a minute, over 30 s.
    assert meter.read(130.0, 2, 30, 1).completed_per_minute == 60.0
    # 90 more in the next 60 s: the window starts at the reading 60 s
    # before (130 s), so 90 a minute.
    load = meter.read(190.0, 0, 120, 1)
    assert (load.completed_per_minute, load.window) == (90.0, 60.0)
    assert (load.in_flight, load.completed, load.failed) == (0, 120, 1)


def test_an_announcement_without_load_still_reads() -> None:
    """A worker older than `WorkerDescriptor.load` announces no ``load``:
    it reads as None; a reader older than the field ignores it (unknown
    fields are ignored), so both sides of a rolling upgrade agree."""
    loaded = WorkerDescriptor(
        instance_id="w-1", app="shop", load=WorkerLoad(in_flight=1, completed=2)
    )
    data = descriptor_to_json(loaded)
    assert data["load"] == {
        "in_flight": 1,
        "completed": 2,
        "failed": 0,
        "completed_per_minute": 0.0,
        "window": 0.0,
    }
    assert descriptor_from_json(data) == loaded
    old = {key: value for key, value in data.items() if key != "load"}
    assert descriptor_from_json(old).load is None
    newer = {**data, "load": {**data["load"], "queued": 4}, "zone": "eu-1"}
    assert descriptor_from_json(newer) == loaded
