"""Quorum queues (``?queue_type=quorum``) and more nodes (``?seeds=``) on
the shared single RabbitMQ: the URL options, the queues' arguments, counts
and limits kept by the server, the error for a queue of the other type, and
a first connection that goes to the next node when the first is down. The
failover itself is tested on a cluster (tests/integration/test_rabbitmq_cluster.py)."""

from __future__ import annotations

import asyncio
import secrets
import socket
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest
import trio

from trio_durable import InvalidURLError
from trio_durable.brokers import BrokerUnavailable, Outgoing
from trio_durable_rabbitmq import (
    DEAD_LETTER_SUFFIX,
    open_amqp_broker,
    parse_amqp_url,
    queue_arguments,
)


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def closed_port() -> int:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_quorum_and_seed_options_are_parsed() -> None:
    options = parse_amqp_url(
        "amqp://u:p@a.example:5673/vh?queue_type=quorum&delivery_limit=7"
        "&seeds=b.example:5674,c.example,[::1]:5675&heartbeat=5"
    )
    assert (options.queue_type, options.delivery_limit) == ("quorum", 7)
    # Each seed with the first host's credentials, vhost and client options.
    assert options.client_urls == (
        "amqp://u:p@a.example:5673/vh?heartbeat=5",
        "amqp://u:p@b.example:5674/vh?heartbeat=5",
        "amqp://u:p@c.example/vh?heartbeat=5",
        "amqp://u:p@[::1]:5675/vh?heartbeat=5",
    )
    defaults = parse_amqp_url("amqp://localhost")
    assert (defaults.queue_type, defaults.delivery_limit, defaults.seed_urls) == (
        "classic",
        20,
        (),
    )
    assert queue_arguments("q", "quorum", 7) == {
        "x-queue-type": "quorum",
        "x-delivery-limit": 6,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "q.dead",
    }
    assert "x-max-priority" in queue_arguments("q")


@pytest.mark.parametrize(
    "url",
    [
        "amqp://host?queue_type=stream",
        "amqp://host?queue_type=",
        "amqp://host?queue_type=quorum&queue_type=classic",
        "amqp://host?delivery_limit=5",
        "amqp://host?queue_type=classic&delivery_limit=5",
        "amqp://host?queue_type=quorum&delivery_limit=0",
        "amqp://host?queue_type=quorum&delivery_limit=many",
        "amqp://host?seeds=",
        "amqp://host?seeds=a:1,,b:2",
        "amqp://host?seeds=a:port",
        "amqp://host?seeds=u:p@a:1",
        "amqp://host?seeds=a:1/vhost",
    ],
)
async def test_bad_quorum_and_seed_options_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError):
        parse_amqp_url(url)
    with pytest.raises(InvalidURLError):
        async with open_amqp_broker(url):
            pass  # pragma: no cover


async def with_aio_pika(url: str, work: Callable[[aio_pika.abc.AbstractChannel], Any]) -> Any:
    """Run ``work`` on a plain aio-pika channel (on a thread of its own)."""

    async def main() -> Any:
        connection = await aio_pika.connect(url)
        try:
            return await work(await connection.channel())
        finally:
            await connection.close()

    return await trio.to_thread.run_sync(asyncio.run, main())


async def test_quorum_queues_count_and_limit_deliveries(real_server: Callable[[str], str]) -> None:
    url = real_server("rabbitmq")
    queue = f"amqp-quorum.{secrets.token_hex(4)}"
    async with open_amqp_broker(with_query(url, "queue_type=quorum&delivery_limit=3")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"poison", priority=5)])
        counts = []
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            for _ in range(3):
                with trio.fail_after(10):
                    [delivery] = await consumer.receive(1)
                counts.append(delivery.deliveries)
                await consumer.reject([delivery], requeue=True)
            # The third return was one too many: RabbitMQ dead-lettered it.
            with trio.move_on_after(1.0):
                extra = await consumer.receive(1)
                pytest.fail(f"delivered past the limit: {extra}")  # pragma: no cover
        # Counted by the server, not by copies of the adapter.
        assert counts == [1, 2, 3]
        assert broker.statistics().published == 1

    async def inspect(channel: aio_pika.abc.AbstractChannel) -> Any:
        declared = await channel.declare_queue(queue, passive=True)
        dead = await channel.declare_queue(queue + DEAD_LETTER_SUFFIX, passive=True)
        message = await dead.get(timeout=10)
        await message.ack()
        await channel.queue_delete(queue)
        await channel.queue_delete(queue + DEAD_LETTER_SUFFIX)
        return declared.declaration_result.message_count, message.body, message.headers

    left, body, headers = await with_aio_pika(url, inspect)
    assert (left, body) == (0, b"poison")
    assert headers["x-first-death-reason"] == "delivery_limit"


@pytest.mark.parametrize(("made", "wanted"), [("classic", "quorum"), ("quorum", "classic")])
async def test_a_queue_of_the_other_type_is_a_clear_error(
    real_server: Callable[[str], str], made: str, wanted: str
) -> None:
    url = real_server("rabbitmq")
    queue = f"amqp-quorum.{secrets.token_hex(4)}"
    async with open_amqp_broker(with_query(url, f"queue_type={made}")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"kept")])
    try:
        async with open_amqp_broker(with_query(url, f"queue_type={wanted}")) as broker:
            with pytest.raises(BrokerUnavailable, match=f"exists as a {made}"):
                await broker.dispatch([Outgoing(queue=queue, body=b"refused")])
            with pytest.raises(BrokerUnavailable, match="a queue's type cannot change"):
                async with broker.open_consumer(queue, prefetch=1):
                    pass  # pragma: no cover
            # The broker goes on for the other queues.
            await broker.dispatch([Outgoing(queue=queue + ".other", body=b"fine")])
    finally:

        async def delete(channel: aio_pika.abc.AbstractChannel) -> Any:
            for name in (queue, queue + ".other"):
                await channel.queue_delete(name)
                await channel.queue_delete(name + DEAD_LETTER_SUFFIX)

        await with_aio_pika(url, delete)


async def test_the_first_connection_goes_to_a_seed_when_the_host_is_down(
    real_server: Callable[[str], str],
) -> None:
    url = real_server("rabbitmq")
    host_port = url.split("@")[-1].split("/")[0]
    dead = url.replace(host_port, f"127.0.0.1:{closed_port()}")
    queue = f"amqp-quorum.{secrets.token_hex(4)}"
    async with open_amqp_broker(with_query(dead, f"seeds={host_port}&connect_timeout=5")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"via the seed")])
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            with trio.fail_after(10):
                [delivery] = await consumer.receive(1)
            assert delivery.body == b"via the seed"
            await consumer.ack([delivery])
    # With no node up, opening fails as with one host.
    with pytest.raises(BrokerUnavailable):
        async with open_amqp_broker(
            with_query(dead, f"seeds=127.0.0.1:{closed_port()}&connect_timeout=5")
        ):
            pass  # pragma: no cover
