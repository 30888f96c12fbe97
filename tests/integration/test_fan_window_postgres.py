"""A fan with ``concurrency=`` on PostgreSQL, shared by two engines: the
window's starts (the keyed value written with the version read, the
parent's status fence) hold on a real database, at most ``concurrency``
members are in flight, and each member is sent once."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator, Callable

import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from test_fan_window import WAIT_ALL, CountingBroker, Job, app, in_flight, steps
from trio_durable._stores._postgres import open_postgres_store


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_two_engines_slide_one_window(url: str) -> None:
    rng = random.Random(7)
    jobs = [Job(index=i, seconds=rng.randint(10, 50) / 1000) for i in range(60)]
    broker = CountingBroker()
    seen: list[int] = []
    async with (
        open_postgres_store(url) as store,
        td.open_engine(app, store=store, broker=broker, serve=["g"], engine_id="one") as one,
        td.open_engine(app, store=store, broker=broker, serve=["g"], engine_id="two") as two,
    ):

        async def watch(rx: trio.MemoryReceiveChannel[td.Event]) -> None:
            # After each event of either engine, read the members off the store.
            async for _ in rx:
                seen.append(in_flight(await store.get_checkpoints("p")))
                assert seen[-1] <= 5

        with one.subscribe() as rx_one, two.subscribe() as rx_two:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, rx_one)
                nursery.start_soon(watch, rx_two)
                await one.start(steps, jobs, 5, WAIT_ALL, run_id="p")
                assert await one.result("p") == [i * 10 for i in range(60)]
                nursery.cancel_scope.cancel()
    assert max(seen) <= 5
    assert broker.sends == Counter({seq: 1 for seq in range(1, 61)})
