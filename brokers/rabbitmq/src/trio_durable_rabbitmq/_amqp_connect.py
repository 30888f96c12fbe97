"""Connecting to one of several RabbitMQ nodes (``?seeds=``).

aio-pika's robust connection reconnects to the one URL it was given, which
is no use when that node is the one that died. `RotatingConnection` holds
the URLs of every node it may use and moves to the next at each connection
attempt, so a reconnection after a node died goes to the next node, then
the one after, in turn. `connect_to_any` makes the first connection, trying each
URL in turn until one answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aio_pika
from yarl import URL

from ._amqp_topology import CLIENT_ERRORS
from ._amqp_url import AmqpOptions


class RotatingConnection(aio_pika.RobustConnection):
    """A robust connection whose every connection attempt (the first one
    and each reconnection) takes the next of ``urls``, in turn."""

    def __init__(self, url: URL, *, urls: Sequence[str], **kwargs: Any) -> None:
        # Set before aio-pika's __init__, which assigns `url` and `transport`.
        self._urls = [URL(u) for u in urls]
        self._turn = -1
        super().__init__(url, **kwargs)

    @property
    def url(self) -> URL:
        """The URL of the node this attempt connects (or connected) to."""
        return self._urls[max(self._turn, 0) % len(self._urls)]

    @url.setter
    def url(self, value: URL) -> None:
        # aio-pika sets it at creation (it is ``urls[0]``) and when a secret
        # is updated (not used here).
        self._urls[max(self._turn, 0) % len(self._urls)] = value

    @property
    def transport(self) -> Any:
        return self._transport

    @transport.setter
    def transport(self, value: Any) -> None:
        # aio-pika drops the transport at the start of each connection
        # attempt (and on close, where the turn does not matter): the next
        # attempt goes to the next node.
        if value is None and hasattr(self, "_transport"):
            self._turn += 1
        self._transport = value


async def connect_to_any(options: AmqpOptions) -> aio_pika.abc.AbstractRobustConnection:
    """Open a robust connection to the first of the URL's nodes that
    answers (its own host, then its seeds), within ``connect_timeout``.

    Raises:
      The client's error of the last node tried, or `TimeoutError`.
    """
    urls = options.client_urls

    async def attempt(first: int) -> aio_pika.abc.AbstractRobustConnection:
        order = [*urls[first:], *urls[:first]]
        connection = RotatingConnection(
            URL(order[0]),
            urls=order,
            reconnect_interval=options.reconnect_interval,
            fail_fast=True,
        )
        try:
            # Bounds every reconnection too: without it, one whose
            # handshake a restarting server never answers waits forever,
            # and no further attempt is made.
            await connection.connect(timeout=options.connect_timeout)
        except BaseException:
            await connection.close()
            raise
        return connection

    async def first_that_answers() -> aio_pika.abc.AbstractRobustConnection:
        for index in range(len(urls)):
            try:
                return await attempt(index)
            except CLIENT_ERRORS:
                if index == len(urls) - 1:
                    raise
        raise AssertionError("unreachable")

    return await asyncio.wait_for(first_that_answers(), options.connect_timeout)
