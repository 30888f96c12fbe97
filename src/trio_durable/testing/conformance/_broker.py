"""The broker conformance suite: every `Broker` keeps the same contract.

Each check is an ``async def check_...(factory)``, in the manner of
`trio.testing.check_two_way_stream`: ``factory`` opens a broker of the kind
under test (a `BrokerFactory`, or any zero-argument callable returning an
async context manager that yields a connected broker), and the check opens
and closes the brokers it needs, raising `AssertionError` when the broker
breaks the contract. `BROKER_CHECKS` lists them for a parametrized test;
`check_broker` runs them all.

The checks are written for servers that are not on the Trio clock: none
depends on virtual time or on how long something takes. Where a check waits
for something that must happen, it waits at most `EVENTUALLY` seconds
(`trio.fail_after`); where it checks that something does *not* happen, it
waits until every task is blocked and then, for a broker on another
machine, for the factory's `BrokerFactory.quiet_period`. Queue names and
instance ids are unique per check (and per process), so a shared server
needs no cleanup between checks.
"""

from __future__ import annotations

import itertools
import re
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Final, TypeVar, final

import attrs
import trio
import trio.testing

from ..._brokers._base import (
    RESULTS,
    Broker,
    Consumer,
    Delivery,
    Outgoing,
    PayloadTooLarge,
    WorkerDescriptor,
    is_broker_safe,
)

EVENTUALLY: Final = 10.0
"""How long (seconds) a check waits for something that must happen."""

LARGEST_CHECKED_BODY: Final = 8 * 1024 * 1024
"""Bodies up to this size are sent to check ``max_payload``; over it (the
RabbitMQ default of 128 MiB), only the refusal is checked."""

_SESSION: Final = secrets.token_hex(3)
"""Distinguishes this process's queues from earlier ones on a real server."""

_serial = itertools.count()

T = TypeVar("T")

BrokerMaker = Callable[[], AbstractAsyncContextManager[Broker]]
"""Opens a broker: a zero-argument callable returning an async context
manager that yields a connected broker and closes it on exit."""


@final
@attrs.frozen(kw_only=True)
class BrokerFactory:
    """How the suites open one kind of broker, and what that kind can do.

    Calling it returns an async context manager that opens a connected
    broker. Separate calls may share a server (checks isolate themselves by
    queue name and instance id); brokers of one call may also be fresh each
    time, as the memory broker's are.

    Attributes:
      open: Returns the async context manager that opens one broker.
      priorities: Delivers higher-priority messages first. Without it
        `check_higher_priorities_are_delivered_first` checks nothing (run it
        with a factory that claims priorities, as an expected failure, to
        show the gap).
      trio_clock: Its time is `trio.current_time()`: it lives on the Trio
        thread, its delays and times to live are Trio time. The caller then
        runs the checks under ``trio.testing.MockClock(autojump_threshold=0)``
        (so waiting out a time to live costs no real time), and the engine
        suite asserts exact times.
      quiet_period: How long (real seconds) to watch for a message that must
        not arrive, after every task is blocked; 0 for brokers that live on
        the Trio thread (nothing can arrive once every task is blocked).
      poll_interval: How long to sleep between two reads of something that
        becomes true eventually (descriptors that propagate).
      short_ttl: A descriptor time to live that
        `check_a_descriptor_is_forgotten_after_its_ttl` waits out (some
        servers round it: NATS keeps per-message TTLs in whole seconds).
    """

    open: BrokerMaker
    priorities: bool = True
    trio_clock: bool = False
    quiet_period: float = 0.0
    poll_interval: float = 0.05
    short_ttl: float = 1.0

    def __call__(self) -> AbstractAsyncContextManager[Broker]:
        """Open one broker (``self.open()``)."""
        return self.open()


def as_factory(factory: BrokerFactory | BrokerMaker) -> BrokerFactory:
    """``factory`` itself, or a plain opener wrapped with the default
    capabilities (priorities, a broker on another clock with no quiet
    period)."""
    if isinstance(factory, BrokerFactory):
        return factory
    if not callable(factory):
        raise TypeError(f"a broker factory must be callable, not {factory!r}")
    return BrokerFactory(open=factory)


def unique_name(check: str) -> str:
    """A queue name (or instance id prefix) nothing else uses, in this
    process or an earlier one; checks that need more append ``.a``, ..."""
    tail = re.sub(r"[^A-Za-z0-9_.-]", "-", check)[:60]
    return f"conformance.{_SESSION}.{next(_serial)}.{tail}"


# -- Helpers ------------------------------------------------------------------------


def outgoing(queue: str, *bodies: bytes, priority: int = 0) -> list[Outgoing]:
    return [Outgoing(queue=queue, body=body, priority=priority) for body in bodies]


def bodies_of(deliveries: Sequence[Delivery]) -> Counter[bytes]:
    return Counter(d.body for d in deliveries)


async def receive_exactly(
    consumer: Consumer, count: int, *, max_items: int | None = None
) -> list[Delivery]:
    """Receive until ``count`` messages have arrived (never asking for more),
    checking that every batch holds at least one and at most what was asked."""
    received: list[Delivery] = []
    with trio.fail_after(EVENTUALLY):
        while len(received) < count:
            asked = min(max_items or count, count - len(received))
            batch = await consumer.receive(asked)
            assert 1 <= len(batch) <= asked
            received.extend(batch)
    return received


async def settle(factory: BrokerFactory) -> None:
    """Give anything that could still arrive the chance to."""
    await trio.testing.wait_all_tasks_blocked()
    if factory.quiet_period:
        await trio.sleep(factory.quiet_period)
        await trio.testing.wait_all_tasks_blocked()


async def assert_nothing_arrives(consumer: Consumer, factory: BrokerFactory) -> None:
    arrived: list[Delivery] = []

    async def watch() -> None:
        arrived.extend(await consumer.receive(100))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        await settle(factory)
        nursery.cancel_scope.cancel()
    assert [d.body for d in arrived] == []


async def eventually(
    probe: Callable[[], Awaitable[T]],
    expected: T,
    factory: BrokerFactory,
    *,
    patience: float = EVENTUALLY,
) -> None:
    """Wait (at most ``patience`` seconds) until ``probe()`` returns ``expected``."""
    last = await probe()
    with trio.move_on_after(patience):
        while last != expected:
            await trio.sleep(factory.poll_interval)
            last = await probe()
    assert last == expected


def descriptor(instance_id: str, *groups: str) -> WorkerDescriptor:
    return WorkerDescriptor(instance_id=instance_id, app="shop", groups=groups)


# -- Dispatch and receive ------------------------------------------------------------


async def check_dispatched_bodies_arrive_intact(factory: BrokerFactory | BrokerMaker) -> None:
    """Bodies (empty, binary, 100 kB, two with one body) arrive as they were
    sent, each delivered once, also to the first consumer of a queue that
    got them before anyone consumed it; an empty dispatch is fine."""
    factory = as_factory(factory)
    queue = unique_name("bodies-arrive-intact")
    bodies = [
        b"",
        b"hello",
        b"same",
        b"same",  # two messages with one body are two messages
        bytes(range(256)),
        "żółw 🐢".encode(),
        bytes(i % 251 for i in range(100_000)),
    ]
    async with factory() as broker:
        await broker.dispatch([])
        # Dispatched before anyone consumes the queue: the messages wait for
        # the first consumer.
        await broker.dispatch(outgoing(queue, *bodies[:3]))
        await broker.dispatch(outgoing(queue, *bodies[3:]))
        async with broker.open_consumer(queue, prefetch=100) as consumer:
            received = await receive_exactly(consumer, len(bodies))
            assert bodies_of(received) == Counter(bodies)
            assert [d.deliveries for d in received] == [1] * len(bodies)
            await consumer.ack(received)
            await assert_nothing_arrives(consumer, factory)


async def check_a_body_over_max_payload_is_refused_and_nothing_is_sent(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """A batch with a body over `Broker.max_payload` raises `PayloadTooLarge`
    (naming the queue, the size and the limit) and sends nothing of the
    batch; a body of exactly the limit arrives (for limits up to
    `LARGEST_CHECKED_BODY`). Without a limit, a larger body arrives."""
    factory = as_factory(factory)
    queue = unique_name("max-payload")
    async with factory() as broker:
        limit = broker.max_payload
        if limit is None:
            # No limit: a body larger than any limit here still arrives.
            bodies = [b"x" * (LARGEST_CHECKED_BODY + 1)]
        else:
            assert isinstance(limit, int)
            assert limit > 0
            too_large = b"x" * (limit + 1)
            refused: PayloadTooLarge | None = None
            try:
                await broker.dispatch(outgoing(queue, b"small", too_large))
            except PayloadTooLarge as exc:
                refused = exc
            assert refused is not None, "a body over max_payload was not refused"
            assert (refused.queue, refused.size, refused.limit) == (queue, limit + 1, limit)
            bodies = [b"small"] + ([b"y" * limit] if limit <= LARGEST_CHECKED_BODY else [])
        await broker.dispatch(outgoing(queue, *bodies))
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_exactly(consumer, len(bodies))
            # What was refused never arrives: the batch went nowhere.
            assert bodies_of(received) == Counter(bodies)
            await consumer.ack(received)
            await assert_nothing_arrives(consumer, factory)


async def check_queues_are_separate(factory: BrokerFactory | BrokerMaker) -> None:
    """A consumer of one queue sees only that queue's messages."""
    factory = as_factory(factory)
    queue = unique_name("queues-are-separate")
    first, second = f"{queue}.a", f"{queue}.b"
    async with factory() as broker:
        await broker.dispatch(
            [
                Outgoing(queue=first, body=b"a1"),
                Outgoing(queue=second, body=b"b1"),
                Outgoing(queue=first, body=b"a2"),
            ]
        )
        async with broker.open_consumer(second, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 1)
            assert [d.body for d in received] == [b"b1"]
            await consumer.ack(received)
            await assert_nothing_arrives(consumer, factory)
        async with broker.open_consumer(first, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 2)
            assert bodies_of(received) == Counter([b"a1", b"a2"])
            await consumer.ack(received)


async def check_a_waiting_receive_gets_a_later_dispatch(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """A receive waiting on an empty queue returns a message dispatched later."""
    factory = as_factory(factory)
    queue = unique_name("waiting-receive")
    async with factory() as broker, broker.open_consumer(queue, prefetch=10) as consumer:
        received: list[Delivery] = []

        async def wait_for_one() -> None:
            received.extend(await consumer.receive(10))

        with trio.fail_after(EVENTUALLY):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_one)
                await settle(factory)
                assert received == []
                await broker.dispatch(outgoing(queue, b"late"))
        assert [(d.body, d.deliveries) for d in received] == [(b"late", 1)]
        await consumer.ack(received)


async def check_receive_returns_at_least_one_and_at_most_max_items(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """`Consumer.receive` returns between 1 and ``max_items`` messages."""
    factory = as_factory(factory)
    queue = unique_name("receive-max-items")
    bodies = [f"m{i}".encode() for i in range(7)]
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, *bodies))
        async with broker.open_consumer(queue, prefetch=100) as consumer:
            received: list[Delivery] = []
            with trio.fail_after(EVENTUALLY):
                while len(received) < len(bodies):
                    batch = await consumer.receive(3)
                    assert 1 <= len(batch) <= 3
                    received.extend(batch)
            assert bodies_of(received) == Counter(bodies)
            await consumer.ack(received)


async def check_prefetch_bounds_unacked_messages(factory: BrokerFactory | BrokerMaker) -> None:
    """A consumer holds at most ``prefetch`` messages unacked; an ack makes
    room for exactly one more."""
    factory = as_factory(factory)
    queue = unique_name("prefetch")
    bodies = [f"m{i}".encode() for i in range(5)]
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, *bodies))
        async with broker.open_consumer(queue, prefetch=2) as consumer:
            held: list[Delivery] = []
            with trio.fail_after(EVENTUALLY):
                while len(held) < 2:
                    held.extend(await consumer.receive(5))
                    assert len(held) <= 2

            third: list[Delivery] = []

            async def receive_third() -> None:
                third.extend(await consumer.receive(5))

            with trio.fail_after(EVENTUALLY):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(receive_third)
                    await settle(factory)
                    assert third == []  # two unacked: no room until an ack
                    await consumer.ack(held[:1])
            # One acked made room for exactly one more.
            assert len(third) == 1

            rest = held[1:] + third
            await consumer.ack(rest)
            rest = await receive_exactly(consumer, 2, max_items=5)
            assert bodies_of(held + third + rest) == Counter(bodies)
            await consumer.ack(rest)


async def check_acked_messages_are_never_delivered_again(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Acked messages do not come back, not even to the next consumer."""
    factory = as_factory(factory)
    queue = unique_name("acked-never-again")
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, b"a", b"b", b"c"))
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 3)
            await consumer.ack(received)
        await broker.dispatch(outgoing(queue, b"marker"))
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 1)
            assert [(d.body, d.deliveries) for d in received] == [(b"marker", 1)]
            await consumer.ack(received)
            await assert_nothing_arrives(consumer, factory)


async def check_unacked_messages_are_delivered_again_after_the_consumer_closes(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """What a consumer held unacked when it closed is delivered again, with
    its `Delivery.deliveries` counted up."""
    factory = as_factory(factory)
    queue = unique_name("unacked-again")
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, b"a", b"b", b"c"))
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 3)
            assert [d.deliveries for d in received] == [1, 1, 1]
            await consumer.ack([d for d in received if d.body == b"a"])

        async with broker.open_consumer(queue, prefetch=10) as consumer:
            again = await receive_exactly(consumer, 2)
            assert sorted((d.body, d.deliveries) for d in again) == [(b"b", 2), (b"c", 2)]
            await consumer.ack([d for d in again if d.body == b"b"])
            await assert_nothing_arrives(consumer, factory)

        async with broker.open_consumer(queue, prefetch=10) as consumer:
            third = await receive_exactly(consumer, 1)
            assert [(d.body, d.deliveries) for d in third] == [(b"c", 3)]
            await consumer.ack(third)
            await assert_nothing_arrives(consumer, factory)


async def check_reject_requeues_or_drops(factory: BrokerFactory | BrokerMaker) -> None:
    """``reject(requeue=True)`` delivers again (counted up);
    ``requeue=False`` drops for good."""
    factory = as_factory(factory)
    queue = unique_name("reject")
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, b"keep", b"drop"))
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = {d.body: d for d in await receive_exactly(consumer, 2)}
            await consumer.reject([received[b"keep"]], requeue=True)
            await consumer.reject([received[b"drop"]], requeue=False)
            again = await receive_exactly(consumer, 1)
            assert [(d.body, d.deliveries) for d in again] == [(b"keep", 2)]
            await consumer.ack(again)
            await assert_nothing_arrives(consumer, factory)
        # Dropped for good: not even a new consumer sees it.
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            await assert_nothing_arrives(consumer, factory)


async def check_a_cancelled_receive_loses_nothing(factory: BrokerFactory | BrokerMaker) -> None:
    """A receive cancelled while waiting, or cancelled with a message ready,
    takes nothing it does not return."""
    factory = as_factory(factory)
    queue = unique_name("cancelled-receive")
    async with factory() as broker, broker.open_consumer(queue, prefetch=1) as consumer:
        # Cancelled while waiting: the message dispatched afterwards is not
        # swallowed by the abandoned receive.
        with trio.CancelScope() as waiting:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer.receive, 1)
                await settle(factory)
                waiting.cancel()
        await broker.dispatch(outgoing(queue, b"first"))
        received = await receive_exactly(consumer, 1)
        assert [d.body for d in received] == [b"first"]
        await consumer.ack(received)

        # Cancelled with a message ready: it either returns the message or
        # takes nothing, and the one prefetch slot stays free either way.
        await broker.dispatch(outgoing(queue, b"second"))
        await settle(factory)
        received = []
        with trio.CancelScope() as ready:
            ready.cancel()
            received = await consumer.receive(1)
        if not received:
            received = await receive_exactly(consumer, 1)
        assert [d.body for d in received] == [b"second"]
        await consumer.ack(received)
        await assert_nothing_arrives(consumer, factory)


async def check_two_consumers_share_a_queue(factory: BrokerFactory | BrokerMaker) -> None:
    """Two consumers of one queue each get a share, and no message twice."""
    factory = as_factory(factory)
    queue = unique_name("two-consumers")
    bodies = [f"m{i}".encode() for i in range(10)]
    taken: dict[str, list[Delivery]] = {"one": [], "two": []}
    async with factory() as broker:
        await broker.dispatch(outgoing(queue, *bodies))
        async with (
            broker.open_consumer(queue, prefetch=1) as one,
            broker.open_consumer(queue, prefetch=1) as two,
        ):
            # Each holds one unacked first, so both get a share whatever the
            # broker's dispatch policy.
            first_one = await receive_exactly(one, 1)
            first_two = await receive_exactly(two, 1)
            assert first_one[0].body != first_two[0].body

            async def work(name: str, consumer: Consumer, held: list[Delivery]) -> None:
                while True:
                    await consumer.ack(held)
                    taken[name].extend(held)
                    if sum(map(len, taken.values())) == len(bodies):
                        nursery.cancel_scope.cancel()
                    held = await consumer.receive(1)

            with trio.fail_after(EVENTUALLY):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(work, "one", one, first_one)
                    nursery.start_soon(work, "two", two, first_two)

        assert taken["one"]
        assert taken["two"]
        assert not bodies_of(taken["one"]) & bodies_of(taken["two"])
        assert bodies_of(taken["one"] + taken["two"]) == Counter(bodies)
        assert {d.deliveries for d in taken["one"] + taken["two"]} == {1}
        # Everything was acked: nothing comes back.
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            await assert_nothing_arrives(consumer, factory)


async def check_higher_priorities_are_delivered_first(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Waiting messages are delivered highest priority first (9 to 0), in
    order of dispatch within a priority. Checks nothing for a factory
    without `BrokerFactory.priorities`."""
    factory = as_factory(factory)
    if not factory.priorities:
        return
    queue = unique_name("priorities")
    # Queued lowest first, so a broker ignoring priorities delivers them in
    # the wrong order.
    dispatched = [
        (0, b"p0-a"),
        (0, b"p0-b"),
        (0, b"p0-c"),
        (1, b"p1"),
        (5, b"p5"),
        (9, b"p9-a"),
        (9, b"p9-b"),
    ]
    async with factory() as broker:
        for priority, body in dispatched:
            await broker.dispatch(outgoing(queue, body, priority=priority))
        delivered: list[bytes] = []
        async with broker.open_consumer(queue, prefetch=1) as consumer:
            for _ in dispatched:
                received = await receive_exactly(consumer, 1)
                delivered.extend(d.body for d in received)
                await consumer.ack(received)
    priorities = [int(body[1:2]) for body in delivered]
    assert priorities == [9, 9, 5, 1, 0, 0, 0]
    assert Counter(delivered) == Counter(body for _, body in dispatched)


async def check_the_results_queue_is_a_queue(factory: BrokerFactory | BrokerMaker) -> None:
    """`RESULTS` is a broker-safe name and works as any other queue."""
    factory = as_factory(factory)
    queue = unique_name("results-queue")
    assert is_broker_safe(RESULTS)
    # Other engines on a shared server may use RESULTS too: count only ours.
    ours = [f"{queue}.result{i}".encode() for i in range(3)]
    async with factory() as broker:
        await broker.dispatch(outgoing(RESULTS, *ours))
        await broker.dispatch(outgoing(queue, b"a task"))
        async with broker.open_consumer(RESULTS, prefetch=10) as consumer:
            mine: list[Delivery] = []
            with trio.fail_after(EVENTUALLY):
                while len(mine) < len(ours):
                    batch = await consumer.receive(10)
                    await consumer.ack(batch)
                    mine.extend(d for d in batch if d.body.startswith(queue.encode()))
            assert bodies_of(mine) == Counter(ours)
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            received = await receive_exactly(consumer, 1)
            assert [d.body for d in received] == [b"a task"]
            await consumer.ack(received)


async def check_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """`Broker.quiet` returns None every time, or an event set exactly when
    none of the queues holds a message (waiting, or taken and not settled)."""
    factory = as_factory(factory)
    queue = unique_name("quiet")
    a, b = f"{queue}.a", f"{queue}.b"
    async with factory() as broker:
        first = broker.quiet([a, b])
        if first is None:
            # A broker whose queues live on a server cannot tell: it says so
            # every time, whatever the queues hold (drain then relies on the
            # engine's own count of the tasks it sent).
            await broker.dispatch(outgoing(a, b"x"))
            assert broker.quiet([a, b]) is None
            async with broker.open_consumer(a, prefetch=1) as consumer:
                await consumer.ack(await receive_exactly(consumer, 1))
            assert broker.quiet([a]) is None
            return
        assert first.is_set()
        await broker.dispatch([*outgoing(a, b"1", b"2"), *outgoing(b, b"3")])
        watch = broker.quiet([a, b])
        assert watch is not None
        assert not watch.is_set()
        async with (
            broker.open_consumer(a, prefetch=10) as on_a,
            broker.open_consumer(b, prefetch=10) as on_b,
        ):
            got = await receive_exactly(on_a, 2)
            # Taken and not settled: still held.
            assert not watch.is_set()
            await on_a.reject(got[:1], requeue=True)
            await on_a.ack(got[1:])
            assert not watch.is_set()
            await on_a.reject(await receive_exactly(on_a, 1), requeue=False)
            # a holds nothing now; b still holds its message.
            only_a = broker.quiet([a])
            assert only_a is not None
            assert only_a.is_set()
            assert not watch.is_set()
            [last] = await receive_exactly(on_b, 1)
            assert not watch.is_set()
            await on_b.ack([last])
            assert watch.is_set()
        again = broker.quiet([a, b])
        assert again is not None
        assert again.is_set()


# -- Worker descriptors ----------------------------------------------------------------


async def check_announce_withdraw_and_lookup_by_group(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Announced descriptors are listed by instance id and found by group;
    announcing again replaces one; a withdrawn one is gone (withdrawing an
    unknown one is a no-op); `Broker.worker_groups` follows."""
    factory = as_factory(factory)
    queue = unique_name("announce")
    async with factory() as broker:
        # A shared server may hold other checks' workers: look only at ours.
        async def ours(group: str | None = None) -> list[str]:
            return [
                d.instance_id
                for d in await broker.worker_descriptors(group)
                if d.instance_id.startswith(queue)
            ]

        async def our_groups() -> list[str]:
            return [g for g in await broker.worker_groups() if g.startswith(queue)]

        payments, shipping, mail = f"{queue}.payments", f"{queue}.shipping", f"{queue}.mail"
        c = descriptor(f"{queue}.w-c", payments, mail)
        a = descriptor(f"{queue}.w-a", shipping)
        b = descriptor(f"{queue}.w-b", payments)
        try:
            for worker in (c, a, b):  # not in id order
                await broker.announce(worker, 60.0)
            await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], factory)
            assert await ours(payments) == [b.instance_id, c.instance_id]
            assert await ours(shipping) == [a.instance_id]
            assert await ours(mail) == [c.instance_id]
            assert await ours(f"{queue}.nobody") == []
            assert await our_groups() == sorted([mail, payments, shipping])
            assert await broker.worker_groups() == sorted(await broker.worker_groups())

            # Announcing again replaces the worker's descriptor.
            moved = attrs.evolve(c, groups=(shipping,), app_version="2")
            await broker.announce(moved, 60.0)
            await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], factory)
            await eventually(lambda: ours(shipping), [a.instance_id, c.instance_id], factory)
            assert [
                d
                for d in await broker.worker_descriptors(shipping)
                if d.instance_id == c.instance_id
            ] == [moved]
            assert await ours(payments) == [b.instance_id]
            assert await our_groups() == sorted([payments, shipping])

            await broker.withdraw(b.instance_id)
            await broker.withdraw(f"{queue}.never-announced")  # a no-op
            await eventually(ours, [a.instance_id, c.instance_id], factory)
            assert await ours(payments) == []
            assert await our_groups() == [shipping]
        finally:
            for worker in (a, b, c):
                await broker.withdraw(worker.instance_id)
        nobody: list[str] = []
        await eventually(ours, nobody, factory)
        assert await our_groups() == []


async def check_descriptors_round_trip_every_field(factory: BrokerFactory | BrokerMaker) -> None:
    """Every field of a descriptor (Unicode, nested dicts, None values, an
    exact float) comes back as announced."""
    factory = as_factory(factory)
    queue = unique_name("descriptor-fields")
    full = WorkerDescriptor(
        instance_id=f"{queue}.worker-1",
        app="shop-ü",
        app_version="2024.05.1",
        runtime={"python": "3.12.1", "trio": "0.35.0", "platform": "Linux-6.1 🐧"},
        groups=(f"{queue}.payments", f"{queue}.payments@acme"),
        steps={
            "charge": {"group": "payments", "requires": ["pci", "gpu"], "timeout": None},
            "refund": {
                "group": "payments",
                "requires": [],
                "retry": {"attempts": 5, "backoff": 1.5},
            },
        },
        workflows={
            "checkout": {
                "versions": ["1", "2"],
                "on_error": [{"code": "card_declined", "workflow": "refund"}],
            },
            "refund": {"versions": ["1"], "on_error": []},
        },
        capabilities=("gpu", "pci"),
        registration_hash="sha256:" + "ab" * 32,
        announced_at=1_700_000_123.25,
    )
    async with factory() as broker:
        try:
            await broker.announce(full, 60.0)

            async def read() -> list[WorkerDescriptor]:
                return [
                    d
                    for d in await broker.worker_descriptors()
                    if d.instance_id == full.instance_id
                ]

            await eventually(read, [full], factory)
            assert await broker.worker_descriptors(f"{queue}.payments@acme") == [full]
        finally:
            await broker.withdraw(full.instance_id)


async def check_a_descriptor_is_forgotten_after_its_ttl(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """A descriptor is forgotten once its time to live
    (`BrokerFactory.short_ttl`) has passed, and not before; one with a
    longer time to live stays."""
    factory = as_factory(factory)
    queue = unique_name("descriptor-ttl")
    ttl = factory.short_ttl
    worker = descriptor(f"{queue}.w", f"{queue}.g")
    long_lived = descriptor(f"{queue}.z", f"{queue}.g")
    async with factory() as broker:

        async def ours() -> list[str]:
            return [
                d.instance_id
                for d in await broker.worker_descriptors()
                if d.instance_id.startswith(queue)
            ]

        try:
            await broker.announce(long_lived, 60.0)
            announced = trio.current_time()
            await broker.announce(worker, ttl)
            assert await ours() in (
                [worker.instance_id, long_lived.instance_id],
                [long_lived.instance_id],
            )
            await eventually(ours, [long_lived.instance_id], factory, patience=ttl + EVENTUALLY)
            assert trio.current_time() - announced >= ttl
            assert [g for g in await broker.worker_groups() if g.startswith(queue)] == [
                f"{queue}.g"
            ]
        finally:
            await broker.withdraw(worker.instance_id)
            await broker.withdraw(long_lived.instance_id)


BROKER_CHECKS: Final[tuple[Callable[[BrokerFactory | BrokerMaker], Awaitable[None]], ...]] = (
    check_dispatched_bodies_arrive_intact,
    check_a_body_over_max_payload_is_refused_and_nothing_is_sent,
    check_queues_are_separate,
    check_a_waiting_receive_gets_a_later_dispatch,
    check_receive_returns_at_least_one_and_at_most_max_items,
    check_prefetch_bounds_unacked_messages,
    check_acked_messages_are_never_delivered_again,
    check_unacked_messages_are_delivered_again_after_the_consumer_closes,
    check_reject_requeues_or_drops,
    check_a_cancelled_receive_loses_nothing,
    check_two_consumers_share_a_queue,
    check_higher_priorities_are_delivered_first,
    check_the_results_queue_is_a_queue,
    check_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing,
    check_announce_withdraw_and_lookup_by_group,
    check_descriptors_round_trip_every_field,
    check_a_descriptor_is_forgotten_after_its_ttl,
)
"""Every check of the broker suite, in order: parametrize a test over it
(``ids=lambda check: check.__name__``) to see each pass or fail alone."""


async def check_broker(factory: BrokerFactory | BrokerMaker) -> None:
    """Run every check of `BROKER_CHECKS` against ``factory``, one after
    another; the first that fails raises.

    Args:
      factory: A `BrokerFactory`, or a zero-argument callable returning an
        async context manager that yields a connected broker (then the
        broker is taken to have priorities and to live off the Trio thread).

    Raises:
      AssertionError: The broker breaks the contract (the message and the
        traceback say where).
    """
    factory = as_factory(factory)
    for check in BROKER_CHECKS:
        await check(factory)
