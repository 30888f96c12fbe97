"""The RabbitMQ adapter beyond the conformance suites: its URL, its errors,
its prefetch cap, queues made by others, and what it leaves behind."""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import threading
import traceback
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import pytest
import trio
from hypothesis import assume, given
from hypothesis import strategies as st

import trio_durable as td
from trio_durable import InvalidURLError, UsageError
from trio_durable.brokers import BrokerUnavailable, Delivery, Outgoing, PayloadTooLarge, open_broker
from trio_durable_rabbitmq import (
    DEFAULT_MAX_PAYLOAD,
    AmqpBroker,
    open_amqp_broker,
    parse_amqp_url,
    queue_arguments,
)
from trio_durable_rabbitmq._amqp_topology import amqp_queue


def threads() -> list[str]:
    """The threads running now, but for Trio's idle cached workers (which
    ran the bridge's loop and wait, idle, to be reused)."""
    return sorted(t.name for t in threading.enumerate() if not t.name.startswith("Trio thread"))


def pending_tasks() -> list[str]:
    """The names of the tasks pending on the running asyncio loop, but the
    current one (call it on the bridge's loop)."""
    current = asyncio.current_task()
    return sorted(t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done())


async def asyncio_pending() -> list[str]:
    return pending_tasks()


def with_query(url: str, query: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{query}"


def test_url_options_are_parsed() -> None:
    options = parse_amqp_url(
        "amqps://u:p@rabbit.example:5671/vh?bridge=trio-asyncio&prefetch=32"
        "&publish_timeout=2.5&reconnect_interval=0.5&connect_timeout=3&heartbeat=0&name=shop"
        "&max_payload=1000000"
    )
    assert options.bridge == "trio-asyncio"
    assert options.prefetch == 32
    assert options.max_payload == 1_000_000
    assert (options.publish_timeout, options.reconnect_interval, options.connect_timeout) == (
        2.5,
        0.5,
        3.0,
    )
    # Only aio-pika's own options reach aio-pika.
    assert options.client_url == "amqps://u:p@rabbit.example:5671/vh?heartbeat=0&name=shop"
    defaults = parse_amqp_url("amqp://localhost")
    assert (defaults.bridge, defaults.prefetch, defaults.publish_timeout) == ("thread", None, 30.0)
    # RabbitMQ's default max_message_size (the client cannot ask for it).
    assert defaults.max_payload == DEFAULT_MAX_PAYLOAD == 128 * 1024 * 1024


@pytest.mark.parametrize(
    "url",
    [
        "amqp://",
        "amqp://host:port/",
        "amqp://host?bridge=asyncio",
        "amqp://host?prefetch=0",
        "amqp://host?prefetch=many",
        "amqp://host?prefetch=1&prefetch=2",
        "amqp://host?publish_timeout=-1",
        "amqp://host?reconnect_interval=nan",
        "amqp://host?heartbeat=-5",
        "amqp://host?durable=1",
        "amqp://host?max_payload=0",
        "amqp://host?max_payload=1.5",
        "amqp://host?max_payload=lots",
        f"amqp://host?max_payload={512 * 1024 * 1024 + 1}",
        "nats://host",
    ],
)
async def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError):
        parse_amqp_url(url)
    with pytest.raises(InvalidURLError):
        async with open_amqp_broker(url):
            pass  # pragma: no cover


async def test_an_unreachable_server_is_broker_unavailable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    before = threads()
    with pytest.raises(BrokerUnavailable) as caught:
        async with open_broker(f"amqp://guest:guest@127.0.0.1:{port}/?connect_timeout=5"):
            pass  # pragma: no cover
    assert caught.value.__cause__ is not None
    assert threads() == before


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_the_entry_point_opens_it_and_closing_leaves_nothing(
    real_server: Callable[[str], str], bridge: str
) -> None:
    before = threads()
    url = with_query(real_server("rabbitmq"), f"bridge={bridge}")
    async with open_broker(url) as broker:
        assert isinstance(broker, AmqpBroker)
        assert broker.bridge.mode == bridge
    assert threads() == before
    # Cancelled while it waits for a message: it closes cleanly too.
    queue = f"amqp-test.{secrets.token_hex(4)}"
    with trio.move_on_after(0.5):
        async with open_broker(url) as broker, broker.open_consumer(queue, prefetch=1) as consumer:
            await consumer.receive(1)
    assert threads() == before


async def test_the_url_caps_prefetch(real_server: Callable[[str], str]) -> None:
    queue = f"amqp-test.{secrets.token_hex(4)}"
    async with open_broker(with_query(real_server("rabbitmq"), "prefetch=2")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"m%d" % i) for i in range(5)])
        async with broker.open_consumer(queue, prefetch=100) as consumer:
            held: list[Delivery] = []
            with trio.fail_after(10):
                while len(held) < 2:
                    held.extend(await consumer.receive(100))
            with trio.move_on_after(0.5):
                held.extend(await consumer.receive(100))
            assert len(held) == 2
            await consumer.ack(held)


async def test_a_queue_made_with_other_arguments_is_used_as_it_is(
    real_server: Callable[[str], str],
) -> None:
    url = real_server("rabbitmq")
    queue = f"amqp-test.{secrets.token_hex(4)}"
    async with open_amqp_broker(url) as broker:
        connection = broker._connection
        assert connection is not None

        async def declare_plain() -> None:
            channel = await connection.channel()
            await channel.declare_queue(queue, durable=True)
            await channel.close()

        await broker.bridge.run(declare_plain)
        assert queue_arguments(queue)  # ours would differ
        await broker.dispatch([Outgoing(queue=queue, body=b"kept")])
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            with trio.fail_after(10):
                [delivery] = await consumer.receive(1)
            assert delivery.body == b"kept"
            await consumer.ack([delivery])


def test_aio_pika_is_the_client() -> None:
    assert aio_pika.__version__


async def test_a_queue_deleted_behind_its_back_is_declared_again(
    real_server: Callable[[str], str],
) -> None:
    queue = f"amqp-test.{secrets.token_hex(4)}"
    async with open_amqp_broker(real_server("rabbitmq")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"first")])
        connection = broker._connection
        assert connection is not None

        async def delete() -> None:
            channel = await connection.channel()
            await channel.queue_delete(queue)
            await channel.close()

        await broker.bridge.run(delete)
        # Returned unroutable, the message makes the broker declare its
        # queue again and send it once more: it is not silently dropped.
        await broker.dispatch([Outgoing(queue=queue, body=b"second")])
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            with trio.fail_after(10):
                [delivery] = await consumer.receive(1)
            assert delivery.body == b"second"
            await consumer.ack([delivery])


async def test_closing_leaves_no_task_of_the_broker_pending(
    real_server: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with open_broker(real_server("rabbitmq")) as broker:
        assert isinstance(broker, AmqpBroker)

        async def slow_announcement(message: dict[str, object], ttl: float | None) -> None:
            # A server slow to take the request to announce again.
            await asyncio.Event().wait()

        monkeypatch.setattr(broker, "_publish_announcement", slow_announcement)

        async def reconnected() -> list[str]:
            broker._on_reconnect()
            await asyncio.sleep(0)
            return pending_tasks()

        # What a reconnection starts on the loop is the broker's, held by it...
        assert "trio_durable amqp announce sync" in await broker.bridge.run(reconnected)
        await broker.aclose()
        # ... and closing the broker ends it, before the bridge goes.
        assert await broker.bridge.run(asyncio_pending) == []


async def test_max_payload_refuses_larger_bodies_before_sending(
    real_server: Callable[[str], str],
) -> None:
    queue = f"amqp-test.{secrets.token_hex(4)}"
    async with open_broker(with_query(real_server("rabbitmq"), "max_payload=1000")) as broker:
        assert broker.max_payload == 1000
        with pytest.raises(PayloadTooLarge) as caught:
            await broker.dispatch(
                [Outgoing(queue=queue, body=b"small"), Outgoing(queue=queue, body=b"x" * 1001)]
            )
        assert (caught.value.size, caught.value.limit) == (1001, 1000)
        await broker.dispatch([Outgoing(queue=queue, body=b"y" * 1000)])
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            with trio.fail_after(10):
                received = await consumer.receive(10)
            with trio.move_on_after(0.5):
                received.extend(await consumer.receive(10))
            # The refused batch sent nothing, not even its small message.
            assert [d.body for d in received] == [b"y" * 1000]
            await consumer.ack(received)


async def test_a_body_the_server_refuses_is_payload_too_large(
    real_server: Callable[[str], str],
) -> None:
    # max_payload= above the server's max_message_size (128 MiB by default):
    # the server closes the channel; the adapter names the server's limit.
    queue = f"amqp-test.{secrets.token_hex(4)}"
    url = with_query(real_server("rabbitmq"), f"max_payload={512 * 1024 * 1024}")
    async with open_broker(url) as broker:
        body = b"x" * (DEFAULT_MAX_PAYLOAD + 1)
        with trio.fail_after(30), pytest.raises(PayloadTooLarge) as caught:
            await broker.dispatch([Outgoing(queue=queue, body=body)])
        assert (caught.value.queue, caught.value.size, caught.value.limit) == (
            queue,
            DEFAULT_MAX_PAYLOAD + 1,
            DEFAULT_MAX_PAYLOAD,
        )
        del body
        # The publishing channel comes back for what follows.
        await broker.dispatch([Outgoing(queue=queue, body=b"after")])
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            with trio.fail_after(10):
                received = await consumer.receive(10)
            assert [d.body for d in received] == [b"after"]
            await consumer.ack(received)


async def test_a_refused_login_does_not_show_the_password(
    real_server: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = real_server("rabbitmq")
    parts = urlsplit(url)
    wrong = urlunsplit(parts._replace(netloc=f"guest:n0t%23Th1s@{parts.hostname}:{parts.port}"))
    with pytest.raises(BrokerUnavailable) as caught:
        async with open_broker(with_query(wrong, "connect_timeout=5")):
            pytest.fail("logged in with a wrong password")  # pragma: no cover
    shown = "".join(traceback.format_exception(caught.value))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in ("n0t", "Th1s"):
        assert secret not in shown
        assert secret not in logged


# -- queue names the client library does not send as they are ----------------------


def test_a_queue_name_is_sent_as_it_is_or_escaped() -> None:
    assert amqp_queue("payments@acme") == "payments@acme"
    assert amqp_queue("g.x-1:2/3 #,_") == "g.x-1:2/3 #,_"
    assert amqp_queue("g~gpu") == "g+7e+gpu"
    assert amqp_queue("g~cuda~gpu") == "g+7e+cuda+7e+gpu"
    assert amqp_queue("a+b") == "a+2b+b"
    assert amqp_queue("café") == "caf+e9+"
    with pytest.raises(UsageError):
        amqp_queue("")
    with pytest.raises(UsageError):
        amqp_queue("amq.mine")
    with pytest.raises(UsageError):
        amqp_queue("~" * 70)


@given(st.text(min_size=1, max_size=40), st.text(min_size=1, max_size=40))
def test_two_queues_never_share_a_name_on_the_server(first: str, second: str) -> None:
    assume(first != second and not first.startswith("amq.") and not second.startswith("amq."))
    assert amqp_queue(first) != amqp_queue(second)


@pytest.mark.parametrize("queue", ["amqp-test~gpu", "amqp-test~café", "amqp-test+x"])
async def test_a_queue_of_any_name_carries_its_messages(
    real_server: Callable[[str], str], queue: str
) -> None:
    queue = f"{queue}.{secrets.token_hex(4)}"
    async with open_broker(real_server("rabbitmq")) as broker:
        await broker.dispatch([Outgoing(queue=queue, body=b"for the capable")])
        assert isinstance(broker, AmqpBroker)
        # Confirmed by the server: it holds the message.
        assert await broker.backlog(queue) == 1
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            with trio.fail_after(10):
                [delivery] = await consumer.receive(1)
            assert delivery.body == b"for the capable"
            await consumer.ack([delivery])
        assert await broker.backlog(queue) == 0


capable = td.App("amqp-capable")


@capable.step(group="amqp-gpu", requires=["gpu"])
async def render(frame: int) -> str:
    return f"frame {frame} rendered"


@capable.workflow()
async def film(ctx: td.Context, frames: int) -> list[str]:
    return [await ctx.step(render, frame) for frame in range(frames)]


async def test_a_step_that_requires_a_capability_runs_over_rabbitmq(
    real_server: Callable[[str], str],
) -> None:
    url = real_server("rabbitmq")
    async with (
        td.open_engine(capable, broker=url) as engine,
        td.open_worker(capable, broker=url, groups=["amqp-gpu"], capabilities=["gpu"]),
    ):
        run_id = f"film-{secrets.token_hex(4)}"
        await engine.start(film, 2, run_id=run_id)
        with trio.fail_after(30):
            assert await engine.result(run_id) == ["frame 0 rendered", "frame 1 rendered"]
