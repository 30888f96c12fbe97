"""Reconnecting through a network that misbehaves the way a restarting
server does: connections cut, then new ones accepted and never answered
until the server is up. A proxy between the adapter and RabbitMQ plays that
network."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from functools import partial
from urllib.parse import urlsplit

import pytest
import trio
import trio.testing

from trio_durable.brokers import Delivery, Outgoing, open_broker

PATIENCE = 30.0
"""Seconds the adapter may take to be back once the network is healthy."""


class Proxy:
    """Forwards TCP connections to ``(host, port)``. `cut` drops every
    connection and makes the proxy hold the new ones silently (a server
    whose port is open before it speaks AMQP); `heal` forwards again."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.silent = False
        self.held: list[trio.SocketStream] = []
        self.held_one = trio.Event()
        self._links: list[trio.CancelScope] = []

    async def serve(self, stream: trio.SocketStream) -> None:
        if self.silent:
            self.held.append(stream)
            self.held_one.set()
            await trio.sleep_forever()
        with trio.CancelScope() as scope:
            self._links.append(scope)
            async with (
                stream,
                await trio.open_tcp_stream(self.host, self.port) as upstream,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(_pipe, stream, upstream, nursery.cancel_scope)
                nursery.start_soon(_pipe, upstream, stream, nursery.cancel_scope)

    async def cut(self) -> None:
        # What the client wrote before the cut reaches the server first (an
        # ack it was told is written, which the server would otherwise
        # never see, and deliver the message again): the pipes forward all
        # they can read before the links drop.
        await trio.testing.wait_all_tasks_blocked()
        self.silent = True
        for scope in self._links:
            scope.cancel()
        self._links.clear()

    def heal(self) -> None:
        self.silent = False


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except trio.BrokenResourceError:
        pass
    done.cancel()


@pytest.mark.parametrize("bridge", ["thread", "trio-asyncio"])
async def test_a_reconnection_the_server_never_answers_is_given_up_and_tried_again(
    real_server: Callable[[str], str], bridge: str
) -> None:
    target = urlsplit(real_server("rabbitmq"))
    assert target.hostname is not None
    assert target.port is not None
    proxy = Proxy(target.hostname, target.port)
    queue = f"reconnect.{secrets.token_hex(3)}"
    async with trio.open_nursery() as nursery:
        [listener] = await nursery.start(partial(trio.serve_tcp, proxy.serve, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        url = (
            f"amqp://{target.username}:{target.password}@127.0.0.1:{port}/"
            f"?bridge={bridge}&reconnect_interval=0.2&connect_timeout=2&publish_timeout=60"
        )
        async with open_broker(url) as broker, broker.open_consumer(queue, prefetch=10) as consumer:
            await broker.dispatch([Outgoing(queue=queue, body=b"before")])
            before = await consumer.receive(10)
            assert [d.body for d in before] == [b"before"]
            await consumer.ack(before)
            await proxy.cut()
            # The client tries again, and the proxy holds that attempt
            # unanswered; only then does the network heal.
            with trio.fail_after(PATIENCE):
                await proxy.held_one.wait()
            proxy.heal()
            # The held attempt times out, the next one gets through, and
            # the consumer comes back with the connection.
            received: list[Delivery] = []
            with trio.fail_after(PATIENCE):
                await broker.dispatch([Outgoing(queue=queue, body=b"after")])
                while not received:
                    received.extend(await consumer.receive(10))
            assert [d.body for d in received] == [b"after"]
            await consumer.ack(received)
        for stream in proxy.held:
            await stream.aclose()
        nursery.cancel_scope.cancel()
