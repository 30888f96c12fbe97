"""The publishing half of the RabbitMQ broker: persistent, confirmed
publishes in batches.

`Publisher` (on the asyncio loop) declares queues on first use and
publishes a batch on the confirm-mode channel, every frame queued at once
and every confirm awaited together, retrying what was not confirmed while a
dropped connection comes back. `Publishing` (on the Trio side) is what the
broker's `Outbox` (of `trio_durable.brokers`: what concurrent
`AmqpBroker.dispatch` calls queued, a batch at a time) publishes with: one
crossing of the bridge per batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import Final, final

import aiormq
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from pamqp import commands as spec

from trio_durable.brokers import Bridge, BrokerUnavailable, PayloadTooLarge

from ._amqp_topology import (
    CLIENT_ERRORS,
    DEAD_LETTER_SUFFIX,
    DELIVERIES_HEADER,
    PERSISTENT,
    dead_letter_arguments,
    queue_arguments,
    refused_size,
    type_mismatch,
)
from ._amqp_url import DEFAULT_DELIVERY_LIMIT, QueueType

logger = logging.getLogger("trio_durable")

Item = tuple[str, bytes, int, int | None]
"""What one publish sends: its queue, body, priority and delivery count (or
None for a first delivery)."""

RETRY_PAUSE: Final = 0.05
"""Seconds between attempts to publish again what was not confirmed."""


@final
class Publisher:
    """Declares queues and publishes batches, on the asyncio loop.

    Attributes:
      connection: The robust connection (set once connected).
      channel: The publishing channel, in confirm mode.
      declared: Queues declared on this connection (cleared when it comes
        back: a fresh node may have lost them).
      foreign: Queues that exist with other arguments, made by others.
      queue_type: The type of the queues it declares (``classic`` or ``quorum``).
      delivery_limit: The delivery limit of quorum queues.
      batches: Batches published, each awaited together.
      published: Messages those batches carried.
    """

    def __init__(
        self,
        origin: str,
        publish_timeout: float,
        queue_type: QueueType = "classic",
        delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
    ) -> None:
        self._origin = origin
        self.queue_type: QueueType = queue_type
        self.delivery_limit = delivery_limit
        self._publish_timeout = publish_timeout
        self._message_ids = itertools.count()
        self.connection: AbstractRobustConnection | None = None
        self.channel: AbstractRobustChannel | None = None
        self.declared: set[str] = set()
        self.foreign: set[str] = set()
        self.batches = 0
        self.published = 0

    def arguments(self, queue: str) -> dict[str, object]:
        """The arguments ``queue`` is declared with (`queue_arguments`)."""
        return queue_arguments(queue, self.queue_type, self.delivery_limit)

    async def declare(self, queues: Iterable[str]) -> None:
        """Declare queues not yet declared by this broker.

        On a channel of its own, opened for the occasion (declarations are
        rare: once per queue and connection): a queue that exists with other
        arguments makes the server close the channel it was declared on,
        which must not be the publisher's, with confirms in flight.

        Raises:
          BrokerUnavailable: A queue exists as a queue of the other type
            (classic or quorum), which no declaration can change.
        """
        missing = [q for q in dict.fromkeys(queues) if q not in self.declared]
        if not missing:
            return
        assert self.connection is not None
        channel = await self.connection.channel(publisher_confirms=False)
        try:
            for queue in missing:
                try:
                    await channel.declare_queue(
                        queue + DEAD_LETTER_SUFFIX,
                        durable=True,
                        arguments=dead_letter_arguments(self.queue_type),
                    )
                    await channel.declare_queue(
                        queue, durable=True, arguments=self.arguments(queue)
                    )
                except aiormq.exceptions.ChannelPreconditionFailed as exc:
                    mismatch = type_mismatch(queue, self.queue_type, exc)
                    if mismatch is not None:
                        raise mismatch from exc
                    # It exists with other arguments (made by someone else):
                    # use it as it is, once a fresh channel saw it exists.
                    logger.warning(
                        "RabbitMQ queue %r exists with other arguments than %r; using it as is",
                        queue,
                        self.arguments(queue),
                    )
                    await channel.close()
                    channel = await self.connection.channel(publisher_confirms=False)
                    await channel.declare_queue(queue, passive=True)
                    self.foreign.add(queue)
                self.declared.add(queue)
        finally:
            await channel.close()

    async def publish(self, batch: Sequence[Item]) -> list[BaseException | None]:
        """Publish ``batch`` and wait for every confirm, publishing again
        what was not confirmed while the connection comes back, for up to
        ``publish_timeout`` seconds; each message's failure (None where
        RabbitMQ confirmed it). Never raises for one message: a message whose
        body the server refused fails with `PayloadTooLarge` (the others go
        on), one never confirmed with the last error or `TimeoutError`.

        Every frame of the batch is queued before any is written (``wait=
        False``: a publish does not wait for its frame to reach the socket,
        which would make each one a turn of the loop), then the confirms are
        awaited together.
        """
        self.batches += 1
        self.published += len(batch)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._publish_timeout
        outcomes: list[BaseException | None] = [None] * len(batch)
        pending = list(range(len(batch)))
        while pending:
            try:
                async with asyncio.timeout_at(deadline):
                    results = await self._publish_once([batch[i] for i in pending])
            except BrokerUnavailable as exc:
                # A queue of the other type: publishing again cannot help.
                for index in pending:
                    outcomes[index] = exc
                return outcomes
            except TimeoutError as exc:
                for index in pending:
                    if outcomes[index] is None:
                        outcomes[index] = exc
                return outcomes
            except CLIENT_ERRORS as exc:
                if loop.time() >= deadline:
                    for index in pending:
                        outcomes[index] = exc
                    return outcomes
                logger.debug("publish failed (%s); waiting for the connection", exc)
                await asyncio.sleep(min(0.2, max(0.0, deadline - loop.time())))
                continue
            failed: list[int] = []
            for index, result in zip(pending, results, strict=True):
                if isinstance(result, spec.Basic.Ack):
                    outcomes[index] = None
                    continue
                queue, body, _, _ = batch[index]
                limit = refused_size(result, len(body))
                if limit is not None:
                    # Over the server's max_message_size, which max_payload=
                    # overstated: the channel closed, failing the others'
                    # confirms, which are published again.
                    outcomes[index] = PayloadTooLarge(queue, len(body), limit)
                    continue
                # Returned unroutable (its queue is gone), nacked, or lost
                # with the channel: declare its queue again to be sure.
                self.declared.discard(queue)
                outcomes[index] = (
                    result
                    if isinstance(result, BaseException)
                    else aiormq.exceptions.DeliveryError(None, None)  # type: ignore[arg-type]
                )
                failed.append(index)
            if not failed or loop.time() >= deadline:
                return outcomes
            pending = failed
            await asyncio.sleep(RETRY_PAUSE)
        return outcomes

    async def _publish_once(self, batch: Sequence[Item]) -> list[object]:
        assert self.channel is not None
        await self.declare(queue for queue, _, _, _ in batch)
        channel = await self.channel.get_underlay_channel()
        if channel.is_closed:
            # aio-pika says a connection that came back is ready before it
            # restored its channels, so this may be the old, closed channel:
            # a publish there queues frames for a connection that is gone and
            # waits for confirms that never come (until publish_timeout).
            # Refused here, the batch is published again shortly.
            raise aiormq.exceptions.ChannelInvalidStateError("the publishing channel is closed")
        origin = self._origin
        ids = self._message_ids
        publishes = asyncio.gather(
            *(
                channel.basic_publish(
                    body,
                    routing_key=queue,
                    mandatory=True,
                    # Not in aiormq's abstract signature; its channel has it.
                    wait=False,  # type: ignore[call-arg]
                    properties=spec.Basic.Properties(
                        delivery_mode=PERSISTENT,
                        priority=priority,
                        # aiormq matches a returned (unroutable) message to
                        # its confirm by message id.
                        message_id=f"{origin}.{next(ids)}",
                        headers=None if deliveries is None else {DELIVERIES_HEADER: deliveries},
                    ),
                )
                for queue, body, priority, deliveries in batch
            ),
            return_exceptions=True,
        )
        # Likewise a channel that closes mid-batch (its connection dropped)
        # ends the batch at once, whatever its publishes wait for: what was
        # not confirmed is published again on the restored channel.
        closing = channel.closing
        try:
            await asyncio.wait({publishes, closing}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closing.cancel()
        if not publishes.done():
            publishes.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await publishes
            raise aiormq.exceptions.ChannelInvalidStateError("the publishing channel closed")
        return list(publishes.result())


@final
class Publishing:
    """What the broker's `Outbox` publishes with: a batch through the
    publisher on the client's loop, one crossing of the bridge; the
    client's errors are each message's outcome."""

    def __init__(self, bridge: Bridge, publisher: Publisher) -> None:
        self._bridge = bridge
        self._publisher = publisher

    async def __call__(self, items: list[Item]) -> list[BaseException | None]:
        try:
            return await self._bridge.run(functools.partial(self._publisher.publish, items))
        except CLIENT_ERRORS as exc:
            return [exc] * len(items)
