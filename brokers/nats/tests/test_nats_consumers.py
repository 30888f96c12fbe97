"""The NATS adapter's durable consumers do not pile up on a server reused by
many engines: each is made with an inactive threshold, so the server
deletes the consumers no one pulls from any more (a results queue of an
engine on a store that is gone, a group no worker serves), and a consumer
deleted while a broker still uses it is made again, its messages kept.

The tests run a nats-server of their own (``tests/servers/nats.py`` on free
ports), whose consumers they count.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable import InvalidURLError
from trio_durable.brokers import Outgoing
from trio_durable_nats import RESULTS_STREAM, TASKS_STREAM, NatsBroker, parse_nats_url, token

EVENTUALLY: Final = 60.0
CYCLES: Final = 24

app = td.App("nats-consumers")


@app.step(group="consumers-calc")
async def double(x: int) -> int:
    return 2 * x


@app.workflow()
async def one(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, x)


def test_the_inactive_threshold_option() -> None:
    assert parse_nats_url("nats://h").inactive_threshold == 3600.0
    assert parse_nats_url("nats://h?inactive_threshold=2.5").inactive_threshold == 2.5
    assert parse_nats_url("nats://h?inactive_threshold=off").inactive_threshold is None
    for bad in ("0", "-1", "nan", "soon", ""):
        with pytest.raises(InvalidURLError, match="inactive_threshold"):
            parse_nats_url(f"nats://h?inactive_threshold={bad}")


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A nats-server of this test's own: its URL and monitoring port."""
    from servers.fixture import installed

    server = installed("nats")
    workdir = tmp_path / "nats"
    monitor_port = server.free_port()
    url = server.start(workdir, port=server.free_port(), monitor_port=monitor_port)
    try:
        yield url, monitor_port
    finally:
        server.stop(workdir)


async def _consumer_details(monitor_port: int) -> dict[str, list[dict[str, Any]]]:
    """The durable consumers of each stream, as the server's monitoring
    endpoint describes them."""

    def read() -> Any:
        url = f"http://127.0.0.1:{monitor_port}/jsz?consumers=true"
        with urllib.request.urlopen(url, timeout=5.0) as response:
            return json.load(response)

    found = await trio.to_thread.run_sync(read)
    listed: dict[str, list[dict[str, Any]]] = {}
    for account in found.get("account_details") or ():
        for stream in account.get("stream_detail") or ():
            listed[stream["name"]] = list(stream.get("consumer_detail") or ())
    return listed


async def _consumers(monitor_port: int) -> dict[str, list[str]]:
    """The names of the durable consumers of each stream."""
    details = await _consumer_details(monitor_port)
    return {stream: sorted(c["name"] for c in found) for stream, found in details.items()}


async def test_consumers_of_closed_engines_are_deleted(nats_server: tuple[str, int]) -> None:
    """Engines on memory stores, opened and closed one after another, each
    leave a results queue of their own (the store's scope names it) and the
    consumer of the group they serve: with the inactive threshold, the
    server deletes the results consumers once their engines are gone,
    however many engines came and went; without it they would stay, one
    per engine, until the server's limit."""
    url, monitor_port = nats_server
    broker = f"{url}?inactive_threshold=1&monitor=off"
    for cycle in range(CYCLES):
        async with td.open_engine(
            app, store="memory://", broker=broker, serve=["consumers-calc"], seed=cycle
        ) as engine:
            await engine.start(one, cycle, run_id=f"one-{cycle}")
            assert await engine.result(f"one-{cycle}") == 2 * cycle
        if cycle == 0:
            first = await _consumers(monitor_port)
            # The engine's results consumer, and its worker's of the group
            # and of its build's queue of the group (its build: the app's
            # registration hash).
            assert len(first[RESULTS_STREAM]) == 1
            build = app.registration_hash()
            assert sorted(first[TASKS_STREAM]) == sorted(
                [token("consumers-calc"), token(f"consumers-calc+{build}")]
            )
    # Each consumer is deleted a moment after its last engine closed: none
    # is left of all those the engines made.
    left = await _until_none_left(monitor_port)
    assert not any(left.values()), f"consumers left after {EVENTUALLY} s: {left}"


async def _until_none_left(monitor_port: int) -> dict[str, list[str]]:
    """Wait until the server has deleted every consumer, at most
    `EVENTUALLY` seconds; the consumers left. The server deletes them on
    its own timer and tells no one: its list is read again and again."""
    listed = await _consumers(monitor_port)
    with trio.move_on_after(EVENTUALLY):
        while any(listed.values()):
            await trio.sleep(0.2)
            listed = await _consumers(monitor_port)
    return listed


async def test_a_consumer_deleted_under_an_open_broker_is_made_again(
    nats_server: tuple[str, int],
) -> None:
    """A consumer the server deleted while its broker was cut off (as the
    inactive threshold does once the broker stops pulling) is made again by
    the broker's next pull, with the messages its queue kept meanwhile."""
    url, monitor_port = nats_server
    broker_url = f"{url}?monitor=off"
    async with (
        td.open_broker(broker_url) as worker_side,
        td.open_engine(app, store="memory://", broker=broker_url) as engine,
    ):
        assert isinstance(worker_side, NatsBroker)
        js = worker_side._js
        async with trio.open_nursery() as nursery:
            async with td.open_worker(app, broker=worker_side, groups=["consumers-calc"]):
                await engine.start(one, 1, run_id="before")
                assert await engine.result("before") == 2
                name = token("consumers-calc")
                await worker_side._bridge.run(lambda: js.delete_consumer(TASKS_STREAM, name))
                assert name not in (await _consumers(monitor_port)).get(TASKS_STREAM, [])
                # Dispatched while the consumer is gone: kept on the stream.
                await engine.start(one, 2, run_id="after")
                with trio.fail_after(EVENTUALLY):
                    assert await engine.result("after") == 4
                assert name in (await _consumers(monitor_port))[TASKS_STREAM]
            nursery.cancel_scope.cancel()


async def test_an_ack_whose_caller_is_cancelled_still_reaches_the_server(
    nats_server: tuple[str, int],
) -> None:
    """An ack cut short by its caller's cancellation (an engine that closes
    as its worker acks the task whose result it published) still reaches
    the server: a message left pending would hold its consumer, which the
    server does not delete for inactivity while it holds one."""
    url, monitor_port = nats_server
    queue = "consumers-acked"
    async with (
        td.open_broker(f"{url}?monitor=off&bridge=thread") as broker,
        broker.open_consumer(queue, prefetch=1) as consumer,
        trio.open_nursery() as nursery,
    ):
        assert isinstance(broker, NatsBroker)
        loop = broker._bridge._loop
        assert loop is not None
        await broker.dispatch([Outgoing(queue=queue, body=b"task")])
        [delivery] = await consumer.receive(1)
        # The client's loop waits until the ack's caller is cancelled and
        # waits in turn: the crossing's start and its cancellation are then
        # both queued on the loop before either runs.
        gate = threading.Event()
        loop.call_soon_threadsafe(gate.wait)

        async def open_gate() -> None:
            await trio.testing.wait_all_tasks_blocked()
            gate.set()

        nursery.start_soon(open_gate)
        with trio.CancelScope() as scope:
            scope.cancel()
            await consumer.ack([delivery])
    # The server takes acks in on its own time: its count is read until
    # the ack is in (it stays pending for good if the ack never came).
    with trio.move_on_after(EVENTUALLY):
        while True:
            [found] = (await _consumer_details(monitor_port))[TASKS_STREAM]
            if found["num_ack_pending"] == 0:
                break
            await trio.sleep(0.1)
    assert (found["name"], found["num_ack_pending"], found["num_pending"]) == (token(queue), 0, 0)
