"""How the NATS adapter batches: crossings of the bridge and publish
batches per batch of messages, pull requests per prefetch, and that a
connection dropped in the middle of a batch loses no message."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from functools import partial
from urllib.parse import urlsplit

import nats.js.errors
import pytest
import trio
import trio.testing
from nats.aio.msg import Msg

from servers.proxy import CuttingProxy
from trio_durable.brokers import BrokerUnavailable, Consumer, Delivery, Outgoing, open_broker
from trio_durable_nats import NatsBroker
from trio_durable_nats._nats_consume import num_delivered
from trio_durable_nats._nats_publish import Item

PATIENCE = 30.0
"""Seconds a reconnection, and the pull requests it lost, may take."""


def fresh_queue() -> str:
    return f"batching-{secrets.token_hex(4)}"


async def receive_all(consumer: Consumer, count: int) -> list[Delivery]:
    received: list[Delivery] = []
    with trio.fail_after(PATIENCE):
        while len(received) < count:
            received.extend(await consumer.receive(count))
    return received


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_a_batch_is_one_crossing_and_one_publish_batch(
    real_server: Callable[[str], str], bridge: str
) -> None:
    queue = fresh_queue()
    async with open_broker(f"{real_server('nats')}?monitor=off&bridge={bridge}") as broker:
        assert isinstance(broker, NatsBroker)
        before = broker.statistics()
        await broker.dispatch([Outgoing(queue=queue, body=b"%d" % i) for i in range(500)])
        after = broker.statistics()
        assert after.publish_batches - before.publish_batches == 1
        assert after.published - before.published == 500
        assert after.bridge.calls - before.bridge.calls == 1
        async with broker.open_consumer(queue, prefetch=500) as consumer:
            received = await receive_all(consumer, 500)
            # Pulled in batches: one request asks for the whole prefetch.
            assert broker.statistics().pull_requests <= 3
            before = broker.statistics()
            await consumer.ack(received)
            # All 500 acks in one crossing.
            assert broker.statistics().bridge.calls - before.bridge.calls == 1
        assert sorted(int(d.body) for d in received) == list(range(500))


async def test_concurrent_dispatches_share_publish_batches(
    real_server: Callable[[str], str],
) -> None:
    queue = fresh_queue()
    async with open_broker(f"{real_server('nats')}?monitor=off") as broker:
        assert isinstance(broker, NatsBroker)
        before = broker.statistics()
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(broker.dispatch, [Outgoing(queue=queue, body=b"%d" % i)])
        after = broker.statistics()
        assert after.published - before.published == 200
        # Queued while none was in flight: published together.
        assert after.publish_batches - before.publish_batches <= 2
        assert after.bridge.calls - before.bridge.calls <= 2
        async with broker.open_consumer(queue, prefetch=200) as consumer:
            received = await receive_all(consumer, 200)
            await consumer.ack(received)
        assert sorted(int(d.body) for d in received) == list(range(200))


async def test_a_connection_dropped_mid_batch_loses_no_message(
    real_server: Callable[[str], str],
) -> None:
    target = urlsplit(real_server("nats"))
    assert target.hostname is not None
    assert target.port is not None
    proxy = CuttingProxy(target.hostname, target.port)
    queue = fresh_queue()
    bodies = [b"%04d" % i + b"x" * 100 for i in range(300)]
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, proxy.serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        url = f"nats://127.0.0.1:{port}?monitor=off&timeout=2&reconnect_wait=0.1&ack_wait=2"
        async with (
            open_broker(url) as broker,
            broker.open_consumer(queue, prefetch=400) as consumer,
        ):
            # A third of the batch reaches the server, then the
            # connection drops with the rest and every acknowledgement.
            proxy.cut_after(len(b"".join(bodies)) // 3)
            messages = [Outgoing(queue=queue, body=body) for body in bodies]
            with pytest.raises(BrokerUnavailable):
                await broker.dispatch(messages)
            assert proxy.cuts == 1
            # As the engine and the worker do: send again what failed.
            with trio.fail_after(PATIENCE):
                while True:
                    try:
                        await broker.dispatch(messages)
                        break
                    except BrokerUnavailable:
                        await trio.sleep(0.1)
            received: list[Delivery] = []
            with trio.fail_after(PATIENCE):
                while not set(bodies) <= {d.body for d in received}:
                    batch = await consumer.receive(400)
                    await consumer.ack(batch)
                    received.extend(batch)
        nursery.cancel_scope.cancel()
    # Every message arrived; those the server had before the drop, twice.
    assert {d.body for d in received} == set(bodies)


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.TRIO_DURABLE_TASKS.payments.3.17.12.1700000000000000000.4",
        "$JS.ACK.hub.ACCOUNTHASH.TRIO_DURABLE_TASKS.payments.5.17.12.1700000000000000000.4.r4nd",
    ],
)
def test_the_delivery_count_is_read_as_nats_py_reads_it(reply: str) -> None:
    msg = Msg(_client=None, subject="trio_durable.task.payments", reply=reply)  # type: ignore[arg-type]
    assert num_delivered(msg) == msg.metadata.num_delivered


async def test_a_publish_answered_no_responders_goes_again_until_a_stream_listens(
    real_server: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster a stream has no leader for a few seconds after its
    leader died, and publishes to it come back "no responders" at once: the
    outbox publishes them again after a backoff, and one lands as soon as a
    stream listens; one that no stream ever takes fails after the timeout,
    not at once."""
    subject = f"trio_durable_late_{secrets.token_hex(4)}"
    async with open_broker(f"{real_server('nats')}?monitor=off&timeout=3") as broker:
        assert isinstance(broker, NatsBroker)
        js = broker._js
        # Told (from the loop's thread) when a batch came back refused.
        token = trio.lowlevel.current_trio_token()
        refused = trio.Event()
        publish = broker._publisher.publish

        async def publish_and_tell(
            items: Sequence[Item], limit: float
        ) -> list[BaseException | None]:
            outcomes = await publish(items, limit)
            if any(isinstance(o, nats.js.errors.NoStreamResponseError) for o in outcomes):
                token.run_sync_soon(refused.set)
            return outcomes

        monkeypatch.setattr(broker._publisher, "publish", publish_and_tell)
        outcome: list[BaseException | None] = []

        async def publish_one() -> None:
            job = await broker._outbox.publish([(f"{subject}.x", b"late", None)])
            outcome.append(job.error)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(publish_one)
            with trio.fail_after(PATIENCE):
                await refused.wait()
            await broker._bridge.run(
                partial(js.add_stream, name=subject, subjects=[f"{subject}.>"])
            )
        try:
            assert outcome == [None]
            assert broker.statistics().publish_batches >= 2
            info = await broker._bridge.run(partial(js.stream_info, subject))
            assert info.state.messages == 1
        finally:
            await broker._bridge.run(partial(js.delete_stream, subject))
        started = trio.current_time()
        job = await broker._outbox.publish([(f"{subject}.y", b"never", None)])
        assert isinstance(job.error, nats.js.errors.NoStreamResponseError)
        assert trio.current_time() - started > 2.0
