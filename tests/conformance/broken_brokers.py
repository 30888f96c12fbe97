"""Brokers that break the broker protocol on purpose, one way each, to show
that the broker conformance suites notice.

Each wraps a real `MemoryBroker` (and its consumers) and changes one thing;
everything it does not override goes to the broker it wraps. They live on
Trio's clock, as the memory broker does: the suites run them under the
autojump clock, so waiting out `EVENTUALLY` costs no real time.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from trio_durable.brokers import (
    RESULTS,
    Broker,
    Consumer,
    Delivery,
    MemoryBroker,
    Outgoing,
    WorkerDescriptor,
)
from trio_durable.testing.conformance import BrokerFactory

# -- The faithful wrappers --------------------------------------------------------------


class ConsumerWrapper:
    """A consumer that does what the memory consumer it wraps does, and
    knows what it holds unacked."""

    def __init__(self, broker: BrokerWrapper, inner: Consumer, queue: str) -> None:
        self.broker = broker
        self.inner = inner
        self.queue = queue
        self.held: dict[Any, Delivery] = {}

    async def receive(self, max_items: int) -> list[Delivery]:
        batch = await self.inner.receive(max_items)
        self.held.update((d.tag, d) for d in batch)
        return batch

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.held.pop(delivery.tag, None)
        await self.inner.ack(deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        for delivery in deliveries:
            self.held.pop(delivery.tag, None)
        await self.inner.reject(deliveries, requeue=requeue)

    async def closing(self) -> None:
        """What the consumer does as it closes (the memory consumer then
        puts back what it holds)."""
        await trio.lowlevel.checkpoint()


class BrokerWrapper:
    """A broker that does what the `MemoryBroker` it wraps does.

    Args:
      inner: The memory broker.
      nursery: Where a wrapper starts what happens later (a late delivery).
    """

    consumer: type[ConsumerWrapper] = ConsumerWrapper

    def __init__(self, inner: MemoryBroker, nursery: trio.Nursery) -> None:
        self.inner = inner
        self.nursery = nursery

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch(messages)

    def consumed_queue(self, queue: str) -> str:
        """The memory broker's queue a consumer of ``queue`` reads."""
        return queue

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        async with self.inner.open_consumer(
            self.consumed_queue(queue), prefetch=self.prefetch(prefetch)
        ) as inner:
            consumer = self.consumer(self, inner, queue)
            try:
                yield consumer
            finally:
                with trio.CancelScope(shield=True):
                    await consumer.closing()

    def prefetch(self, asked: int) -> int:
        """The prefetch the memory consumer gets when ``asked`` was asked."""
        return asked

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


def factory_of(
    wrapper: Callable[[MemoryBroker, trio.Nursery], BrokerWrapper],
    *,
    max_payload: int | None = None,
    **flags: Any,
) -> BrokerFactory:
    """A factory of fresh memory brokers inside ``wrapper``, on Trio's clock
    (more `BrokerFactory` flags in ``flags``)."""

    @asynccontextmanager
    async def open_broker() -> AsyncIterator[Broker]:
        inner = MemoryBroker(max_payload=max_payload)
        try:
            async with trio.open_nursery() as nursery:
                try:
                    yield wrapper(inner, nursery)
                finally:
                    # Whatever a wrapper left for later ends with the broker.
                    nursery.cancel_scope.cancel()
        finally:
            await inner.aclose()

    return BrokerFactory(open=open_broker, trio_clock=True, **flags)


# -- Dispatch ----------------------------------------------------------------------------


class LosesOne(BrokerWrapper):
    """Loses the ``nth`` message it is given (every other arrives)."""

    nth = 5

    def __init__(self, inner: MemoryBroker, nursery: trio.Nursery) -> None:
        super().__init__(inner, nursery)
        self.count = itertools.count(1)

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch([m for m in messages if next(self.count) != self.nth])


class LosesOneInFifty(LosesOne):
    nth = 50


class CorruptsLargeBodies(BrokerWrapper):
    """Changes the last byte of every body over a kilobyte."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch(
            [
                attrs.evolve(m, body=m.body[:-1] + bytes([m.body[-1] ^ 1]))
                if len(m.body) > 1000
                else m
                for m in messages
            ]
        )


class SendsBeforeRefusing(BrokerWrapper):
    """Sends a batch one message at a time: the messages before one over
    `max_payload` are sent before it is refused."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        for message in messages:
            await self.inner.dispatch([message])


class OneQueue(BrokerWrapper):
    """Every queue is one queue."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch([attrs.evolve(m, queue="everything") for m in messages])

    def consumed_queue(self, queue: str) -> str:
        return "everything"


class LosesResults(BrokerWrapper):
    """Loses what is sent to the results queue."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch([m for m in messages if m.queue != RESULTS])


class IgnoresPriorities(BrokerWrapper):
    """Sends every message at priority 0: first come, first served."""

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.inner.dispatch([attrs.evolve(m, priority=0) for m in messages])


class AlwaysQuiet(BrokerWrapper):
    """`quiet` says the queues hold nothing, whatever they hold."""

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        said = trio.Event()
        said.set()
        return said


# -- Receive -----------------------------------------------------------------------------


class DeafWhenEmpty(ConsumerWrapper):
    async def receive(self, max_items: int) -> list[Delivery]:
        if not self.broker.inner.depth(self.queue):
            # Looked once, found nothing, never looks again.
            await trio.sleep_forever()
        return await super().receive(max_items)


class DeafWhileWaiting(BrokerWrapper):
    """A receive that finds its queue empty never returns."""

    consumer = DeafWhenEmpty


class TakesAllItCan(ConsumerWrapper):
    async def receive(self, max_items: int) -> list[Delivery]:
        return await super().receive(1000)


class IgnoresMaxItems(BrokerWrapper):
    """A receive returns as many messages as the prefetch allows, whatever
    ``max_items`` says."""

    consumer = TakesAllItCan


class IgnoresPrefetch(BrokerWrapper):
    """A consumer holds any number of messages unacked."""

    def prefetch(self, asked: int) -> int:
        return 1000


class AbandoningFetch(ConsumerWrapper):
    async def receive(self, max_items: int) -> list[Delivery]:
        fetched: list[Delivery] = []
        done = trio.Event()

        async def fetch() -> None:
            try:
                fetched.extend(await super(AbandoningFetch, self).receive(max_items))
            except trio.ClosedResourceError:
                return  # the consumer closed while the fetch waited
            done.set()

        # The fetch goes on in the broker's nursery when this receive is
        # cancelled, and what it takes is never returned.
        self.broker.nursery.start_soon(fetch)
        await done.wait()
        return fetched


class LosesOnCancel(BrokerWrapper):
    """A cancelled receive leaves its fetch running, which takes the next
    message and never hands it over."""

    consumer = AbandoningFetch


class ActiveOnlyFirst(ConsumerWrapper):
    async def receive(self, max_items: int) -> list[Delivery]:
        broker = self.broker
        assert isinstance(broker, SingleActiveConsumer)
        # Only the oldest open consumer of a queue gets messages; the others
        # wait for it to close.
        while broker.active[self.queue][0] is not self:
            await broker.closed.setdefault(self.queue, trio.Event()).wait()
        return await super().receive(max_items)

    async def closing(self) -> None:
        broker = self.broker
        assert isinstance(broker, SingleActiveConsumer)
        broker.active[self.queue].remove(self)
        broker.closed.pop(self.queue, trio.Event()).set()
        await trio.lowlevel.checkpoint()


class SingleActiveConsumer(BrokerWrapper):
    """One consumer of a queue at a time gets messages (a single active
    consumer): two consumers never share the work."""

    consumer = ActiveOnlyFirst

    def __init__(self, inner: MemoryBroker, nursery: trio.Nursery) -> None:
        super().__init__(inner, nursery)
        self.active: dict[str, list[ConsumerWrapper]] = {}
        self.closed: dict[str, trio.Event] = {}

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        async with super().open_consumer(queue, prefetch=prefetch) as consumer:
            assert isinstance(consumer, ConsumerWrapper)
            self.active.setdefault(queue, []).append(consumer)
            self.closed.setdefault(queue, trio.Event())
            yield consumer


# -- Settle ------------------------------------------------------------------------------


class AckRequeues(ConsumerWrapper):
    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await super().reject(deliveries, requeue=True)


class RedeliversAcked(BrokerWrapper):
    """An ack puts the message back: it is delivered again."""

    consumer = AckRequeues


class AckRedeliversLate(ConsumerWrapper):
    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await super().ack(deliveries)
        bodies = [d.body for d in deliveries]

        async def again() -> None:
            # As a server that lost the ack would, a moment later.
            await trio.sleep(0.1)
            await self.broker.inner.dispatch([Outgoing(queue=self.queue, body=b) for b in bodies])

        if bodies:
            self.broker.nursery.start_soon(again)


class RedeliversAckedLate(BrokerWrapper):
    """An acked message is delivered again a tenth of a second later: what
    only a wait of `BrokerFactory.quiet_period` can see."""

    consumer = AckRedeliversLate


class AcksOnClose(ConsumerWrapper):
    async def closing(self) -> None:
        await self.inner.ack(list(self.held.values()))
        self.held.clear()


class ForgetsUnackedOnClose(BrokerWrapper):
    """A consumer that closes acks what it holds: it is never delivered again."""

    consumer = AcksOnClose


class RequeueDrops(ConsumerWrapper):
    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        await super().reject(deliveries, requeue=False)


class RejectNeverRequeues(BrokerWrapper):
    """``reject(requeue=True)`` drops the message."""

    consumer = RequeueDrops


# -- Worker descriptors ------------------------------------------------------------------


class WithdrawIgnored(BrokerWrapper):
    """`withdraw` does nothing."""

    async def withdraw(self, instance_id: str) -> None:
        await trio.lowlevel.checkpoint()


class DropsCapabilities(BrokerWrapper):
    """Announces descriptors without their capabilities."""

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(attrs.evolve(descriptor, capabilities=()), ttl)


class CountsDispatchesAsBacklog(BrokerWrapper):
    """Says a queue's backlog is every message ever dispatched to it, taken
    and acked ones too."""

    def __init__(self, inner: MemoryBroker, nursery: trio.Nursery) -> None:
        super().__init__(inner, nursery)
        self.dispatched: Counter[str] = Counter()

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        self.dispatched.update(m.queue for m in messages)
        await self.inner.dispatch(messages)

    async def backlog(self, queue: str) -> int:
        await trio.lowlevel.checkpoint()
        return self.dispatched[queue]


class KeepsDescriptorsForever(BrokerWrapper):
    """Ignores a descriptor's time to live."""

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, 10**9)


class NeedsHeartbeats(BrokerWrapper):
    """Faithful, but says its announcements need heartbeats, as a broker on
    a server does (the memory broker it wraps keeps them all the same)."""

    needs_heartbeat = True


class ForgetsHeldAnnouncements(BrokerWrapper):
    """Says its announcements need no heartbeat (as the memory broker it
    wraps does), yet keeps one made until withdrawn for a minute only."""

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, min(ttl, 60.0))
