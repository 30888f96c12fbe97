"""No run stuck when a durable broker loses tasks or goes away, on servers of
the tests' own (they are stopped and purged here):

- NATS JetStream whose task stream is purged under the engine (a server
  that lost what it acknowledged): a new engine opened with
  ``remote_redispatch``, set only after the tasks went out, sends them
  again, and every run completes with each step run once;
- RabbitMQ and NATS stopped for `OUTAGE` seconds in the middle of a fan
  of 2,000 remote steps and of 300 one-step runs: the sends the broker
  refused become retries due later, and every run completes once the
  broker is back, with no setting changed.
"""

from __future__ import annotations

import asyncio
import math
import random
import socket
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest
import trio

import trio_durable as td
from servers.fixture import installed

OUTAGE: Final = 60.0
"""Seconds each broker is away (the outage the issue measured)."""
FAN: Final = 2000
ONES: Final = 300
FINISH_WITHIN: Final = 240.0
"""Seconds every run may take to end once the broker is back."""

app = td.App("stranded-brokers")

calls: Counter[str] = Counter()

outage_began = trio.Event()
"""The second half of the fan waits for it: the outage comes mid-fan,
however fast the broker is."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    global outage_began
    calls.clear()
    outage_began = trio.Event()
    yield
    calls.clear()


@app.step(group="g")
async def work(key: str) -> str:
    calls[key] += 1
    if key.startswith("fan-") and int(key[4:]) >= FAN // 2:
        await outage_began.wait()
    await trio.sleep(0.001)
    return f"done {key}"


@app.workflow()
async def fan(ctx: td.Context, n: int) -> list[str]:
    return await ctx.all(work, [f"fan-{x}" for x in range(n)])


@app.workflow()
async def one(ctx: td.Context, x: int) -> str:
    return await ctx.step(work, f"one-{x}")


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A nats-server of this test's own (JetStream, fsync always): its URL
    and workdir."""
    server = installed("nats")
    workdir = tmp_path / "nats"
    url = server.start(workdir, port=server.free_port(), monitor_port=server.free_port())
    try:
        yield url, workdir
    finally:
        server.stop(workdir)


def _rabbitmq_port() -> int:
    """A port for a RabbitMQ node of this test's own: free, and so is its
    distribution port (20,000 above)."""
    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 40_000)
        taken = False
        for candidate in (port, port + 20_000):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", candidate))
                except OSError:
                    taken = True
        if not taken:
            return port


@pytest.fixture
def rabbitmq(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A RabbitMQ node of this test's own: its URL and workdir."""
    server = installed("rabbitmq")
    workdir = tmp_path / "rabbitmq"
    url = server.start(workdir, port=_rabbitmq_port())
    try:
        yield url, workdir
    finally:
        server.stop(workdir)


# -- a purged stream, and remote_redispatch set afterwards ------------------------------


def _purge_tasks(url: str) -> int:
    """Purge the NATS adapter's task stream (on a thread of its own: nats-py
    is asyncio); how many messages it held."""
    import nats

    from trio_durable_nats import TASKS_STREAM

    async def purge() -> int:
        client = await nats.connect(url)
        try:
            js = client.jetstream()
            held = (await js.stream_info(TASKS_STREAM)).state.messages
            await js.purge_stream(TASKS_STREAM)
            return int(held)
        finally:
            await client.close()

    return asyncio.run(purge())


async def test_tasks_a_nats_server_lost_are_sent_again_once_remote_redispatch_is_set(
    nats: tuple[str, Path],
) -> None:
    url, _ = nats
    store = td.MemoryStore()
    runs = 20
    size = 40
    # No worker yet, and no remote_redispatch: the tasks wait on the stream.
    async with td.open_engine(app, store=store, broker=url, engine_id="first") as first:
        await first.start(fan, size, run_id="fan")
        for x in range(runs):
            await first.start(one, x, run_id=f"one-{x}")
        await first.drain()
        # The server loses them, under the engine.
        assert await trio.to_thread.run_sync(_purge_tasks, url) == size + runs
    # The engine again (as a deploy restarts it), now with remote_redispatch.
    async with td.open_engine(
        app, store=store, broker=url, serve=["g"], remote_redispatch=(2.0, 3), engine_id="second"
    ) as second:
        with trio.fail_after(120):
            assert await second.result("fan") == [f"done fan-{x}" for x in range(size)]
            for x in range(runs):
                assert await second.result(f"one-{x}") == f"done one-{x}"
    # Each step ran once: the redispatch sent again only what was lost.
    assert calls == Counter(
        {
            **{f"fan-{x}": 1 for x in range(size)},
            **dict.fromkeys((f"one-{x}" for x in range(runs)), 1),
        }
    )
    for run_id in ["fan", *(f"one-{x}" for x in range(runs))]:
        for cp in await store.get_checkpoints(run_id):
            assert (cp.status, cp.attempts, [e.code for e in cp.errors]) == (
                "completed",
                2,
                ["redispatched"],
            )


# -- outages --------------------------------------------------------------------------------


async def _through_an_outage(
    url: str,
    stop: Callable[[], None],
    start: Callable[[], object],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A fan of `FAN` remote steps and `ONES` one-step runs on the broker at
    ``url``, stopped (``stop``) for `OUTAGE` seconds once a quarter of the
    fan completed (its second half waits for the outage), then started
    again (``start``): every run completes. Half the one-step runs start
    during the outage: their sends are refused, and become retries."""
    store = td.MemoryStore()
    run_ids = ["fan", *(f"one-{x}" for x in range(ONES))]
    async with td.open_engine(
        app, store=store, broker=url, serve=["g"], worker_concurrency=64
    ) as engine:
        with engine.subscribe(buffer=math.inf) as events:
            await engine.start(fan, FAN, run_id="fan")
            for x in range(ONES // 2):
                await engine.start(one, x, run_id=f"one-{x}")
            done = 0
            with trio.fail_after(FINISH_WITHIN):
                async for event in events:
                    done += event.kind == "step.completed"
                    if done >= FAN // 4:
                        break
            await trio.to_thread.run_sync(stop)
            away = trio.current_time()
            outage_began.set()
            try:
                for x in range(ONES // 2, ONES):
                    await engine.start(one, x, run_id=f"one-{x}")
                # The outage: its length is the point, not an ordering.
                await trio.sleep_until(away + OUTAGE)
                ended = [run_id for run_id in run_ids if (await engine.get(run_id)).done]
            finally:
                await trio.to_thread.run_sync(start)
            # The outage hit runs in flight.
            assert "fan" not in ended
            with trio.fail_after(FINISH_WITHIN):
                assert await engine.result("fan") == [f"done fan-{x}" for x in range(FAN)]
                for x in range(ONES):
                    assert await engine.result(f"one-{x}") == f"done one-{x}"
    unsettled = [
        cp
        for run_id in run_ids
        for cp in await store.get_checkpoints(run_id)
        if cp.status != "completed"
    ]
    assert unsettled == []
    # Sends were refused (an adapter waits for its connection a while first:
    # RabbitMQ's publish_timeout, NATS's timeout), and became retries.
    assert any(
        r.name == "trio_durable" and r.getMessage().startswith("could not dispatch")
        for r in caplog.records
    )
    assert set(calls) == {f"fan-{x}" for x in range(FAN)} | {f"one-{x}" for x in range(ONES)}
    print(
        f"{len(ended)} of {ONES + 1} runs had ended when the broker came back;"
        f" {sum(calls.values()) - len(calls)} steps ran more than once"
    )


async def test_every_run_completes_after_nats_was_away(
    nats: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    server = installed("nats")
    url, workdir = nats
    await _through_an_outage(
        url, lambda: server.stop(workdir), lambda: server.start(workdir), caplog
    )


async def test_every_run_completes_after_rabbitmq_was_away(
    rabbitmq: tuple[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    server = installed("rabbitmq")
    url, workdir = rabbitmq
    await _through_an_outage(
        url, lambda: server.stop_app(workdir), lambda: server.start_app(workdir), caplog
    )
