"""The NATS adapter beyond the conformance suites: its URL options, queue
tokens, errors, the ``sync_interval`` warning and closing on cancel."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from trio_durable import InvalidURLError
from trio_durable.brokers import RESULTS, BrokerUnavailable, Outgoing, open_broker
from trio_durable_nats import NatsBroker, parse_nats_url, token


def test_url_options() -> None:
    options = parse_nats_url(
        "nats://u:p@example.org:4333/?bridge=trio-asyncio&ack_wait=2.5&max_deliver=8"
        "&timeout=3&reconnect_wait=0.2&replicas=3&monitor=off&dead_letter=off"
    )
    assert options.server == "nats://u:p@example.org:4333"
    assert options.shown == "nats://u:***@example.org:4333"
    assert (options.bridge, options.ack_wait, options.max_deliver) == ("trio-asyncio", 2.5, 8)
    assert (options.timeout, options.reconnect_wait, options.replicas) == (3.0, 0.2, 3)
    assert (options.monitor, options.dead_letter) == (None, False)
    # NATS over TLS: nats+tls://, which nats-py spells tls://.
    defaults = parse_nats_url("nats+tls://s3cret@nats.example.org")
    assert defaults.server == "tls://s3cret@nats.example.org:4222"
    assert defaults.shown == "nats+tls://***@nats.example.org:4222"
    assert (defaults.bridge, defaults.ack_wait, defaults.max_deliver) == ("thread", 30.0, 20)
    assert defaults.monitor == "http://nats.example.org:8222"
    assert parse_nats_url("nats://h?max_deliver=-1").max_deliver == -1
    # A cluster: more servers to try, with the first one's scheme and
    # credentials.
    cluster = parse_nats_url("nats+tls://u:p@a:4222?replicas=3&seeds=b:4223,%20c:4224")
    assert cluster.seeds == ("tls://u:p@b:4223", "tls://u:p@c:4224")
    assert cluster.replicas == 3
    assert defaults.seeds == ()


@pytest.mark.parametrize(
    "url",
    [
        "nats://",
        "nats://h/path",
        "nats://h#frag",
        "nats://h:port",
        "nats://h?unknown=1",
        "nats://h?ack_wait=1&ack_wait=2",
        "nats://h?ack_wait=0",
        "nats://h?ack_wait=nan",
        "nats://h?timeout=-1",
        "nats://h?max_deliver=1",
        "nats://h?max_deliver=x",
        "nats://h?replicas=0",
        "nats://h?bridge=fibers",
        "nats://h?monitor=ftp://x",
        "nats://h?dead_letter=maybe",
        "nats://h?seeds=",
        "nats://h?seeds=b",
        "nats://h?seeds=b:1,c",
        "nats://h?seeds=x@b:1",
        "nats://h?seeds=b:port",
        "amqp://h",
        # The generic TLS scheme is gone: nats+tls:// says it is NATS.
        "tls://h",
    ],
)
def test_bad_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError):
        parse_nats_url(url)


async def test_bad_urls_are_refused_on_open() -> None:
    with pytest.raises(InvalidURLError):
        async with open_broker("nats://127.0.0.1:4222?ack_wait=soon"):
            pass  # pragma: no cover


def test_queue_tokens() -> None:
    assert token("payments") == "payments"
    assert token("payments@acme") == "payments=40acme"
    assert token("render~gpu~pci") == "render=7Egpu=7Epci"
    assert token(RESULTS) == "trio_durable=2Eresults"
    assert token("a=40b") == "a=3D40b"  # not the token of "a@b"
    assert token("żółw") == "=C5=BC=C3=B3=C5=82w"
    digest = hashlib.sha256(b"x" * 300).hexdigest()[:32]
    assert token("x" * 300) == "x" * 150 + "=H" + digest
    assert token("x" * 300) != token("x" * 301)
    names = ["a.b", "a@b", "a~b", "a_b", "a-b", "a=2Eb", "a.b@c", "a@b.c"]
    assert len({token(name) for name in names}) == len(names)
    for name in names:
        assert not set(token(name)) & set(".*> /\\\t")


async def test_an_unreachable_server_is_unavailable() -> None:
    with pytest.raises(BrokerUnavailable) as raised:
        async with open_broker("nats://127.0.0.1:1?timeout=1&monitor=off"):
            pass  # pragma: no cover
    assert raised.value.__cause__ is not None


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://me:S3cQz9@127.0.0.1:1", "me:***@127.0.0.1:1"),
        ("nats://me:S3c%23Qz9@127.0.0.1:1", "me:***@127.0.0.1:1"),
        ("nats://S3cQz9@127.0.0.1:1", "***@127.0.0.1:1"),  # a token
    ],
)
async def test_errors_and_log_lines_do_not_show_the_password(
    url: str, shown: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(BrokerUnavailable) as raised:
        async with open_broker(f"{url}?timeout=1&monitor=off"):
            pass  # pragma: no cover
    assert shown in str(raised.value)
    printed = "".join(traceback.format_exception(raised.value))
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for secret in ("S3c", "Qz9"):
        assert secret not in printed
        assert secret not in logged


@pytest.fixture
def relaxed_server(tmp_path: Path) -> Iterator[str]:
    """A private nats-server with JetStream's default fsync interval."""
    from servers.fixture import installed

    server = installed("nats")
    workdir = tmp_path / "nats"
    monitor = server.free_port()
    url = server.start(workdir, port=server.free_port(), monitor_port=monitor, sync_always=False)
    try:
        yield f"{url}?monitor=http://127.0.0.1:{monitor}"
    finally:
        server.stop(workdir)


async def wait_for_record(caplog: pytest.LogCaptureFixture, text: str) -> None:
    with trio.fail_after(10):
        while True:
            if any(text in record.getMessage() for record in caplog.records):
                return
            await trio.sleep(0.02)


async def test_a_server_without_sync_always_is_warned_about(
    relaxed_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_durable.brokers.nats")
    async with open_broker(relaxed_server):
        await wait_for_record(caplog, "sync_interval: always")
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "fsyncs JetStream writes only every 120 s" in warning.getMessage()


async def test_a_server_with_sync_always_is_not(
    real_server: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    from servers import nats as server

    url = real_server("nats")
    caplog.set_level(logging.INFO, logger="trio_durable.brokers.nats")
    async with open_broker(url) as broker:
        assert isinstance(broker, NatsBroker)
        if broker.options.monitor != f"http://127.0.0.1:{server.MONITOR_PORT}":
            pytest.skip("the server's monitoring endpoint is elsewhere")
        # Another call after the check is done: the check ran by then.
        with trio.fail_after(10):
            await broker.worker_groups()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_cancelling_closes_cleanly_and_gives_messages_back(
    real_server: Callable[[str], str], bridge: str
) -> None:
    url = f"{real_server('nats')}?bridge={bridge}"
    queue = f"cancel.{os.getpid()}.{trio.current_time():.0f}.{bridge}"
    with trio.CancelScope() as scope:
        async with open_broker(url) as broker, broker.open_consumer(queue, prefetch=5) as c:
            await broker.dispatch([Outgoing(queue=queue, body=b"held")])
            with trio.fail_after(10):
                [held] = await c.receive(5)
            assert held.deliveries == 1
            scope.cancel()
            await trio.sleep_forever()
    async with open_broker(url) as broker, broker.open_consumer(queue, prefetch=5) as c:
        with trio.fail_after(5):  # well before ack_wait (30 s)
            [again] = await c.receive(5)
        assert (again.body, again.deliveries) == (b"held", 2)
        await c.ack([again])


async def test_closing_leaves_no_task_of_the_broker_pending(
    real_server: Callable[[str], str],
) -> None:
    def pending() -> list[str]:
        current = asyncio.current_task()
        return sorted(
            t.get_name() for t in asyncio.all_tasks() if t is not current and not t.done()
        )

    async def pending_on_loop() -> list[str]:
        return pending()

    queue = f"nats-test.{secrets.token_hex(4)}"
    async with open_broker(real_server("nats")) as broker:
        assert isinstance(broker, NatsBroker)
        async with broker.open_consumer(queue, prefetch=4):
            # The consumer's pull loop runs on the loop, held by the broker...
            running = await broker._bridge.run(pending_on_loop)
            assert any(name.startswith("trio_durable nats pull") for name in running)
            # ... and closing the broker (here while the consumer is still
            # open, as when its owner crashed) ends it, before the bridge goes.
            await broker.aclose()
            assert await broker._bridge.run(pending_on_loop) == []
