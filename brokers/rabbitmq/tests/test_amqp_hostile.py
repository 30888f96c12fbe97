"""Hostile messages over RabbitMQ: the messages that crashed workers and
engines (issue 12, item 1) are published raw to a worker's task queue and to
an engine's results queue. Each is rejected, counted and dead-lettered to
``<queue>.dead``; the worker and the engine keep running and still run a
workflow to its end. On the shared server, on queues of a namespace of
their own, deleted afterwards.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable

import trio

from hostile import PATIENCE, open_hostile_feed
from trio_durable.brokers import Broker, open_broker
from trio_durable_rabbitmq import DEAD_LETTER_SUFFIX, AmqpBroker


async def dead_letters(broker: Broker, queue: str, expected: list[bytes]) -> Counter[bytes]:
    """Take ``expected``'s messages off ``queue``'s dead-letter queue."""
    got: Counter[bytes] = Counter()
    want = Counter(expected)
    async with broker.open_consumer(f"{queue}{DEAD_LETTER_SUFFIX}", prefetch=50) as consumer:
        with trio.fail_after(PATIENCE):
            while not want <= got:
                deliveries = await consumer.receive(50)
                got.update(d.body for d in deliveries)
                await consumer.ack(deliveries)
    return got


async def delete_queues(broker: AmqpBroker, queues: list[str]) -> None:
    connection = broker._connection
    assert connection is not None

    async def delete() -> None:
        channel = await connection.channel()
        for queue in queues:
            await channel.queue_delete(queue)
        await channel.close()

    await broker.bridge.run(delete)


async def test_hostile_messages_are_rejected_counted_and_dead_lettered(
    real_server: Callable[[str], str],
) -> None:
    amqp_url = real_server("rabbitmq")
    namespace = f"hostile{secrets.token_hex(4)}"
    async with open_broker(amqp_url) as broker, open_hostile_feed(broker, namespace) as feed:
        await feed.feed()
        # Each went to its queue's dead-letter queue.
        assert Counter(feed.tasks) <= await dead_letters(broker, feed.route, feed.tasks)
        assert Counter(feed.results) <= await dead_letters(broker, feed.results_queue, feed.results)
        queues = [feed.route, feed.results_queue]
    # Leave the shared server as it was (its consumers are gone now).
    async with open_broker(amqp_url) as broker:
        assert isinstance(broker, AmqpBroker)
        await delete_queues(broker, [*queues, *(q + DEAD_LETTER_SUFFIX for q in queues)])
