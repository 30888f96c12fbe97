"""The RabbitMQ broker: aio-pika behind the Trio bridge.

``amqp://user:password@host:5672/vhost?option=value`` (or ``amqps://``)
opens a `AmqpBroker`. Everything that touches aio-pika runs on the bridge's
asyncio loop (`open_bridge`), once per batch: a batch of publishes (what
concurrent dispatches queued, see `_amqp_publish`), a batch of acks, a
batch of deliveries handed to Trio through an `Inbox` (see `_amqp_consume`).
This module holds the broker itself: connecting, dispatch, consumers, and
worker descriptors.

Topology (see ``docs/rabbitmq.md``):

- every queue name the engine uses (a task queue per route, a results queue
  per store) is a durable classic queue of that name with
  ``x-max-priority: 9`` (or, with ``?queue_type=quorum``, a quorum queue
  with ``x-delivery-limit`` and no priorities) and a dead-letter queue
  ``<queue>.dead`` (through the default exchange), declared on first use by
  a dispatch or a consumer;
- messages are persistent and published with publisher confirms; a consumer
  has a channel of its own with ``basic.qos(prefetch)`` and acks by hand;
- classic queues only say whether a message was delivered before
  (``redelivered``), so the adapter counts deliveries itself: a message that
  comes back redelivered is published again with its count, in the header
  ``x-td-deliveries``, one higher, and the returned copy is acked only once
  that publish is confirmed (quorum queues count in ``x-delivery-count``,
  which is read instead). A consumer sees each delivery counted from 1;
- workers announce their descriptors on the fanout exchange
  ``trio_durable.workers``; each open broker keeps a view of them from an
  exclusive queue bound to it, with each entry's time to live, and asks the
  others to announce again when it connects.

The connection is aio-pika's robust connection: when it drops, it is opened
again every ``reconnect_interval`` seconds (to the next node of
``?seeds=``, in turn, see `_amqp_connect`), consumers resume, and what was
received and not acked is delivered again (acks of such stale deliveries are
skipped: the server gave them back when the old channel closed). A dispatch
made while the connection is down waits for it up to ``publish_timeout``
seconds, then raises `BrokerUnavailable`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar, final

import aio_pika
import aiormq
import attrs
import trio
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel
from pamqp import commands as spec

from trio_durable.brokers import (
    Bridge,
    BridgeStatistics,
    BrokerUnavailable,
    Inbox,
    Outbox,
    Outgoing,
    OwnedTasks,
    PayloadTooLarge,
    WorkerDescriptor,
    check_payload_sizes,
    descriptor_from_json,
    descriptor_to_json,
    open_bridge,
    scrub,
)

from ._amqp_connect import connect_to_any
from ._amqp_consume import AmqpConsumer, Requeues, open_amqp_consumer
from ._amqp_publish import Item, Publisher, Publishing
from ._amqp_topology import (
    CLIENT_ERRORS,
    CLOSE_TIMEOUT,
    MAX_PRIORITY,
    TRANSIENT,
    WORKERS_EXCHANGE,
    amqp_queue,
)
from ._amqp_url import AmqpOptions, parse_amqp_url

logger = logging.getLogger("trio_durable")

T = TypeVar("T")


@final
@attrs.define(frozen=True, kw_only=True)
class AmqpStatistics:
    """What an `AmqpBroker` did so far, from `AmqpBroker.statistics`.

    Attributes:
      bridge: Its bridge's crossings (see `trio_durable.brokers.BridgeStatistics`).
      publish_batches: Batches of confirmed publishes (each one crossing,
        its confirms awaited together); redeliveries counted up make
        batches of their own.
      published: Messages those batches carried.
      ack_frames: Ack and reject frames its open consumers sent (an ack
        with ``multiple`` set counts once).
      acked: Messages those frames settled.
    """

    bridge: BridgeStatistics
    publish_batches: int
    published: int
    ack_frames: int
    acked: int


@final
class AmqpBroker:
    """A `Broker` over RabbitMQ; made by `open_amqp_broker`.

    Attributes:
      options: What its URL says.
      bridge: The bridge its client library runs behind.
    """

    def __init__(self, bridge: Bridge, options: AmqpOptions) -> None:
        self.bridge = bridge
        self.options = options
        self._origin = f"broker-{secrets.token_hex(8)}"
        self._connection: aio_pika.abc.AbstractRobustConnection | None = None
        self._publisher: AbstractRobustChannel | None = None
        # Only touched on the asyncio loop: the publishing half (queue
        # declarations, confirmed batches) and the counting of redeliveries.
        self._outgoing = Publisher(
            self._origin, options.publish_timeout, options.queue_type, options.delivery_limit
        )
        self._requeues = Requeues(self._outgoing)
        # Concurrent dispatches, published together (Trio side).
        self._outbox: Outbox[Item] = Outbox(
            Publishing(bridge, self._outgoing), first=(PayloadTooLarge,)
        )
        self._consumers: list[AmqpConsumer] = []
        # The tasks this broker starts on the loop itself (not those the
        # client library runs its callbacks in); closed with the broker.
        self._tasks = OwnedTasks()
        self._closed = False
        # Worker descriptors: the view from announcements (Trio side), and
        # what this broker announced itself (read on the asyncio side to
        # answer another broker's request to announce again).
        self._view: dict[str, tuple[WorkerDescriptor, float]] = {}
        self._view_inbox: Inbox[tuple[dict[str, Any], float]] = bridge.inbox()
        self._own_lock = threading.Lock()
        self._own: dict[str, tuple[bytes, float]] = {}

    @property
    def durable(self) -> bool:
        """True: tasks are persistent messages on durable queues of the
        RabbitMQ server, which keeps them when an engine's or a worker's
        process ends (see `trio_durable.brokers.Broker.durable`)."""
        return True

    @property
    def max_payload(self) -> int:
        """The largest message body a dispatch sends (the URL's
        ``max_payload=``, by default RabbitMQ's default ``max_message_size``)."""
        return self.options.max_payload

    def statistics(self) -> AmqpStatistics:
        """What this broker did so far: crossings, publish batches, ack
        frames (see `AmqpStatistics`)."""
        return AmqpStatistics(
            bridge=self.bridge.statistics(),
            publish_batches=self._outgoing.batches,
            published=self._outgoing.published,
            ack_frames=sum(c.acks.frames for c in self._consumers),
            acked=sum(c.acks.settled_messages for c in self._consumers),
        )

    # -- the bridge ------------------------------------------------------------------

    async def _run(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        try:
            return await self.bridge.run(fn)
        except CLIENT_ERRORS as exc:
            reason = scrub(str(exc), self.options.client_url)
            raise BrokerUnavailable(f"RabbitMQ: {type(exc).__name__}: {reason}") from exc
        except TimeoutError as exc:
            reason = scrub(str(exc), self.options.client_url)
            raise BrokerUnavailable(f"RabbitMQ did not answer in time: {reason}") from exc

    # -- connecting ------------------------------------------------------------------

    async def _connect(self) -> None:
        options = self.options

        async def connect() -> None:
            connection = await connect_to_any(options)
            self._connection = self._outgoing.connection = connection
            self._publisher = await connection.channel(publisher_confirms=True)
            self._outgoing.channel = self._publisher
            channel = await self._publisher.get_underlay_channel()
            await channel.exchange_declare(WORKERS_EXCHANGE, exchange_type="fanout", durable=True)
            view_channel = await connection.channel(publisher_confirms=False)
            view = await view_channel.declare_queue(
                f"trio_durable.view.{self._origin}", exclusive=True, auto_delete=True
            )
            await view.bind(WORKERS_EXCHANGE)
            await view.consume(self._on_announcement, no_ack=True)
            connection.reconnect_callbacks.add(self._on_reconnect)
            await self._publish_announcement({"kind": "sync"}, ttl=None)

        await self._run(connect)

    async def aclose(self) -> None:
        """Close the connection (idempotent)."""
        if self._closed:
            return
        connection = self._connection

        async def close() -> None:
            try:
                await self._tasks.aclose()
            finally:
                if connection is not None:
                    await connection.close()

        try:
            await self._run(close)
        finally:
            self._closed = True

    def _on_reconnect(self, *_: Any) -> None:
        # On the loop. Declarations may have been lost with the server's
        # state (a fresh node): declare again on next use. And ask the
        # others to announce, as at the start.
        self._outgoing.declared.clear()
        # Closing, when nobody needs the announcements any more.
        with suppress(trio.ClosedResourceError):
            self._tasks.start(self._ask_to_announce(), name="trio_durable amqp announce sync")

    async def _ask_to_announce(self) -> None:
        """Ask the other brokers to announce their workers again (on the loop)."""
        try:
            await self._publish_announcement({"kind": "sync"}, ttl=None)
        except CLIENT_ERRORS as exc:
            # Their heartbeats announce them again within a ttl anyway.
            logger.debug("could not ask the other brokers to announce: %s", exc)

    # -- dispatch ------------------------------------------------------------------------

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Put messages on their queues, persistent and confirmed.

        Waits up to ``publish_timeout`` for a dropped connection to return.
        Concurrent dispatches are published together, in one crossing of the
        bridge, their confirms awaited together.

        Raises:
          PayloadTooLarge: A body is over `max_payload`; nothing was sent.
          BrokerUnavailable: They could not all be confirmed; some may have been.
        """
        if not messages:
            await trio.lowlevel.checkpoint()
            return
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        queues = [amqp_queue(message.queue) for message in messages]
        # Checked here, not left to the server: it would close the publishing
        # channel, failing the other confirms in flight on it.
        check_payload_sizes(messages, self.options.max_payload)
        job = await self._outbox.publish(
            [
                (queue, m.body, max(0, min(MAX_PRIORITY, int(m.priority))), None)
                for queue, m in zip(queues, messages, strict=True)
            ]
        )
        error = job.error
        if error is None:
            return
        if isinstance(error, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the broker closed during the dispatch")
        if isinstance(error, PayloadTooLarge):
            raise error
        if isinstance(error, BrokerUnavailable):
            # Said in full already (a queue of the other type).
            raise BrokerUnavailable(str(error)) from error
        reason = scrub(str(error), self.options.client_url)
        if isinstance(error, TimeoutError):
            raise BrokerUnavailable(f"RabbitMQ did not answer in time: {reason}") from error
        raise BrokerUnavailable(f"RabbitMQ: {type(error).__name__}: {reason}") from error

    # -- consumers ---------------------------------------------------------------------

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[AmqpConsumer]:
        """Consume ``queue`` on a channel of its own, with at most
        ``prefetch`` (capped by the URL's ``prefetch=``) messages unacked.

        Raises:
          BrokerUnavailable: The queue could not be declared or consumed.
          UsageError: ``queue`` is not a usable queue name.
        """
        queue = amqp_queue(queue)
        limit = max(1, int(prefetch))
        if self.options.prefetch is not None:
            limit = min(limit, self.options.prefetch)
        async with open_amqp_consumer(
            self._run, self.bridge, self._outgoing, self._requeues, queue, limit
        ) as consumer:
            self._consumers.append(consumer)
            try:
                yield consumer
            finally:
                self._consumers.remove(consumer)

    # -- descriptors ---------------------------------------------------------------------

    async def _publish_announcement(self, message: dict[str, Any], ttl: float | None) -> None:
        """Publish to the workers exchange (on the loop)."""
        assert self._publisher is not None
        body = json.dumps({**message, "origin": self._origin}).encode()
        await self._publish_raw(body, ttl)

    async def _publish_raw(self, body: bytes, ttl: float | None) -> None:
        assert self._publisher is not None
        channel = await self._publisher.get_underlay_channel()
        await channel.basic_publish(
            body,
            exchange=WORKERS_EXCHANGE,
            properties=spec.Basic.Properties(
                delivery_mode=TRANSIENT,
                expiration=None if ttl is None else str(max(1, math.ceil(ttl * 1000))),
            ),
        )

    async def _on_announcement(self, message: AbstractIncomingMessage) -> None:
        # On the loop.
        try:
            data = json.loads(message.body)
            kind, origin = data["kind"], data["origin"]
        except (ValueError, KeyError, TypeError):
            logger.warning("ignoring a malformed worker announcement: %r", message.body[:200])
            return
        if origin == self._origin:
            return  # applied when it was sent
        if kind == "sync":
            now = self.bridge.now()
            with self._own_lock:
                own = [(body, expires - now) for body, expires in self._own.values()]
            for body, left in own:
                if left > 0:
                    data = json.loads(body)
                    data["ttl"] = left
                    try:
                        await self._publish_raw(json.dumps(data).encode(), left)
                    except CLIENT_ERRORS as exc:
                        logger.debug("could not announce again: %s", exc)
            return
        # Stamped on arrival, on Trio's clock: the view may be read much
        # later, and a worker's time to live runs from now.
        self._view_inbox.put((data, self.bridge.now()))

    def _refresh_view(self) -> None:
        """Apply the announcements received since the last look, and forget
        the expired (on the Trio side)."""
        now = trio.current_time()
        for data, received in self._view_inbox.drain_nowait():
            try:
                if data["kind"] == "announce":
                    descriptor = descriptor_from_json(data["descriptor"])
                    self._view[descriptor.instance_id] = (
                        descriptor,
                        received + float(data["ttl"]),
                    )
                elif data["kind"] == "withdraw":
                    self._view.pop(str(data["instance_id"]), None)
            except Exception as exc:
                logger.warning("ignoring a malformed worker announcement: %s", exc)
        for instance_id, (_, expires) in list(self._view.items()):
            if expires <= now:
                del self._view[instance_id]

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        """Publish a worker's descriptor, forgotten ``ttl`` seconds after its
        last announcement.

        Raises:
          BrokerUnavailable: It could not be published (other brokers do not
            see it; this one does).
        """
        self._refresh_view()
        self._view[descriptor.instance_id] = (descriptor, trio.current_time() + ttl)
        body = json.dumps(
            {
                "kind": "announce",
                "origin": self._origin,
                "ttl": ttl,
                "descriptor": descriptor_to_json(descriptor),
            }
        ).encode()
        with self._own_lock:
            self._own[descriptor.instance_id] = (body, trio.current_time() + ttl)
        await self._run(lambda: self._publish_raw(body, ttl))

    async def withdraw(self, instance_id: str) -> None:
        """Forget a worker's descriptor now, here and on every other broker.

        Raises:
          BrokerUnavailable: The others could not be told (they forget it
            when its time to live ends).
        """
        self._view.pop(instance_id, None)
        with self._own_lock:
            self._own.pop(instance_id, None)
        message = {"kind": "withdraw", "instance_id": instance_id}
        await self._run(lambda: self._publish_announcement(message, ttl=None))

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        """The descriptors of live workers (consuming ``group``, if given),
        ordered by instance id."""
        self._refresh_view()
        await trio.lowlevel.checkpoint()
        return [
            descriptor
            for _, (descriptor, _) in sorted(self._view.items())
            if group is None or group in descriptor.groups
        ]

    async def worker_groups(self) -> list[str]:
        """The group routes live workers consume, sorted."""
        descriptors = await self.worker_descriptors()
        return sorted({group for d in descriptors for group in d.groups})

    async def ping(self) -> None:
        """One round trip to RabbitMQ: the workers exchange declared again
        (with the arguments it was made with, so the server only says it is
        there, or makes it again on a node that lost it) on the publishing
        channel, answered within ``connect_timeout`` seconds.

        Raises:
          BrokerUnavailable: The connection is down (it is being opened
            again every ``reconnect_interval`` seconds), or the server did
            not answer in time.
        """
        connection = self._connection
        if connection is None or not connection.connected.is_set():
            # A declare now would wait for the connection to come back: the
            # answer is that the server is away.
            raise BrokerUnavailable("RabbitMQ: not connected; reconnecting")

        async def round_trip() -> None:
            assert self._publisher is not None
            async with asyncio.timeout(self.options.connect_timeout):
                channel = await self._publisher.get_underlay_channel()
                await channel.exchange_declare(
                    WORKERS_EXCHANGE, exchange_type="fanout", durable=True
                )

        await self._run(round_trip)

    async def backlog(self, queue: str) -> int | None:
        """How many of ``queue``'s messages wait to be delivered (see
        `trio_durable.brokers.SupportsBacklog`): the message count of a
        passive declare (messages ready; those delivered and not acked are
        not counted), on a channel of its own, since RabbitMQ closes the
        channel of a passive declare of a queue that does not exist (0:
        nothing was dispatched to it), within ``connect_timeout`` seconds.

        Raises:
          BrokerUnavailable: The connection is down, or the server did not
            answer in time.
        """
        queue = amqp_queue(queue)
        connection = self._connection
        if connection is None or not connection.connected.is_set():
            raise BrokerUnavailable("RabbitMQ: not connected; reconnecting")

        async def count() -> int | None:
            async with asyncio.timeout(self.options.connect_timeout):
                channel = await connection.channel(publisher_confirms=False)
                try:
                    declared = await channel.declare_queue(queue, passive=True)
                except aiormq.exceptions.ChannelNotFoundEntity:
                    return 0
                finally:
                    if not channel.is_closed:
                        await channel.close()
                result = declared.declaration_result
                return int(result.message_count or 0)

        return await self._run(count)

    def quiet(self, queues: Sequence[str]) -> None:
        """None: its queues live on the server, and only a query to it
        (a passive declare) would tell how many messages one holds, so
        `Engine.drain` relies on the engine's own count of what it sent."""
        return None


@asynccontextmanager
async def open_amqp_broker(url: str) -> AsyncIterator[AmqpBroker]:
    """Open a RabbitMQ broker for the duration of the block.

    Args:
      url: ``amqp://user:password@host:port/vhost`` or ``amqps://...``, with
        options in the query string (see ``docs/rabbitmq.md``): ``bridge=``
        (``thread`` or ``trio-asyncio``), ``prefetch=`` (a cap per consumer),
        ``publish_timeout=``, ``reconnect_interval=``, ``connect_timeout=``
        (seconds), ``max_payload=`` (bytes, the server's
        ``max_message_size``), and aio-pika's ``heartbeat=``, ``name=`` and
        TLS options.

    Raises:
      InvalidURLError: The URL is malformed or has an unknown option.
      BrokerUnavailable: RabbitMQ could not be reached.
    """
    options = parse_amqp_url(url)
    async with open_bridge(options.bridge) as bridge:
        broker = AmqpBroker(bridge, options)
        try:
            await broker._connect()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(broker._outbox.run)
                yield broker
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(deadline=trio.current_time() + CLOSE_TIMEOUT, shield=True):
                try:
                    await broker.aclose()
                except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                    logger.debug("closing the RabbitMQ connection: %s", exc)
