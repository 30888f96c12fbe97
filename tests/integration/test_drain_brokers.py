"""`Engine.drain` with ``serve=`` over a real RabbitMQ and NATS returns only
once every task the engine sent has had its result settled.

These brokers cannot tell when their queues are quiet (`Broker.quiet` is
None), so drain relies on the engine's own count of the tasks it sent: while
a task or its result is on the server, no worker and no consumer of the
engine is busy with it, and a drain that looked only at those returned
early, with runs still suspended on their steps. (On NATS, whose workers
pull tasks in batches, it did so within a few rounds; RabbitMQ pushes a task
to an idle consumer before it confirms the publish, which hid the gap there.)
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Final

import attrs
import pytest
import trio

import trio_durable as td

EVENTUALLY: Final = 60.0

app = td.App("drain-brokers")


@app.step(group="calc")
async def double(x: int) -> int:
    # Long enough that tasks are still out when the first turns end.
    await trio.sleep(0.02)
    return 2 * x


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    y: int = await ctx.step(double, x)
    return y


@app.workflow()
async def chain(ctx: td.Context, x: int) -> int:
    y: int = await ctx.step(double, x)
    z: int = await ctx.step(double, y)
    return z


@app.workflow()
async def fan(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(double, list(range(n)), concurrency=10)


ROUNDS: Final = 30


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_each_drain_returns_after_the_step_it_started_was_settled(
    real_server: Callable[[str], str], server: str
) -> None:
    # One run of one step at a time: right after its turn sent the task,
    # nothing in the engine is busy with it (it is on the server, on its way
    # to the worker), so only the engine's count of what it sent can keep
    # drain from returning then. Each round is one more chance to.
    url = real_server(server)
    namespace = f"drain{secrets.token_hex(4)}"
    store = td.MemoryStore()
    async with td.open_engine(
        app, store=store, broker=url, serve=[f"calc@{namespace}"], seed=2
    ) as engine:
        for x in range(ROUNDS):
            run = await engine.start(one, x, run_id=f"{namespace}.r{x}", namespace=namespace)
            with trio.fail_after(EVENTUALLY):
                await engine.drain()
            stored = await store.get_run(run.id)
            assert stored is not None
            assert (x, stored.status) == (x, "completed")
            assert await engine.result(run.id) == 2 * x


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_drain_returns_once_the_results_of_the_tasks_it_sent_are_settled(
    real_server: Callable[[str], str], server: str
) -> None:
    url = real_server(server)
    # A namespace of its own, so its task queues are fresh on a shared server.
    namespace = f"drain{secrets.token_hex(4)}"
    store = td.MemoryStore()
    async with td.open_engine(
        app,
        store=store,
        broker=url,
        serve=[f"calc@{namespace}"],
        worker_concurrency=8,
        seed=1,
    ) as engine:
        run_ids = []
        for x in range(10):
            run = await engine.start(chain, x, run_id=f"{namespace}.c{x}", namespace=namespace)
            run_ids.append(run.id)
        fanned = await engine.start(fan, 30, run_id=f"{namespace}.fan", namespace=namespace)
        run_ids.append(fanned.id)
        with trio.fail_after(EVENTUALLY):
            await engine.drain()
        # Read at once: drain returned after every run ended, not before.
        runs = [await store.get_run(run_id) for run_id in run_ids]
        assert [r.status if r is not None else None for r in runs] == ["completed"] * len(runs)
        pending = [
            (cp.run_id, cp.seq)
            for run_id in run_ids
            for cp in await store.get_checkpoints(run_id)
            if cp.status != "completed"
        ]
        assert pending == []
        assert [await engine.result(f"{namespace}.c{x}") for x in range(10)] == [
            4 * x for x in range(10)
        ]
        assert await engine.result(f"{namespace}.fan") == [2 * i for i in range(30)]
        # Nothing was left to arrive: the store stays as drain left it.
        before = attrs.evolve(store.statistics())
        await trio.sleep(0.5)
        assert store.statistics() == before
