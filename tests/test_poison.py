"""Poison tasks: a task delivered more than ``max_deliveries`` times is
failed with code ``poison`` without running, and rejected without requeue."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._brokers._memory import MemoryBroker

app = td.App("poison")

ran: list[int] = []


@app.step(group="g", retry=td.Retry(attempts=3, backoff=1.0))
async def fragile(x: int) -> int:
    ran.append(x)
    return x


@app.workflow()
async def uses_fragile(ctx: td.Context, x: int) -> str:
    try:
        value = await ctx.step(fragile, x)
        return str(value)
    except td.RemoteStepError as exc:
        return f"{exc.code} after {exc.details}"


async def take_and_die(broker: MemoryBroker, times: int) -> None:
    """Take the task and go away without a result, ``times`` times: what a
    worker process that crashes on it does."""
    for _ in range(times):
        async with broker.open_consumer("g", prefetch=1) as consumer:
            assert len(await consumer.receive(1)) == 1
        assert broker.depth("g") == 1


@pytest.mark.parametrize(("limit", "taken"), [(5, 5), (2, 2), (1, 1), (1, 3)])
async def test_a_task_delivered_too_often_fails_its_step_as_poison(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    limit: int,
    taken: int,
) -> None:
    ran.clear()
    broker = MemoryBroker()
    async with open_test_engine(app, broker=broker) as engine:
        run = await engine.start(uses_fragile, 4, run_id="r")
        await engine.drain()
        await take_and_die(broker, taken)
        async with td.open_worker(app, broker=broker, groups=["g"], max_deliveries=limit) as worker:
            # Not retried, though the step allows three attempts: the next
            # attempt would likely kill a worker again.
            assert await engine.result(run.id) == f"poison after {{'deliveries': {taken + 1}}}"
            await worker.wait_idle()
            assert worker.statistics().poisoned == 1
            assert worker.statistics().completed == 0
        cp = (await engine.store.get_checkpoints("r", 1, 1))[0]
    assert ran == []
    # Rejected without requeue: gone from the queue, not looping.
    assert broker.depth("g") == 0
    assert (cp.status, cp.attempts) == ("failed", 1)
    assert cp.error is not None
    assert cp.error.code == "poison"


async def test_a_task_within_the_limit_runs(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    ran.clear()
    broker = MemoryBroker()
    async with open_test_engine(app, broker=broker) as engine:
        run = await engine.start(uses_fragile, 4, run_id="r")
        await engine.drain()
        await take_and_die(broker, 4)
        async with td.open_worker(app, broker=broker, groups=["g"], max_deliveries=5) as worker:
            assert await engine.result(run.id) == "4"
            assert worker.statistics().poisoned == 0
    assert ran == [4]


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "5"])
async def test_max_deliveries_must_be_a_positive_integer(limit: object) -> None:
    with pytest.raises(td.UsageError, match="max_deliveries"):
        async with td.open_worker(app, broker=MemoryBroker(), groups=["g"], max_deliveries=limit):  # type: ignore[arg-type]
            pass
