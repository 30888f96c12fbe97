"""The consuming half of the RabbitMQ broker: a channel per consumer, with
``basic.qos(prefetch)`` and acks by hand, in batches.

`AmqpConsumer` (Trio side) takes deliveries from an `Inbox` in batches and
acks or rejects a batch in one crossing. `Acks` (asyncio side) acks a batch
with as few frames as is correct: one ``basic.ack`` with ``multiple`` set
for the longest run of the channel's delivery tags that the batch settles
together with what was settled before, one frame per tag for the rest.
`Requeues` counts redeliveries of classic queues: a message that comes
back redelivered is published again with its count one higher, then acked.
Quorum queues count deliveries themselves (``x-delivery-count``): their
redeliveries are handed on as they come, and a requeue is a plain
``basic.reject`` with requeue set.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, Final, Protocol, TypeVar, final

import trio
from aio_pika.abc import AbstractIncomingMessage, AbstractRobustChannel

from trio_durable.brokers import Bridge, BrokerUnavailable, Delivery, Inbox, PayloadTooLarge

from ._amqp_publish import Publisher
from ._amqp_topology import (
    CLIENT_ERRORS,
    CLOSE_TIMEOUT,
    deliveries,
    is_stale,
)

logger = logging.getLogger("trio_durable")

T = TypeVar("T")

MAX_SETTLED: Final = 100_000
"""Tags settled past a gap (a message held unacked for long) that `Acks`
remembers; past that, it acks one frame per tag until the channel changes."""


class Run(Protocol):
    """`AmqpBroker`'s crossing: runs ``fn`` on the loop, the client's errors
    translated into `BrokerUnavailable`."""

    def __call__(self, fn: Callable[[], Awaitable[T]]) -> Awaitable[T]: ...


# -- The asyncio side -----------------------------------------------------------------------


@final
class Acks:
    """Acks and rejects of one consumer's deliveries, on the asyncio loop.

    Delivery tags count up from 1 on each channel, one per delivery, and a
    ``basic.ack`` with ``multiple`` acks every unacked tag up to its own. So
    it is correct exactly for a tag ``t`` such that every tag up to ``t`` is
    either in the batch or was settled already (acked, rejected or nacked);
    a tag the adapter has not seen settled (a delivery still on its way to
    the Trio side, one being requeued, one held by a long step) is a gap
    that stops the run. The state belongs to the consumer's current
    channel; a new channel (after a reconnection) starts it afresh.

    Attributes:
      frames: Ack and reject frames sent.
      settled_messages: Messages those frames settled.
    """

    def __init__(self) -> None:
        self._channel: object = None
        self._floor = 0  # every tag up to it is settled
        self._settled: set[int] = set()  # settled tags above the floor
        self._exact = False  # MAX_SETTLED was reached: no multiple acks
        self.frames = 0
        self.settled_messages = 0

    def _follow(self, channel: object) -> None:
        if channel is not self._channel:
            self._channel = channel
            self._floor = 0
            self._settled = set()
            self._exact = False

    def _is_settled(self, tag: int) -> bool:
        return tag <= self._floor or tag in self._settled

    def mark(self, message: AbstractIncomingMessage) -> None:
        """``message`` was settled by a frame of its own (a requeue's ack or
        nack, a dead-letter reject)."""
        tag = message.delivery_tag
        if tag is None or is_stale(message):
            return
        self._follow(message.channel)
        self._settled.add(tag)
        self._advance()

    def _advance(self) -> None:
        while self._floor + 1 in self._settled:
            self._floor += 1
            self._settled.discard(self._floor)
        if len(self._settled) > MAX_SETTLED:
            self._exact = True
            self._settled.clear()

    async def settle(self, messages: Sequence[AbstractIncomingMessage], how: str) -> None:
        """Ack ``messages`` (``how`` is ``ack``), reject them without requeue
        (``reject``) or with it (``requeue``), skipping stale ones and tags
        already settled. Only the last frame waits until it is written:
        frames of a channel are written in order."""
        live = [m for m in messages if not is_stale(m)]
        if not live:
            return
        by_channel: dict[Any, list[int]] = {}
        for message in live:
            tag = message.delivery_tag
            assert tag is not None
            by_channel.setdefault(message.channel, []).append(tag)
        for channel, tags in by_channel.items():
            # A stale channel's deliveries were filtered out above, so this
            # is the consumer's one live channel.
            self._follow(channel)
            batch = sorted({t for t in tags if not self._is_settled(t)})
            if not batch:
                continue
            multiple_to = 0
            if how == "ack" and not self._exact:
                members = set(batch)
                tag = self._floor + 1
                while tag <= batch[-1] and (tag in members or tag in self._settled):
                    if tag in members:
                        multiple_to = tag
                    tag += 1
            singles = [t for t in batch if t > multiple_to]
            covered = len(batch) - len(singles)
            if covered > 1:
                await channel.basic_ack(multiple_to, multiple=True, wait=not singles)
                self.frames += 1
            else:
                singles = batch
            for index, tag in enumerate(singles):
                wait = index == len(singles) - 1
                if how == "ack":
                    await channel.basic_ack(tag, wait=wait)
                else:
                    await channel.basic_reject(tag, requeue=how == "requeue", wait=wait)
                self.frames += 1
            self.settled_messages += len(batch)
            if not self._exact:
                self._settled.update(batch)
            self._advance()


@final
class Requeues:
    """Redeliveries counted by publishing again (on the asyncio loop): a
    copy with ``x-td-deliveries`` one higher goes to the queue's tail, then
    the original is acked."""

    def __init__(self, publisher: Publisher) -> None:
        self._publisher = publisher
        self._requeueing: dict[str, set[asyncio.Task[Any]]] = {}

    async def deliver_again(self, queue: str, message: AbstractIncomingMessage, acks: Acks) -> None:
        """Publish a copy of ``message`` counting one more delivery, then ack
        it. If that fails, the message stays unacked and comes back when its
        channel closes, or at once when it can be nacked."""
        if is_stale(message):
            return
        # Until the original's ack is written, no new delivery of this queue
        # is handed on: the copy may arrive first, and a step that kills its
        # process at once would take the unsent ack along, leaving two copies.
        task = asyncio.current_task()
        assert task is not None
        requeueing = self._requeueing.setdefault(queue, set())
        requeueing.add(task)
        try:
            await self._publish_copy(queue, message, acks)
        finally:
            requeueing.discard(task)
            if not requeueing:
                del self._requeueing[queue]

    async def wait(self, queue: str) -> None:
        """Wait until the copies being made for ``queue`` are made and their
        originals acked."""
        requeueing = self._requeueing.get(queue)
        if requeueing:
            await asyncio.wait(set(requeueing))

    async def _publish_copy(self, queue: str, message: AbstractIncomingMessage, acks: Acks) -> None:
        [failure] = await self._publisher.publish(
            [(queue, message.body, message.priority or 0, deliveries(message) + 1)]
        )
        if failure is None:
            with suppress(*CLIENT_ERRORS):
                await message.ack()
                acks.mark(message)
            return
        if isinstance(failure, PayloadTooLarge):
            # The server's limit fell below a message it once took: no copy
            # can be made, so dead-letter it rather than nack it forever.
            logger.error(
                "dead-lettering a message of %r that cannot be requeued: %s", queue, failure
            )
            if not is_stale(message):
                with suppress(*CLIENT_ERRORS):
                    await message.reject(requeue=False)
                    acks.mark(message)
            return
        logger.warning("could not requeue a message of %r: %s", queue, failure)
        # A pause, so a server that keeps refusing the copy is not asked
        # again in a tight loop by the nack's redelivery.
        await asyncio.sleep(1.0)
        if not is_stale(message):
            with suppress(*CLIENT_ERRORS):
                await message.nack(requeue=True)
                acks.mark(message)


# -- The Trio side ---------------------------------------------------------------------------


@final
class AmqpConsumer:
    """A consumer of one RabbitMQ queue; made by `AmqpBroker.open_consumer`."""

    def __init__(
        self,
        run: Run,
        requeues: Requeues,
        queue: str,
        inbox: Inbox[AbstractIncomingMessage],
        acks: Acks,
        counted_by_server: bool = False,
    ) -> None:
        self._run = run
        self._counted_by_server = counted_by_server
        self._requeues = requeues
        self._queue = queue
        self._inbox = inbox
        self.acks = acks
        """Its ack state and counts (read for `AmqpBroker.statistics`)."""

    async def receive(self, max_items: int) -> list[Delivery]:
        """Wait for at least one message and return up to ``max_items``.

        Raises:
          trio.ClosedResourceError: The consumer is closed.
        """
        while True:
            batch = await self._inbox.get_batch(max(1, max_items))
            # Deliveries of a channel that closed (the connection dropped)
            # are back on the queue; whoever consumes next gets them.
            fresh = [m for m in batch if not is_stale(m)]
            if fresh:
                return [Delivery(body=m.body, deliveries=deliveries(m), tag=m) for m in fresh]

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge messages: they are never delivered again.

        Raises:
          BrokerUnavailable: The acks could not be sent (the messages come back).
        """
        messages = [d.tag for d in deliveries]
        if messages:
            await self._run(lambda: self.acks.settle(messages, "ack"))

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        """Give messages back: delivered again (counted up) if ``requeue``,
        else dead-lettered to ``<queue>.dead``.

        Raises:
          BrokerUnavailable: The server could not be told (the messages come back).
        """
        messages = [d.tag for d in deliveries]
        if not messages:
            return
        if requeue and self._counted_by_server:
            # A quorum queue counts the return itself.
            await self._run(lambda: self.acks.settle(messages, "requeue"))
        elif requeue:
            requeues, queue, acks = self._requeues, self._queue, self.acks

            async def again() -> None:
                await asyncio.gather(*(requeues.deliver_again(queue, m, acks) for m in messages))

            await self._run(again)
        else:
            await self._run(lambda: self.acks.settle(messages, "reject"))


@asynccontextmanager
async def open_amqp_consumer(
    run: Run,
    bridge: Bridge,
    publisher: Publisher,
    requeues: Requeues,
    queue: str,
    prefetch: int,
) -> AsyncIterator[AmqpConsumer]:
    """What `AmqpBroker.open_consumer` yields: ``queue`` consumed on a
    channel of its own with ``basic.qos(prefetch)``, closed on exit (which
    gives back what it holds unacked)."""
    inbox: Inbox[AbstractIncomingMessage] = bridge.inbox()
    acks = Acks()

    counted_by_server = publisher.queue_type == "quorum"

    async def on_message(message: AbstractIncomingMessage) -> None:
        if message.redelivered and not counted_by_server:
            # Counted and sent back to the queue's tail; the copy is what
            # a consumer receives.
            await requeues.deliver_again(queue, message, acks)
        else:
            await requeues.wait(queue)
            inbox.put(message)

    async def start() -> AbstractRobustChannel:
        assert publisher.connection is not None
        await publisher.declare([queue])
        channel = await publisher.connection.channel(publisher_confirms=False)
        await channel.set_qos(prefetch_count=prefetch)
        # Declared with its arguments (not passively) where it is ours,
        # so that a reconnection to a server that lost it (a node whose
        # data was wiped) makes it again before consuming.
        declared = await channel.declare_queue(
            queue,
            durable=True,
            arguments=publisher.arguments(queue),
            passive=queue in publisher.foreign,
        )
        await declared.consume(on_message, no_ack=False)
        return channel

    channel = await run(start)
    try:
        yield AmqpConsumer(run, requeues, queue, inbox, acks, counted_by_server)
    finally:

        async def stop() -> None:
            inbox.fail(trio.ClosedResourceError("the consumer is closed"))
            # Closing the channel gives back what it holds unacked.
            await channel.close()

        with trio.CancelScope(deadline=trio.current_time() + CLOSE_TIMEOUT, shield=True):
            try:
                await run(stop)
            except (BrokerUnavailable, trio.ClosedResourceError) as exc:
                logger.debug("closing a consumer of %r: %s", queue, exc)
