"""The RabbitMQ broker: aio-pika behind the Trio bridge.

``amqp://user:password@host:5672/vhost?option=value`` (or ``amqps://``)
opens a `AmqpBroker`. Everything that touches aio-pika runs on the bridge's
asyncio loop (`open_bridge`), once per batch: a batch of publishes, a batch
of acks, a batch of deliveries handed to Trio through an `Inbox`.

Topology (see ``docs/rabbitmq.md``):

- every queue name the engine uses (a task queue per route, a results queue
  per store) is a durable classic queue of that name with
  ``x-max-priority: 9`` and a dead-letter queue ``<queue>.dead`` (through the
  default exchange), declared on first use by a dispatch or a consumer;
- messages are persistent and published with publisher confirms; a consumer
  has a channel of its own with ``basic.qos(prefetch)`` and acks by hand;
- classic queues only say whether a message was delivered before
  (``redelivered``), so the adapter counts deliveries itself: a message that
  comes back redelivered is published again with its count, in the header
  ``x-td-deliveries``, one higher, and the returned copy is acked only once
  that publish is confirmed. A consumer sees each delivery counted from 1;
- workers announce their descriptors on the fanout exchange
  ``trio_durable.workers``; each open broker keeps a view of them from an
  exclusive queue bound to it, with each entry's time to live, and asks the
  others to announce again when it connects.

The connection is aio-pika's robust connection: when it drops, it is opened
again every ``reconnect_interval`` seconds, consumers resume, and what was
received and not acked is delivered again (acks of such stale deliveries are
skipped: the server gave them back when the old channel closed). A dispatch
made while the connection is down waits for it up to ``publish_timeout``
seconds, then raises `BrokerUnavailable`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import re
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, TypeVar, final

import aio_pika
import aiormq
import trio
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel, AbstractRobustConnection
from pamqp import commands as spec

from trio_durable.brokers import (
    Bridge,
    BrokerUnavailable,
    Delivery,
    Inbox,
    Outgoing,
    OwnedTasks,
    PayloadTooLarge,
    UsageError,
    WorkerDescriptor,
    check_payload_sizes,
    descriptor_from_json,
    descriptor_to_json,
    open_bridge,
    scrub,
)

from ._amqp_url import AmqpOptions, parse_amqp_url

logger = logging.getLogger("trio_durable")

T = TypeVar("T")

MAX_PRIORITY: Final = 9
DELIVERIES_HEADER: Final = "x-td-deliveries"
"""Counts the deliveries of a message published again after a redelivery."""
DEAD_LETTER_SUFFIX: Final = ".dead"
WORKERS_EXCHANGE: Final = "trio_durable.workers"
"""The fanout exchange that carries worker announcements."""
CLOSE_TIMEOUT: Final = 5.0
"""Seconds a close may take before it is abandoned (shielded from cancellation)."""
MAX_QUEUE_NAME: Final = 255 - len(DEAD_LETTER_SUFFIX)
_PERSISTENT: Final = 2
_TRANSIENT: Final = 1

# What the client library raises when the server or the connection fails.
# aiormq's ChannelInvalidStateError (a channel or connection that closed)
# and aio-pika's "connection closed" / "no active transport" are plain
# RuntimeErrors.
_CLIENT_ERRORS: Final = (
    aiormq.exceptions.AMQPError,
    aio_pika.exceptions.AMQPException,
    OSError,
    RuntimeError,
)


def queue_arguments(queue: str) -> dict[str, Any]:
    """The arguments every queue of this adapter is declared with."""
    return {
        "x-max-priority": MAX_PRIORITY,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": queue + DEAD_LETTER_SUFFIX,
    }


def _check_queue_name(queue: str) -> None:
    if (
        not isinstance(queue, str)
        or not queue
        or len(queue.encode()) > MAX_QUEUE_NAME
        or queue.startswith("amq.")
    ):
        raise UsageError(
            f"{queue!r} is not a usable RabbitMQ queue name (1 to {MAX_QUEUE_NAME} bytes,"
            " not starting with 'amq.')"
        )


_REFUSED_SIZE: Final = re.compile(r"message size (\d+) is larger than configured max size (\d+)")


def _refused_size(outcome: object, size: int) -> int | None:
    """The server's ``max_message_size`` if ``outcome`` (a publish's) is its
    refusal of a body of ``size`` bytes, else None."""
    if not isinstance(outcome, aiormq.exceptions.ChannelPreconditionFailed):
        return None
    match = _REFUSED_SIZE.search(str(outcome))
    if match is None or int(match[1]) != size:
        return None
    return int(match[2])


def _deliveries(message: AbstractIncomingMessage) -> int:
    count = (message.headers or {}).get(DELIVERIES_HEADER, 1)
    return count if isinstance(count, int) and count >= 1 else 1


def _is_stale(message: AbstractIncomingMessage) -> bool:
    """Whether the channel that delivered ``message`` has closed: the server
    gave it back to the queue then, and acking it is neither possible nor
    needed."""
    try:
        return bool(message.channel.is_closed)
    except RuntimeError:  # aiormq's ChannelInvalidStateError
        return True


@final
class AmqpConsumer:
    """A consumer of one RabbitMQ queue; made by `AmqpBroker.open_consumer`."""

    def __init__(self, broker: AmqpBroker, queue: str, inbox: Inbox[AbstractIncomingMessage]):
        self._broker = broker
        self._queue = queue
        self._inbox = inbox

    async def receive(self, max_items: int) -> list[Delivery]:
        """Wait for at least one message and return up to ``max_items``.

        Raises:
          trio.ClosedResourceError: The consumer is closed.
        """
        while True:
            batch = await self._inbox.get_batch(max(1, max_items))
            # Deliveries of a channel that closed (the connection dropped)
            # are back on the queue; whoever consumes next gets them.
            fresh = [m for m in batch if not _is_stale(m)]
            if fresh:
                return [Delivery(body=m.body, deliveries=_deliveries(m), tag=m) for m in fresh]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge messages: they are never delivered again.

        Raises:
          BrokerUnavailable: The acks could not be sent (the messages come back).
        """
        messages = [d.tag for d in deliveries]
        if messages:
            await self._broker._run(lambda: _settle(messages, "ack"))

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give messages back: delivered again (counted up) if ``requeue``,
        else dead-lettered to ``<queue>.dead``.

        Raises:
          BrokerUnavailable: The server could not be told (the messages come back).
        """
        messages = [d.tag for d in deliveries]
        if not messages:
            return
        if requeue:
            broker = self._broker
            await broker._run(
                lambda: _gather(broker._deliver_again(self._queue, m) for m in messages)
            )
        else:
            await self._broker._run(lambda: _settle(messages, "reject"))


async def _gather(coroutines: Iterable[Awaitable[Any]]) -> None:
    await asyncio.gather(*coroutines)


async def _settle(messages: Sequence[AbstractIncomingMessage], how: str) -> None:
    """Ack (or reject without requeue) messages, skipping stale ones (on the
    loop). Only the last frame of each channel waits until it is written:
    frames of a channel are written in order, so the others are written too."""
    live = [m for m in messages if not _is_stale(m)]
    last = {m.channel: m for m in live}
    for message in live:
        channel = message.channel
        tag = message.delivery_tag
        assert tag is not None
        wait = last[channel] is message
        if how == "ack":
            await channel.basic_ack(tag, wait=wait)
        else:
            await channel.basic_reject(tag, requeue=False, wait=wait)


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
        self._connection: AbstractRobustConnection | None = None
        self._publisher: AbstractRobustChannel | None = None
        # Only touched on the asyncio loop:
        self._declared: set[str] = set()
        self._foreign: set[str] = set()  # queues made by others, with other arguments
        self._requeueing: dict[str, set[asyncio.Task[Any]]] = {}
        # The tasks this broker starts on the loop itself (not those the
        # client library runs its callbacks in); closed with the broker.
        self._tasks = OwnedTasks()
        self._message_ids = itertools.count()
        self._closed = False
        # Worker descriptors: the view from announcements (Trio side), and
        # what this broker announced itself (read on the asyncio side to
        # answer another broker's request to announce again).
        self._view: dict[str, tuple[WorkerDescriptor, float]] = {}
        self._view_inbox: Inbox[tuple[dict[str, Any], float]] = bridge.inbox()
        self._own_lock = threading.Lock()
        self._own: dict[str, tuple[bytes, float]] = {}

    @property
    def max_payload(self) -> int:
        """The largest message body a dispatch sends (the URL's
        ``max_payload=``, by default RabbitMQ's default ``max_message_size``)."""
        return self.options.max_payload

    # -- the bridge ------------------------------------------------------------------

    async def _run(self, fn: Callable[[], Awaitable[T]]) -> T:
        if self._closed:
            raise trio.ClosedResourceError("the broker is closed")
        try:
            return await self.bridge.run(fn)
        except _CLIENT_ERRORS as exc:
            reason = scrub(str(exc), self.options.client_url)
            raise BrokerUnavailable(f"RabbitMQ: {type(exc).__name__}: {reason}") from exc
        except TimeoutError as exc:
            reason = scrub(str(exc), self.options.client_url)
            raise BrokerUnavailable(f"RabbitMQ did not answer in time: {reason}") from exc

    # -- connecting ------------------------------------------------------------------

    async def _connect(self) -> None:
        options = self.options

        async def connect() -> None:
            connection = await asyncio.wait_for(
                aio_pika.connect_robust(
                    options.client_url,
                    reconnect_interval=options.reconnect_interval,
                    fail_fast=True,
                    # Bounds every reconnection too: without it, one whose
                    # handshake a restarting server never answers waits
                    # forever, and no further attempt is made.
                    timeout=options.connect_timeout,
                ),
                options.connect_timeout,
            )
            self._connection = connection
            self._publisher = await connection.channel(publisher_confirms=True)
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
        self._declared.clear()
        # Closing, when nobody needs the announcements any more.
        with suppress(trio.ClosedResourceError):
            self._tasks.start(self._ask_to_announce(), name="trio_durable amqp announce sync")

    async def _ask_to_announce(self) -> None:
        """Ask the other brokers to announce their workers again (on the loop)."""
        try:
            await self._publish_announcement({"kind": "sync"}, ttl=None)
        except _CLIENT_ERRORS as exc:
            # Their heartbeats announce them again within a ttl anyway.
            logger.debug("could not ask the other brokers to announce: %s", exc)

    # -- queues ------------------------------------------------------------------------

    async def _declare(self, queues: Iterable[str]) -> None:
        """Declare queues not yet declared by this broker (on the loop).

        On a channel of its own, opened for the occasion (declarations are
        rare: once per queue and connection): a queue that exists with other
        arguments makes the server close the channel it was declared on,
        which must not be the publisher's, with confirms in flight.
        """
        missing = [q for q in dict.fromkeys(queues) if q not in self._declared]
        if not missing:
            return
        assert self._connection is not None
        channel = await self._connection.channel(publisher_confirms=False)
        try:
            for queue in missing:
                try:
                    await channel.declare_queue(queue + DEAD_LETTER_SUFFIX, durable=True)
                    await channel.declare_queue(
                        queue, durable=True, arguments=queue_arguments(queue)
                    )
                except aiormq.exceptions.ChannelPreconditionFailed:
                    # It exists with other arguments (made by someone else):
                    # use it as it is, once a fresh channel saw it exists.
                    logger.warning(
                        "RabbitMQ queue %r exists with other arguments than %r; using it as is",
                        queue,
                        queue_arguments(queue),
                    )
                    await channel.close()
                    channel = await self._connection.channel(publisher_confirms=False)
                    await channel.declare_queue(queue, passive=True)
                    self._foreign.add(queue)
                self._declared.add(queue)
        finally:
            await channel.close()

    # -- dispatch ------------------------------------------------------------------------

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        """Put messages on their queues, persistent and confirmed.

        Waits up to ``publish_timeout`` for a dropped connection to return.

        Raises:
          PayloadTooLarge: A body is over `max_payload`; nothing was sent.
          BrokerUnavailable: They could not all be confirmed; some may have been.
        """
        if not messages:
            await trio.lowlevel.checkpoint()
            return
        for message in messages:
            _check_queue_name(message.queue)
        # Checked here, not left to the server: it would close the publishing
        # channel, failing the other confirms in flight on it.
        check_payload_sizes(messages, self.options.max_payload)
        batch = [
            (m.queue, m.body, max(0, min(MAX_PRIORITY, int(m.priority))), None) for m in messages
        ]
        await self._run(lambda: self._publish_all(batch))

    async def _publish_all(self, batch: Sequence[tuple[str, bytes, int, int | None]]) -> None:
        """Publish ``(queue, body, priority, deliveries)`` messages and wait
        for every confirm, retrying those not confirmed while the connection
        comes back (on the loop)."""
        assert self._publisher is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.options.publish_timeout
        pending = list(batch)
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._declare(q for q, _, _, _ in pending)
                    channel = await self._publisher.get_underlay_channel()
                    results = await asyncio.gather(
                        *(
                            channel.basic_publish(
                                body,
                                routing_key=queue,
                                mandatory=True,
                                properties=spec.Basic.Properties(
                                    delivery_mode=_PERSISTENT,
                                    priority=priority,
                                    # aiormq matches a returned (unroutable)
                                    # message to its confirm by message id.
                                    message_id=f"{self._origin}.{next(self._message_ids)}",
                                    headers=None
                                    if deliveries is None
                                    else {DELIVERIES_HEADER: deliveries},
                                ),
                            )
                            for queue, body, priority, deliveries in pending
                        ),
                        return_exceptions=True,
                    )
            except TimeoutError:
                raise
            except _CLIENT_ERRORS as exc:
                if loop.time() >= deadline:
                    raise
                logger.debug("publish failed (%s); waiting for the connection", exc)
                await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
                continue
            failed = [
                (item, result)
                for item, result in zip(pending, results, strict=True)
                if not isinstance(result, spec.Basic.Ack)
            ]
            if not failed:
                return
            for (queue, body, _, _), result in failed:
                limit = _refused_size(result, len(body))
                if limit is not None:
                    # Over the server's max_message_size, which max_payload=
                    # overstated: the channel closed, so others may be lost.
                    raise PayloadTooLarge(queue, len(body), limit)
            for (queue, _, _, _), _ in failed:
                # Returned unroutable (its queue is gone), nacked, or lost
                # with the channel: declare its queue again to be sure.
                self._declared.discard(queue)
            if loop.time() >= deadline:
                error = failed[0][1]
                if isinstance(error, BaseException):
                    raise error
                raise aiormq.exceptions.DeliveryError(None, None)  # type: ignore[arg-type]
            pending = [item for item, _ in failed]
            await asyncio.sleep(0.05)

    async def _deliver_again(self, queue: str, message: AbstractIncomingMessage) -> None:
        """Publish a copy of ``message`` counting one more delivery, then ack
        it (on the loop). If that fails, the message stays unacked and comes
        back when its channel closes, or at once when it can be nacked."""
        if _is_stale(message):
            return
        # Until the original's ack is written, no new delivery of this queue
        # is handed on: the copy may arrive first, and a step that kills its
        # process at once would take the unsent ack along, leaving two copies.
        task = asyncio.current_task()
        assert task is not None
        requeueing = self._requeueing.setdefault(queue, set())
        requeueing.add(task)
        try:
            await self._publish_copy(queue, message)
        finally:
            requeueing.discard(task)
            if not requeueing:
                del self._requeueing[queue]

    async def _wait_for_requeues(self, queue: str) -> None:
        """Wait until the copies being made for ``queue`` are made and their
        originals acked (on the loop)."""
        requeueing = self._requeueing.get(queue)
        if requeueing:
            await asyncio.wait(set(requeueing))

    async def _publish_copy(self, queue: str, message: AbstractIncomingMessage) -> None:
        try:
            await self._publish_all(
                [(queue, message.body, message.priority or 0, _deliveries(message) + 1)]
            )
            await message.ack()
        except PayloadTooLarge as exc:
            # The server's limit fell below a message it once took: no copy
            # can be made, so dead-letter it rather than nack it forever.
            logger.error("dead-lettering a message of %r that cannot be requeued: %s", queue, exc)
            if not _is_stale(message):
                with suppress(*_CLIENT_ERRORS):
                    await message.reject(requeue=False)
        except (*_CLIENT_ERRORS, TimeoutError) as exc:
            logger.warning("could not requeue a message of %r: %s", queue, exc)
            # A pause, so a server that keeps refusing the copy is not asked
            # again in a tight loop by the nack's redelivery.
            await asyncio.sleep(1.0)
            if not _is_stale(message):
                with suppress(*_CLIENT_ERRORS):
                    await message.nack(requeue=True)

    # -- consumers ---------------------------------------------------------------------

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[AmqpConsumer]:
        """Consume ``queue`` on a channel of its own, with at most
        ``prefetch`` (capped by the URL's ``prefetch=``) messages unacked.

        Raises:
          BrokerUnavailable: The queue could not be declared or consumed.
          UsageError: ``queue`` is not a usable queue name.
        """
        _check_queue_name(queue)
        limit = max(1, int(prefetch))
        if self.options.prefetch is not None:
            limit = min(limit, self.options.prefetch)
        inbox: Inbox[AbstractIncomingMessage] = self.bridge.inbox()

        async def on_message(message: AbstractIncomingMessage) -> None:
            if message.redelivered:
                # Counted and sent back to the queue's tail; the copy is what
                # a consumer receives.
                await self._deliver_again(queue, message)
            else:
                await self._wait_for_requeues(queue)
                inbox.put(message)

        async def start() -> AbstractRobustChannel:
            assert self._connection is not None
            await self._declare([queue])
            channel = await self._connection.channel(publisher_confirms=False)
            await channel.set_qos(prefetch_count=limit)
            # Declared with its arguments (not passively) where it is ours,
            # so that a reconnection to a server that lost it (a node whose
            # data was wiped) makes it again before consuming.
            declared = await channel.declare_queue(
                queue,
                durable=True,
                arguments=queue_arguments(queue),
                passive=queue in self._foreign,
            )
            await declared.consume(on_message, no_ack=False)
            return channel

        channel = await self._run(start)
        try:
            yield AmqpConsumer(self, queue, inbox)
        finally:

            async def stop() -> None:
                inbox.fail(trio.ClosedResourceError("the consumer is closed"))
                # Closing the channel gives back what it holds unacked.
                await channel.close()

            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                try:
                    await self._run(stop)
                except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                    logger.debug("closing a consumer of %r: %s", queue, exc)

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
                delivery_mode=_TRANSIENT,
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
                    except _CLIENT_ERRORS as exc:
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
            yield broker
        finally:
            with trio.move_on_after(CLOSE_TIMEOUT, shield=True):
                try:
                    await broker.aclose()
                except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                    logger.debug("closing the RabbitMQ connection: %s", exc)
