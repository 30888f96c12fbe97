"""A small broker adapter: queues kept in this process, opened by ``tiny://``.

The worked example of ``docs/writing-a-broker-adapter.md``. It implements
the broker protocol from scratch, on the public adapter SDK alone
(`trio_durable.brokers`): queues with priorities, prefetch, acks and
redelivery, worker descriptors kept as JSON with a time to live, and a size
limit. A package that ships it registers ``open_tiny_broker`` under the
entry-point group ``trio_durable.brokers`` as ``tiny``; the tests run it
through the public conformance suites.

Every ``tiny://`` URL opens a fresh broker: an engine and its workers share
one by being given the broker object (or by ``open_engine(serve=...)``).
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, final
from urllib.parse import parse_qsl, urlsplit

import attrs
import trio

from trio_durable.brokers import (
    Delivery,
    InvalidURLError,
    Outgoing,
    WorkerDescriptor,
    check_payload_sizes,
    descriptor_from_json,
    descriptor_to_json,
    mask_url,
)


@attrs.define(eq=False)
class _Message:
    body: bytes
    priority: int
    deliveries: int = 0
    """How many times it was handed to a consumer so far."""


@final
class TinyConsumer:
    """Receives the messages of one queue; made by `TinyBroker.open_consumer`."""

    def __init__(self, broker: TinyBroker, queue: str, prefetch: int) -> None:
        self._broker = broker
        self._queue = queue
        self._prefetch = prefetch
        self._held: dict[int, _Message] = {}  # delivered, not yet acked, by tag
        self._closed = False

    async def receive(self, max_items: int) -> list[Delivery]:
        """Wait for at least one message and return up to ``max_items``.

        Raises:
          trio.ClosedResourceError: The consumer is closed.
        """
        await trio.lowlevel.checkpoint()
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the consumer is closed")
            waiting = self._broker._queues.get(self._queue)
            room = self._prefetch - len(self._held)
            if waiting and room > 0:
                break
            await self._broker._changed.wait()
        # Taken only here, with no checkpoint left before the return: a
        # cancelled receive has taken nothing.
        batch: list[Delivery] = []
        for _ in range(min(max(1, max_items), room, len(waiting))):
            _, _, message = heapq.heappop(waiting)
            message.deliveries += 1
            tag = next(self._broker._tags)
            self._held[tag] = message
            batch.append(Delivery(body=message.body, deliveries=message.deliveries, tag=tag))
        return batch

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge messages: they are never delivered again."""
        await trio.lowlevel.checkpoint()
        for delivery in deliveries:
            self._held.pop(delivery.tag, None)
        self._broker._notify()  # room under the prefetch

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give messages back: delivered again if ``requeue``, else dropped."""
        await trio.lowlevel.checkpoint()
        for delivery in deliveries:
            message = self._held.pop(delivery.tag, None)
            if message is not None and requeue:
                self._broker._put(self._queue, message)
        self._broker._notify()

    def _close(self) -> None:
        # What it holds unacked goes back: at-least-once delivery.
        self._closed = True
        for message in self._held.values():
            self._broker._put(self._queue, message)
        self._held.clear()
        self._broker._notify()


@final
class TinyBroker:
    """A `trio_durable.brokers.Broker` whose queues live in this process;
    made by `open_tiny_broker`.

    Args:
      max_payload: The largest message body, in bytes, or None for no limit.

    Attributes:
      durable: False: its queues go with this process, so an engine that
        meets a step sent on another tiny broker sends it again.
    """

    durable: Final = False

    def __init__(self, *, max_payload: int | None = None) -> None:
        self.max_payload = max_payload
        # Per queue, a heap of (-priority, arrival, message): highest
        # priority first, first come first within one.
        self._queues: dict[str, list[tuple[int, int, _Message]]] = {}
        self._arrivals = itertools.count()
        self._tags = itertools.count()
        # Set (and replaced) whenever a receive may now succeed.
        self._changed = trio.Event()
        # Announcements as a server would keep them: JSON text, and when
        # they expire (Trio time: this broker lives in one process).
        self._announced: dict[str, tuple[str, float]] = {}

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _put(self, queue: str, message: _Message) -> None:
        entry = (-message.priority, next(self._arrivals), message)
        heapq.heappush(self._queues.setdefault(queue, []), entry)

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Put messages on their queues.

        Raises:
          PayloadTooLarge: A body is over `max_payload`; nothing was sent.
        """
        await trio.lowlevel.checkpoint()
        check_payload_sizes(messages, self.max_payload)
        for outgoing in messages:
            self._put(outgoing.queue, _Message(body=outgoing.body, priority=outgoing.priority))
        self._notify()

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[TinyConsumer]:
        """Consume ``queue``, with at most ``prefetch`` messages unacked."""
        consumer = TinyConsumer(self, queue, max(1, prefetch))
        try:
            yield consumer
        finally:
            consumer._close()

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        """Keep a worker's descriptor for ``ttl`` seconds."""
        await trio.lowlevel.checkpoint()
        text = json.dumps(descriptor_to_json(descriptor))
        self._announced[descriptor.instance_id] = (text, trio.current_time() + ttl)

    async def withdraw(self, instance_id: str) -> None:
        """Forget a worker's descriptor now."""
        await trio.lowlevel.checkpoint()
        self._announced.pop(instance_id, None)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        """The descriptors of live workers (consuming ``group``, if given),
        ordered by instance id."""
        await trio.lowlevel.checkpoint()
        now = trio.current_time()
        live: list[WorkerDescriptor] = []
        for instance_id in sorted(self._announced):
            text, expires = self._announced[instance_id]
            if expires <= now:
                del self._announced[instance_id]
                continue
            descriptor = descriptor_from_json(json.loads(text))
            if group is None or group in descriptor.groups:
                live.append(descriptor)
        return live

    async def worker_groups(self) -> list[str]:
        """The group routes live workers consume, sorted."""
        return sorted({g for d in await self.worker_descriptors() for g in d.groups})

    def quiet(self, queues: Sequence[str]) -> None:
        """None: this adapter does not track when its queues are empty, so
        ``Engine.drain`` counts the tasks it sent itself."""
        return None

    async def aclose(self) -> None:
        """Nothing to close: no connection, no task."""
        await trio.lowlevel.checkpoint()


@asynccontextmanager
async def open_tiny_broker(url: str) -> AsyncIterator[TinyBroker]:
    """Open a fresh `TinyBroker` for ``tiny://`` (or
    ``tiny://?max_payload=N``) and close it on exit.

    Raises:
      InvalidURLError: The URL is not ``tiny://`` or has a bad option.
    """
    parts = urlsplit(url)
    # Messages show the URL masked: a URL may hold a password.
    shown = mask_url(url)
    if parts.scheme != "tiny" or parts.netloc or parts.path or parts.fragment:
        raise InvalidURLError(f"not a tiny broker URL: {shown!r} (expected tiny://)")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"max_payload"})
    if unknown:
        raise InvalidURLError(f"unknown option(s) {', '.join(unknown)} in {shown!r}")
    max_payload = None
    if "max_payload" in options:
        text = options["max_payload"]
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise InvalidURLError(f"max_payload must be a positive integer, not {text!r}")
        max_payload = int(text)
    broker = TinyBroker(max_payload=max_payload)
    try:
        yield broker
    finally:
        await broker.aclose()
