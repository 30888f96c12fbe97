"""How the RabbitMQ adapter batches: concurrent dispatches published
together, a batch of acks sent as one ``basic.ack`` with ``multiple`` set
where that is correct (and never acking what the batch leaves out), and
that a connection dropped in the middle of a batch loses no message."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import partial
from urllib.parse import urlsplit

import pytest
import trio

from servers.proxy import CuttingProxy
from trio_durable.brokers import Consumer, Delivery, Outgoing, open_broker
from trio_durable_rabbitmq import AmqpBroker

PATIENCE = 30.0


def fresh_queue() -> str:
    return f"batching.{secrets.token_hex(4)}"


async def receive_all(consumer: Consumer, count: int) -> list[Delivery]:
    received: list[Delivery] = []
    with trio.fail_after(PATIENCE):
        while len(received) < count:
            received.extend(await consumer.receive(count))
    return received


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_concurrent_dispatches_are_one_batch_and_acks_one_frame(
    real_server: Callable[[str], str], bridge: str
) -> None:
    queue = fresh_queue()
    async with open_broker(f"{real_server('rabbitmq')}?bridge={bridge}") as broker:
        assert isinstance(broker, AmqpBroker)
        await broker.dispatch([Outgoing(queue=queue, body=b"first")])  # declares the queue
        before = broker.statistics()
        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(broker.dispatch, [Outgoing(queue=queue, body=b"%d" % i)])
        after = broker.statistics()
        assert after.published - before.published == 200
        # Queued while none was in flight: published together.
        assert after.publish_batches - before.publish_batches <= 2
        assert after.bridge.calls - before.bridge.calls <= 2
        async with broker.open_consumer(queue, prefetch=500) as consumer:
            received = await receive_all(consumer, 201)
            before = broker.statistics()
            await consumer.ack(received)
            after = broker.statistics()
            # Every tag up to the last one is in the batch: one frame.
            assert (after.ack_frames - before.ack_frames, after.acked - before.acked) == (1, 201)
            assert after.bridge.calls - before.bridge.calls == 1
        assert sorted(d.body for d in received) == sorted(
            [b"first", *(b"%d" % i for i in range(200))]
        )
        # Nothing comes back: all were acked.
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            with trio.move_on_after(0.5):
                leftover = await consumer.receive(10)
                pytest.fail(f"acked messages came back: {leftover!r}")


async def test_a_multiple_ack_never_acks_what_the_batch_leaves_out(
    real_server: Callable[[str], str],
) -> None:
    queue = fresh_queue()
    async with open_broker(real_server("rabbitmq")) as broker:
        assert isinstance(broker, AmqpBroker)
        await broker.dispatch([Outgoing(queue=queue, body=b"%d" % i) for i in range(10)])
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_all(consumer, 10)
            by_body = {int(d.body): d for d in received}
            # The later half first: the earlier tags are a gap, so one frame each.
            before = broker.statistics()
            await consumer.ack([by_body[i] for i in range(6, 10)])
            assert broker.statistics().ack_frames - before.ack_frames == 4
            # Then all but 3: a multiple ack up to 2, one frame each for 4 and 5
            # (6 to 9 are settled already, but 3 is a gap before them).
            before = broker.statistics()
            await consumer.ack([by_body[i] for i in (0, 1, 2, 4, 5)])
            assert broker.statistics().ack_frames - before.ack_frames == 3
        # Closing the consumer gave back the one it held: 3, and only 3.
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            [again] = await receive_all(consumer, 1)
            assert (again.body, again.deliveries) == (b"3", 2)
            with trio.move_on_after(0.5):
                extra = await consumer.receive(10)
                pytest.fail(f"acked messages came back: {extra!r}")
            before = broker.statistics()
            await consumer.ack([again])
            # Acked twice: the second is skipped, not sent (an unknown tag
            # would close the channel).
            await consumer.ack([again])
            assert broker.statistics().ack_frames - before.ack_frames == 1


async def test_a_connection_dropped_mid_batch_loses_no_message(
    real_server: Callable[[str], str],
) -> None:
    target = urlsplit(real_server("rabbitmq"))
    assert target.hostname is not None
    assert target.port is not None
    proxy = CuttingProxy(target.hostname, target.port)
    queue = fresh_queue()
    bodies = [b"%04d" % i + b"x" * 100 for i in range(300)]
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, proxy.serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        url = (
            f"amqp://{target.username}:{target.password}@127.0.0.1:{port}/"
            "?reconnect_interval=0.2&publish_timeout=60"
        )
        async with open_broker(url) as broker:
            await broker.dispatch([Outgoing(queue=queue, body=b"declare")])
            # A third of the batch's frames reach the server, then the
            # connection drops with the rest and their confirms: the
            # dispatch waits for the connection and publishes again what
            # was not confirmed.
            proxy.cut_after(len(b"".join(bodies)) // 3)
            with trio.fail_after(PATIENCE):
                await broker.dispatch([Outgoing(queue=queue, body=body) for body in bodies])
            assert proxy.cuts == 1
            received: list[Delivery] = []
            async with broker.open_consumer(queue, prefetch=500) as consumer:
                with trio.fail_after(PATIENCE):
                    while not set(bodies) <= {d.body for d in received}:
                        batch = await consumer.receive(500)
                        await consumer.ack(batch)
                        received.extend(batch)
        nursery.cancel_scope.cancel()
    assert {d.body for d in received} - {b"declare"} == set(bodies)
