"""The broker conformance suite: every `Broker` keeps the same contract.

The first part runs against every broker in `BROKER_FACTORIES` (the
``broker_factory`` fixture). It is written for servers that are not on the
Trio clock: no test depends on virtual time or on how long something takes.
Where a test waits for something that must happen, it waits at most
`EVENTUALLY` seconds (`trio.fail_after`); where it checks that something does
*not* happen, it waits until every task is blocked and then, for a broker on
another machine, for the factory's `BrokerFactory.quiet_period`. Queue names
are unique per test (and per session), so a shared server needs no cleanup
between tests.

To plug in an adapter, add a `pytest.param(BrokerFactory(...), id=...)` to
`BROKER_FACTORIES`: an ``open`` callable returning an async context manager
that yields a connected broker, and its capability flags.

The second part is about what only the memory broker has: injected faults
(`BrokerFaults`), exact times under the autojump clock, and the
``memory://`` URL registry.
"""

from __future__ import annotations

import functools
import itertools
import random
import re
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final, TypeVar

import attrs
import pytest
import trio
import trio.testing

from trio_durable import InvalidURLError
from trio_durable._brokers import open_broker
from trio_durable._brokers._base import (
    RESULTS,
    Broker,
    Consumer,
    Delivery,
    Outgoing,
    PayloadTooLarge,
    WorkerDescriptor,
    is_broker_safe,
)
from trio_durable._brokers._memory import BrokerFaults, MemoryBroker, open_memory_broker

EVENTUALLY: Final = 10.0
"""How long (seconds) the suite waits for something that must happen."""

_SESSION: Final = secrets.token_hex(3)
"""Distinguishes this session's queues from earlier ones on a real server."""

_serial = itertools.count()

T = TypeVar("T")


# -- The brokers under test ------------------------------------------------------


@attrs.frozen(kw_only=True)
class BrokerFactory:
    """How the suite opens one kind of broker, and what that kind can do.

    Calling it returns an async context manager that opens a connected
    broker; separate calls may share a server (tests isolate themselves by
    queue name and instance id), but a memory broker is fresh each time.

    Attributes:
      open: Returns the async context manager that opens one broker.
      priorities: Delivers higher-priority messages first; without it the
        priority test is a (strict) xfail.
      trio_clock: Its time is `trio.current_time()`, so a test may run it
        under an autojump `trio.testing.MockClock` (the memory broker).
      quiet_period: How long (real seconds) to watch for a message that must
        not arrive, after every task is blocked; 0 for brokers that live on
        the Trio thread (nothing can arrive once every task is blocked).
      poll_interval: How long to sleep between two reads of something that
        becomes true eventually (descriptors that propagate).
      short_ttl: A descriptor time to live the TTL test can wait out.
    """

    open: Callable[[], AbstractAsyncContextManager[Broker]]
    priorities: bool = True
    trio_clock: bool = False
    quiet_period: float = 0.0
    poll_interval: float = 0.05
    short_ttl: float = 1.0
    server: str | None = None
    """The real server it needs (a ``tests/servers`` name): the fixtures
    resolve its URL with ``real_server`` into `SERVER_URLS` before ``open``
    is called, so ``open`` reads ``SERVER_URLS[server]``."""

    def __call__(self) -> AbstractAsyncContextManager[Broker]:
        return self.open()


SERVER_URLS: Final[dict[str, str]] = {}
"""The URLs of the real servers in use, by ``tests/servers`` name."""


def use_server(request: pytest.FixtureRequest, factory: BrokerFactory) -> None:
    """Resolve the URL of the real server ``factory`` needs (starting it, or
    skipping the test, through the session fixture ``real_server``)."""
    if factory.server is not None and factory.server not in SERVER_URLS:
        real_server = request.getfixturevalue("real_server")
        SERVER_URLS[factory.server] = real_server(factory.server)


@asynccontextmanager
async def _open_memory_instance() -> AsyncIterator[Broker]:
    broker = MemoryBroker()
    try:
        yield broker
    finally:
        await broker.aclose()


def _open_memory_url() -> AbstractAsyncContextManager[Broker]:
    # A name nobody else uses: a fresh broker, reached through the entry point.
    return open_broker(f"memory://conformance-{next(_serial)}")


def _open_memory_limited() -> AbstractAsyncContextManager[Broker]:
    # A fresh broker with a size limit, as a networked broker has.
    return open_broker(f"memory://conformance-{next(_serial)}?max_payload=200000")


def _open_amqp(bridge: str) -> AbstractAsyncContextManager[Broker]:
    return open_broker(f"{SERVER_URLS['rabbitmq']}?bridge={bridge}")


def _open_nats(bridge: str) -> AbstractAsyncContextManager[Broker]:
    return open_broker(f"{SERVER_URLS['nats']}?bridge={bridge}")


BROKER_FACTORIES: Final = [
    pytest.param(BrokerFactory(open=_open_memory_instance, trio_clock=True), id="memory"),
    pytest.param(BrokerFactory(open=_open_memory_url, trio_clock=True), id="memory-url"),
    pytest.param(
        BrokerFactory(open=_open_memory_limited, trio_clock=True), id="memory-max-payload"
    ),
    *(
        pytest.param(
            BrokerFactory(
                open=functools.partial(_open_amqp, bridge), server="rabbitmq", quiet_period=0.5
            ),
            id=f"amqp-{bridge}",
        )
        for bridge in ("thread", "trio-asyncio")
    ),
    *(
        pytest.param(
            # No priorities on NATS (docs/nats.md); a short TTL that is not
            # a whole number of seconds (the server's per-message TTL is).
            BrokerFactory(
                open=functools.partial(_open_nats, bridge),
                server="nats",
                priorities=False,
                quiet_period=0.5,
                short_ttl=1.5,
            ),
            id=f"nats-{bridge}",
        )
        for bridge in ("thread", "trio-asyncio")
    ),
]


@pytest.fixture(params=BROKER_FACTORIES)
def broker_factory(request: pytest.FixtureRequest) -> BrokerFactory:
    """Each kind of broker in turn."""
    factory: BrokerFactory = request.param
    use_server(request, factory)
    return factory


@pytest.fixture
async def broker(broker_factory: BrokerFactory) -> AsyncIterator[Broker]:
    """An open broker of each kind; closed after the test."""
    async with broker_factory() as opened:
        yield opened


@pytest.fixture
def broker_clock(broker_factory: BrokerFactory) -> trio.testing.MockClock | None:
    """The autojump clock for a broker on Trio's clock (so waiting out a TTL
    costs no real time), else None (the real clock)."""
    return trio.testing.MockClock(autojump_threshold=0) if broker_factory.trio_clock else None


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test (and no earlier session) uses; tests that
    need more append ``.a``, ``.b``, ..."""
    test = re.sub(r"[^A-Za-z0-9_.-]", "-", request.node.name)[:60]
    return f"conformance.{_SESSION}.{next(_serial)}.{test}"


def require(request: pytest.FixtureRequest, factory: BrokerFactory, capability: str) -> None:
    """Expect this test to fail (strictly) on a broker without ``capability``."""
    if not getattr(factory, capability):
        request.applymarker(
            pytest.mark.xfail(reason=f"the broker has no {capability}", strict=True)
        )


# -- Helpers -------------------------------------------------------------------------


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


def descriptor(instance_id: str, *groups: str, **fields: object) -> WorkerDescriptor:
    return WorkerDescriptor(instance_id=instance_id, app="shop", groups=groups, **fields)  # type: ignore[arg-type]


# -- Dispatch and receive ----------------------------------------------------------


async def test_memory_brokers_satisfy_the_protocol() -> None:
    # Checked by mypy: the memory broker and its consumer are structurally a
    # Broker and a Consumer.
    broker: Broker = MemoryBroker()
    async with broker.open_consumer("q", prefetch=1) as consumer:
        typed: Consumer = consumer
        await typed.ack([])


async def test_dispatched_bodies_arrive_intact(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    bodies = [
        b"",
        b"hello",
        b"same",
        b"same",  # two messages with one body are two messages
        bytes(range(256)),
        "żółw 🐢".encode(),
        bytes(i % 251 for i in range(100_000)),
    ]
    await broker.dispatch([])
    # Dispatched before anyone consumes the queue: the messages wait for the
    # first consumer.
    await broker.dispatch(outgoing(queue, *bodies[:3]))
    await broker.dispatch(outgoing(queue, *bodies[3:]))
    async with broker.open_consumer(queue, prefetch=100) as consumer:
        received = await receive_exactly(consumer, len(bodies))
        assert bodies_of(received) == Counter(bodies)
        assert [d.deliveries for d in received] == [1] * len(bodies)
        await consumer.ack(received)
        await assert_nothing_arrives(consumer, broker_factory)


LARGEST_CHECKED_BODY: Final = 8 * 1024 * 1024
"""Bodies up to this size are sent to check ``max_payload``; over it (the
RabbitMQ default of 128 MiB), only the refusal is checked."""


async def test_a_body_over_max_payload_is_refused_and_nothing_is_sent(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    limit = broker.max_payload
    if limit is None:
        # No limit: a body larger than any limit here still arrives.
        bodies = [b"x" * (LARGEST_CHECKED_BODY + 1)]
    else:
        assert isinstance(limit, int)
        assert limit > 0
        too_large = b"x" * (limit + 1)
        with pytest.raises(PayloadTooLarge) as caught:
            await broker.dispatch(outgoing(queue, b"small", too_large))
        assert (caught.value.queue, caught.value.size, caught.value.limit) == (
            queue,
            limit + 1,
            limit,
        )
        bodies = [b"small"] + ([b"y" * limit] if limit <= LARGEST_CHECKED_BODY else [])
    await broker.dispatch(outgoing(queue, *bodies))
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received = await receive_exactly(consumer, len(bodies))
        # What was refused never arrives: the batch went nowhere.
        assert bodies_of(received) == Counter(bodies)
        await consumer.ack(received)
        await assert_nothing_arrives(consumer, broker_factory)


async def test_queues_are_separate(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    first, second = f"{queue}.a", f"{queue}.b"
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
        await assert_nothing_arrives(consumer, broker_factory)
    async with broker.open_consumer(first, prefetch=10) as consumer:
        received = await receive_exactly(consumer, 2)
        assert bodies_of(received) == Counter([b"a1", b"a2"])
        await consumer.ack(received)


async def test_a_waiting_receive_gets_a_later_dispatch(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received: list[Delivery] = []

        async def wait_for_one() -> None:
            received.extend(await consumer.receive(10))

        with trio.fail_after(EVENTUALLY):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_one)
                await settle(broker_factory)
                assert received == []
                await broker.dispatch(outgoing(queue, b"late"))
        assert [(d.body, d.deliveries) for d in received] == [(b"late", 1)]
        await consumer.ack(received)


async def test_receive_returns_at_least_one_and_at_most_max_items(
    broker: Broker, queue: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(7)]
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


async def test_prefetch_bounds_unacked_messages(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(5)]
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
                await settle(broker_factory)
                assert third == []  # two unacked: no room until an ack
                await consumer.ack(held[:1])
        # One acked made room for exactly one more.
        assert len(third) == 1

        rest = held[1:] + third
        await consumer.ack(rest)
        rest = await receive_exactly(consumer, 2, max_items=5)
        assert bodies_of(held + third + rest) == Counter(bodies)
        await consumer.ack(rest)


async def test_acked_messages_are_never_delivered_again(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    await broker.dispatch(outgoing(queue, b"a", b"b", b"c"))
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received = await receive_exactly(consumer, 3)
        await consumer.ack(received)
    await broker.dispatch(outgoing(queue, b"marker"))
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received = await receive_exactly(consumer, 1)
        assert [(d.body, d.deliveries) for d in received] == [(b"marker", 1)]
        await consumer.ack(received)
        await assert_nothing_arrives(consumer, broker_factory)


async def test_unacked_messages_are_delivered_again_after_the_consumer_closes(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    await broker.dispatch(outgoing(queue, b"a", b"b", b"c"))
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received = await receive_exactly(consumer, 3)
        assert [d.deliveries for d in received] == [1, 1, 1]
        await consumer.ack([d for d in received if d.body == b"a"])

    async with broker.open_consumer(queue, prefetch=10) as consumer:
        again = await receive_exactly(consumer, 2)
        assert sorted((d.body, d.deliveries) for d in again) == [(b"b", 2), (b"c", 2)]
        await consumer.ack([d for d in again if d.body == b"b"])
        await assert_nothing_arrives(consumer, broker_factory)

    async with broker.open_consumer(queue, prefetch=10) as consumer:
        third = await receive_exactly(consumer, 1)
        assert [(d.body, d.deliveries) for d in third] == [(b"c", 3)]
        await consumer.ack(third)
        await assert_nothing_arrives(consumer, broker_factory)


async def test_reject_requeues_or_drops(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    await broker.dispatch(outgoing(queue, b"keep", b"drop"))
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        received = {d.body: d for d in await receive_exactly(consumer, 2)}
        await consumer.reject([received[b"keep"]], requeue=True)
        await consumer.reject([received[b"drop"]], requeue=False)
        again = await receive_exactly(consumer, 1)
        assert [(d.body, d.deliveries) for d in again] == [(b"keep", 2)]
        await consumer.ack(again)
        await assert_nothing_arrives(consumer, broker_factory)
    # Dropped for good: not even a new consumer sees it.
    async with broker.open_consumer(queue, prefetch=10) as consumer:
        await assert_nothing_arrives(consumer, broker_factory)


async def test_a_cancelled_receive_loses_nothing(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    async with broker.open_consumer(queue, prefetch=1) as consumer:
        # Cancelled while waiting: the message dispatched afterwards is not
        # swallowed by the abandoned receive.
        with trio.CancelScope() as waiting:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consumer.receive, 1)
                await settle(broker_factory)
                waiting.cancel()
        await broker.dispatch(outgoing(queue, b"first"))
        received = await receive_exactly(consumer, 1)
        assert [d.body for d in received] == [b"first"]
        await consumer.ack(received)

        # Cancelled with a message ready: it either returns the message or
        # takes nothing, and the one prefetch slot stays free either way.
        await broker.dispatch(outgoing(queue, b"second"))
        await settle(broker_factory)
        received = []
        with trio.CancelScope() as ready:
            ready.cancel()
            received = await consumer.receive(1)
        if not received:
            received = await receive_exactly(consumer, 1)
        assert [d.body for d in received] == [b"second"]
        await consumer.ack(received)
        await assert_nothing_arrives(consumer, broker_factory)


async def test_two_consumers_share_a_queue(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    bodies = [f"m{i}".encode() for i in range(10)]
    await broker.dispatch(outgoing(queue, *bodies))
    taken: dict[str, list[Delivery]] = {"one": [], "two": []}
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
        await assert_nothing_arrives(consumer, broker_factory)


async def test_higher_priorities_are_delivered_first(
    request: pytest.FixtureRequest, broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    require(request, broker_factory, "priorities")
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


async def test_the_results_queue_is_a_queue(broker: Broker, queue: str) -> None:
    assert is_broker_safe(RESULTS)
    # Other engines on a shared server may use RESULTS too: count only ours.
    ours = [f"{queue}.result{i}".encode() for i in range(3)]
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


async def test_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing(
    broker: Broker, queue: str
) -> None:
    a, b = f"{queue}.a", f"{queue}.b"
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


# -- Worker descriptors --------------------------------------------------------------


async def test_announce_withdraw_and_lookup_by_group(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
    # A shared server may hold other tests' workers: look only at ours.
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
        await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], broker_factory)
        assert await ours(payments) == [b.instance_id, c.instance_id]
        assert await ours(shipping) == [a.instance_id]
        assert await ours(mail) == [c.instance_id]
        assert await ours(f"{queue}.nobody") == []
        assert await our_groups() == sorted([mail, payments, shipping])
        assert await broker.worker_groups() == sorted(await broker.worker_groups())

        # Announcing again replaces the worker's descriptor.
        moved = attrs.evolve(c, groups=(shipping,), app_version="2")
        await broker.announce(moved, 60.0)
        await eventually(ours, [a.instance_id, b.instance_id, c.instance_id], broker_factory)
        await eventually(lambda: ours(shipping), [a.instance_id, c.instance_id], broker_factory)
        assert [
            d for d in await broker.worker_descriptors(shipping) if d.instance_id == c.instance_id
        ] == [moved]
        assert await ours(payments) == [b.instance_id]
        assert await our_groups() == sorted([payments, shipping])

        await broker.withdraw(b.instance_id)
        await broker.withdraw(f"{queue}.never-announced")  # a no-op
        await eventually(ours, [a.instance_id, c.instance_id], broker_factory)
        assert await ours(payments) == []
        assert await our_groups() == [shipping]
    finally:
        for worker in (a, b, c):
            await broker.withdraw(worker.instance_id)
    nobody: list[str] = []
    await eventually(ours, nobody, broker_factory)
    assert await our_groups() == []


async def test_descriptors_round_trip_every_field(
    broker: Broker, broker_factory: BrokerFactory, queue: str
) -> None:
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
    try:
        await broker.announce(full, 60.0)

        async def read() -> list[WorkerDescriptor]:
            return [
                d for d in await broker.worker_descriptors() if d.instance_id == full.instance_id
            ]

        await eventually(read, [full], broker_factory)
        assert await broker.worker_descriptors(f"{queue}.payments@acme") == [full]
    finally:
        await broker.withdraw(full.instance_id)


async def test_a_descriptor_is_forgotten_after_its_ttl(
    broker: Broker,
    broker_factory: BrokerFactory,
    broker_clock: trio.testing.MockClock | None,
    queue: str,
) -> None:
    ttl = broker_factory.short_ttl
    worker = descriptor(f"{queue}.w", f"{queue}.g")
    long_lived = descriptor(f"{queue}.z", f"{queue}.g")

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
        await eventually(ours, [long_lived.instance_id], broker_factory, patience=ttl + EVENTUALLY)
        assert trio.current_time() - announced >= ttl
        assert [g for g in await broker.worker_groups() if g.startswith(queue)] == [f"{queue}.g"]
    finally:
        await broker.withdraw(worker.instance_id)
        await broker.withdraw(long_lived.instance_id)


async def test_memory_descriptor_ttl_exact_times(autojump_clock: trio.testing.MockClock) -> None:
    broker = MemoryBroker()
    a = descriptor("a", "payments")
    b = descriptor("b", "shipping")

    async def ids() -> list[str]:
        return [d.instance_id for d in await broker.worker_descriptors()]

    assert trio.current_time() == 0.0
    await broker.announce(a, 10.0)
    await broker.announce(b, 30.0)
    await trio.sleep(9.5)
    assert await ids() == ["a", "b"]
    # A heartbeat at 9.5 pushes a's expiry to 19.5.
    await broker.announce(a, 10.0)
    await trio.sleep_until(19.0)
    assert await ids() == ["a", "b"]
    await trio.sleep_until(19.5)
    assert trio.current_time() == 19.5
    assert await ids() == ["b"]
    assert await broker.worker_descriptors("payments") == []
    assert await broker.worker_groups() == ["shipping"]
    await trio.sleep_until(30.0)
    assert await ids() == []
    assert await broker.worker_groups() == []


# -- Memory broker: faults -------------------------------------------------------------


async def delivery_order(faults: BrokerFaults, bodies: Sequence[bytes]) -> list[bytes]:
    broker = MemoryBroker(faults)
    await broker.dispatch(outgoing("q", *bodies))
    delivered: list[bytes] = []
    async with broker.open_consumer("q", prefetch=100) as consumer:
        while broker.depth("q"):
            received = await consumer.receive(1)
            delivered.extend(d.body for d in received)
            await consumer.ack(received)
    return delivered


async def test_memory_receive_takes_all_it_may() -> None:
    broker = MemoryBroker()
    await broker.dispatch(outgoing("q", *(f"m{i}".encode() for i in range(5))))
    async with broker.open_consumer("q", prefetch=4) as consumer:
        assert [d.body for d in await consumer.receive(3)] == [b"m0", b"m1", b"m2"]
        # Room for one more under the prefetch of 4.
        assert [d.body for d in await consumer.receive(10)] == [b"m3"]
    assert broker.depth("q") == 5


async def test_memory_duplicate_delivers_every_message_twice() -> None:
    broker = MemoryBroker(BrokerFaults(duplicate=1.0, seed=3))
    bodies = [f"m{i}".encode() for i in range(5)]
    await broker.dispatch(outgoing("q", *bodies))
    assert broker.depth("q") == 10
    async with broker.open_consumer("q", prefetch=100) as consumer:
        received = await receive_exactly(consumer, 10)
        assert bodies_of(received) == Counter(bodies * 2)
        assert {d.deliveries for d in received} == {1}
        # The copies are separate messages: acking one leaves the other.
        await consumer.ack(received[:5])
    async with broker.open_consumer("q", prefetch=100) as consumer:
        again = await receive_exactly(consumer, 5)
        assert bodies_of(again) == bodies_of(received[5:])
        await consumer.ack(again)
    assert broker.depth("q") == 0


async def test_memory_delay_holds_each_message_back_until_its_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seed, delay = 5, 4.0
    broker = MemoryBroker(BrokerFaults(delay=delay, seed=seed))
    bodies = [f"m{i}".encode() for i in range(8)]
    # One draw from the seeded source per message, in dispatch order.
    rng = random.Random(seed)
    start = trio.current_time()
    visible_at = {body: start + rng.uniform(0, delay) for body in bodies}
    assert len(set(visible_at.values())) == len(bodies)

    await broker.dispatch(outgoing("q", *bodies))
    received_at: dict[bytes, float] = {}
    async with broker.open_consumer("q", prefetch=100) as consumer:
        while len(received_at) < len(bodies):
            batch = await consumer.receive(100)
            now = trio.current_time()
            # Exactly the messages whose time has come and no other.
            assert {d.body for d in batch} == {
                body for body, at in visible_at.items() if at <= now and body not in received_at
            }
            received_at.update((d.body, now) for d in batch)
            await consumer.ack(batch)
        assert broker.depth("q") == 0
    # Each was received the moment it became visible (up to the float
    # rounding of MockClock's jumps).
    assert received_at == pytest.approx(visible_at, abs=1e-12)
    assert trio.current_time() == pytest.approx(max(visible_at.values()), abs=1e-12)


async def test_memory_quiet_counts_delayed_and_unacked_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = MemoryBroker(BrokerFaults(delay=10.0, seed=1))
    visible_at = random.Random(1).uniform(0, 10.0)
    await broker.dispatch(outgoing("q", b"late"))
    watch = broker.quiet(["q"])
    assert not watch.is_set()
    async with broker.open_consumer("q", prefetch=1) as consumer:
        [late] = await consumer.receive(1)
        assert trio.current_time() == pytest.approx(visible_at, abs=1e-12)
        assert not watch.is_set()
    # Closing the consumer put it back unacked: still held.
    assert not watch.is_set()
    async with broker.open_consumer("q", prefetch=1) as consumer:
        [again] = await consumer.receive(1)
        await consumer.ack([again])
    assert watch.is_set()
    assert again.body == late.body


async def test_memory_delay_with_a_waiting_consumer(autojump_clock: trio.testing.MockClock) -> None:
    broker = MemoryBroker(BrokerFaults(delay=10.0, seed=1))
    expected = random.Random(1).uniform(0, 10.0)
    async with broker.open_consumer("q", prefetch=1) as consumer:
        async with trio.open_nursery() as nursery:
            received: list[Delivery] = []

            async def wait() -> None:
                received.extend(await consumer.receive(1))

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            await broker.dispatch(outgoing("q", b"late"))
        assert [d.body for d in received] == [b"late"]
        assert trio.current_time() == pytest.approx(expected, abs=1e-12)


async def test_memory_without_reorder_delivery_is_fifo() -> None:
    bodies = [f"m{i}".encode() for i in range(10)]
    assert await delivery_order(BrokerFaults(seed=4), bodies) == bodies


async def test_memory_reorder_shuffles_but_loses_nothing() -> None:
    bodies = [f"m{i}".encode() for i in range(10)]
    orders = [
        await delivery_order(BrokerFaults(reorder=True, seed=seed), bodies) for seed in range(10)
    ]
    assert all(Counter(order) == Counter(bodies) for order in orders)
    assert any(order != bodies for order in orders)


async def test_memory_counts_the_faults_it_injects(autojump_clock: trio.testing.MockClock) -> None:
    bodies = [f"m{i}".encode() for i in range(8)]
    brokers = {
        "clean": MemoryBroker(),
        "duplicating": MemoryBroker(BrokerFaults(duplicate=1.0, seed=2)),
        "delaying": MemoryBroker(BrokerFaults(delay=5.0, seed=2)),
    }
    orders: dict[str, list[bytes]] = {}
    for name, broker in brokers.items():
        await broker.dispatch(outgoing("q", *bodies))
        async with broker.open_consumer("q", prefetch=100) as consumer:
            orders[name] = [d.body for d in await receive_exactly(consumer, broker.depth("q"))]
    counts = {name: (b.duplicated, b.delayed, b.reordered) for name, b in brokers.items()}
    assert counts["clean"] == (0, 0, 0)
    assert counts["duplicating"] == (len(bodies), 0, 0)
    # Delays deliver out of order: a message counts when it is older than
    # one delivered before it.
    newest, late = -1, 0
    for body in orders["delaying"]:
        index = bodies.index(body)
        late += index < newest
        newest = max(newest, index)
    assert late > 0
    assert counts["delaying"] == (0, len(bodies), late)


async def test_memory_faults_replay_by_seed() -> None:
    bodies = [f"m{i}".encode() for i in range(20)]
    faults = BrokerFaults(reorder=True, duplicate=0.5, seed=11)
    first = await delivery_order(faults, bodies)
    assert await delivery_order(faults, bodies) == first
    assert len(first) > len(bodies)  # some were duplicated
    assert set(first) == set(bodies)


async def test_memory_closing_a_consumer_wakes_a_pending_receive(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = MemoryBroker()
    with trio.fail_after(EVENTUALLY):
        async with (
            trio.open_nursery() as nursery,
            broker.open_consumer("q", prefetch=1) as consumer,
        ):

            async def receive() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await consumer.receive(1)

            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
    # And the closed consumer took nothing that was dispatched afterwards.
    await broker.dispatch(outgoing("q", b"m"))
    assert broker.depth("q") == 1


# -- Memory broker: URLs ------------------------------------------------------------------


async def test_memory_url_is_shared_while_open() -> None:
    url = f"memory://shared-{next(_serial)}"
    seen: list[Broker] = []
    both_open = trio.Event()
    handed_over: list[bytes] = []

    async def user(role: str) -> None:
        async with open_broker(url) as broker:
            seen.append(broker)
            if len(seen) == 2:
                both_open.set()
            await both_open.wait()
            if role == "producer":
                await broker.dispatch(outgoing("q", b"across"))
            else:
                async with broker.open_consumer("q", prefetch=1) as consumer:
                    received = await consumer.receive(1)
                    handed_over.extend(d.body for d in received)
                    await consumer.ack(received)

    with trio.fail_after(EVENTUALLY):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(user, "producer")
            nursery.start_soon(user, "consumer")
    assert seen[0] is seen[1]
    assert handed_over == [b"across"]

    # Kept while any user holds it; dropped after the last one leaves.
    async with open_broker(url) as first:
        async with open_broker(url + "/") as second:
            assert second is first
            await second.dispatch(outgoing("q", b"left behind"))
        async with open_broker(url) as third:
            assert third is first
    async with open_broker(url) as fresh:
        assert fresh is not first
        assert fresh is not seen[0]
        assert isinstance(fresh, MemoryBroker)
        assert fresh.depth("q") == 0


async def test_memory_urls_name_separate_brokers() -> None:
    name = f"named-{next(_serial)}"
    async with (
        open_broker("memory://") as default,
        open_broker(f"memory://{name}") as named,
        open_broker(f"memory://{name}-other") as other,
        open_memory_broker(f"memory://{name}") as direct,
    ):
        assert default is not named
        assert named is not other
        assert direct is named


@pytest.mark.parametrize(
    "url",
    [
        "memory://x/path",
        "memory://x?durable=1",
        "memory://x#fragment",
        "memory://x:5672",
        "memory://x:0",
        "memory://x:",
        "memory://x:port",
        "memory://user@x",
        "memory:x",
        "memory://x?max_payload=0",
        "memory://x?max_payload=-1",
        "memory://x?max_payload=1.5",
        "memory://x?max_payload=",
        "memory://x?max_payload=%C2%B2",
        "memory://x?max_payload=1&max_payload=1",
        "memory://x?max_payload=1&durable=1",
    ],
)
async def test_malformed_memory_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError):
        async with open_broker(url):
            pass  # pragma: no cover
    with pytest.raises(InvalidURLError):
        async with open_memory_broker(url):
            pass  # pragma: no cover


async def test_memory_url_max_payload() -> None:
    name = f"limited-{next(_serial)}"
    async with (
        open_broker(f"memory://{name}?max_payload=1000") as limited,
        open_broker(f"memory://{name}/?max_payload=1000") as same,
        open_broker(f"memory://{name}-other") as other,
    ):
        assert isinstance(limited, MemoryBroker)
        assert same is limited
        assert limited.max_payload == 1000
        assert other.max_payload is None
        # One name, one broker: it cannot have two limits.
        for url in (f"memory://{name}", f"memory://{name}?max_payload=999"):
            with pytest.raises(InvalidURLError, match="is open with max_payload=1000"):
                async with open_broker(url):
                    pass  # pragma: no cover


@pytest.mark.parametrize("url", ["carrier-pigeon://coop", "localhost:5672", "", "://x"])
async def test_unknown_schemes_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError):
        async with open_broker(url):
            pass  # pragma: no cover


async def test_open_memory_broker_refuses_other_schemes() -> None:
    with pytest.raises(InvalidURLError):
        async with open_memory_broker("redis://x"):
            pass  # pragma: no cover


def test_broker_safe_tokens() -> None:
    assert is_broker_safe("payments")
    assert is_broker_safe("payments@acme") is False  # a route, not a token
    assert is_broker_safe("a.b-c_D9")
    assert is_broker_safe("x" * 100)
    assert not is_broker_safe("x" * 101)
    assert not is_broker_safe("")
    assert not is_broker_safe(".hidden")
    assert not is_broker_safe("-flag")
    assert not is_broker_safe("two words")
    assert not is_broker_safe("payments\n")
    assert not is_broker_safe("a/b")
