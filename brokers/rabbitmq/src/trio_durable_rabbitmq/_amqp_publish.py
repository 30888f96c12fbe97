"""The publishing half of the RabbitMQ broker: persistent, confirmed
publishes in batches.

`Publisher` (on the asyncio loop) declares queues on first use and
publishes a batch on the confirm-mode channel, every frame queued at once
and every confirm awaited together, retrying what was not confirmed while a
dropped connection comes back. `Outbox` (on the Trio side) gathers what
concurrent `AmqpBroker.dispatch` calls queued and publishes it in one
crossing of the bridge per batch.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import Final, final

import aiormq
import attrs
import trio
from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection
from pamqp import commands as spec

from trio_durable.brokers import Bridge, PayloadTooLarge

from ._amqp_topology import (
    CLIENT_ERRORS,
    DEAD_LETTER_SUFFIX,
    DELIVERIES_HEADER,
    PERSISTENT,
    queue_arguments,
    refused_size,
)

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
      batches: Batches published, each awaited together.
      published: Messages those batches carried.
    """

    def __init__(self, origin: str, publish_timeout: float) -> None:
        self._origin = origin
        self._publish_timeout = publish_timeout
        self._message_ids = itertools.count()
        self.connection: AbstractRobustConnection | None = None
        self.channel: AbstractRobustChannel | None = None
        self.declared: set[str] = set()
        self.foreign: set[str] = set()
        self.batches = 0
        self.published = 0

    async def declare(self, queues: Iterable[str]) -> None:
        """Declare queues not yet declared by this broker.

        On a channel of its own, opened for the occasion (declarations are
        rare: once per queue and connection): a queue that exists with other
        arguments makes the server close the channel it was declared on,
        which must not be the publisher's, with confirms in flight.
        """
        missing = [q for q in dict.fromkeys(queues) if q not in self.declared]
        if not missing:
            return
        assert self.connection is not None
        channel = await self.connection.channel(publisher_confirms=False)
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
        origin = self._origin
        ids = self._message_ids
        return await asyncio.gather(
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


@attrs.define(eq=False)
class Job:
    """One `AmqpBroker.dispatch` call waiting for the outbox."""

    items: list[Item]
    done: trio.Event = attrs.field(factory=trio.Event)
    error: BaseException | None = None


@final
class Outbox:
    """Publishes what concurrent dispatches queued, in one crossing per
    batch: a thousand runs dispatching one task each cost a few crossings
    and a few confirm waits, not a thousand. `run` is a task of the
    broker's nursery."""

    def __init__(self, bridge: Bridge, publisher: Publisher) -> None:
        self._bridge = bridge
        self._publisher = publisher
        self._jobs: list[Job] = []
        self._ready = trio.Event()

    async def publish(self, items: list[Item]) -> Job:
        """Queue ``items`` and wait until the outbox published them (or
        failed to): the job says how it went."""
        job = Job(items)
        self._jobs.append(job)
        self._ready.set()
        await job.done.wait()
        return job

    async def run(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready = trio.Event()
                jobs, self._jobs = self._jobs, []
                items = [item for job in jobs for item in job.items]
                try:
                    outcomes = await self._bridge.run(
                        functools.partial(self._publisher.publish, items)
                    )
                except CLIENT_ERRORS as exc:
                    outcomes = [exc] * len(items)
                except BaseException:
                    self._jobs = jobs + self._jobs
                    raise
                start = 0
                for job in jobs:
                    failures = [e for e in outcomes[start : start + len(job.items)] if e]
                    start += len(job.items)
                    # A refused size first: it is the caller's to act on.
                    failures.sort(key=lambda e: not isinstance(e, PayloadTooLarge))
                    job.error = failures[0] if failures else None
                    job.done.set()
        finally:
            for job in self._jobs:
                job.error = trio.ClosedResourceError()
                job.done.set()
            self._jobs = []
