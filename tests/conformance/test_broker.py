"""The broker conformance suite (`trio_durable.testing.conformance`) against
the memory broker, and what only the memory broker has.

The first part runs every check of `BROKER_CHECKS` against memory brokers:
opened as an instance, through a ``memory://`` URL, and with a size limit.
They live on the Trio clock, so they run under the autojump clock. The
adapters in ``brokers/`` run the same checks against their own servers.

The second part is about what only the memory broker has: injected faults
(`BrokerFaults`), exact times under the autojump clock, and the
``memory://`` URL registry.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Final

import pytest
import trio
import trio.testing

from trio_durable import InvalidURLError
from trio_durable._brokers._memory import open_memory_broker
from trio_durable.brokers import (
    Broker,
    BrokerFaults,
    Consumer,
    Delivery,
    MemoryBroker,
    Outgoing,
    WorkerDescriptor,
    is_broker_safe,
    open_broker,
)
from trio_durable.testing.conformance import (
    BROKER_CHECKS,
    EVENTUALLY,
    BrokerFactory,
    check_broker,
    check_higher_priorities_are_delivered_first,
    run_checks,
)

_serial = itertools.count()


# -- The memory brokers under the public suite ---------------------------------------


@asynccontextmanager
async def _open_memory_instance() -> AsyncIterator[Broker]:
    broker = MemoryBroker()
    try:
        yield broker
    finally:
        await broker.aclose()


def _open_memory_url() -> AbstractAsyncContextManager[Broker]:
    # A name nobody else uses: a fresh broker, reached through its URL.
    return open_broker(f"memory://conformance-{next(_serial)}")


def _open_memory_limited() -> AbstractAsyncContextManager[Broker]:
    # A fresh broker with a size limit, as a networked broker has.
    return open_broker(f"memory://conformance-{next(_serial)}?max_payload=200000")


MEMORY_FACTORIES: Final = [
    pytest.param(BrokerFactory(open=_open_memory_instance, trio_clock=True), id="memory"),
    pytest.param(BrokerFactory(open=_open_memory_url, trio_clock=True), id="memory-url"),
    pytest.param(
        BrokerFactory(open=_open_memory_limited, trio_clock=True), id="memory-max-payload"
    ),
]


@pytest.mark.parametrize("factory", MEMORY_FACTORIES)
@pytest.mark.parametrize("check", BROKER_CHECKS, ids=lambda check: check.__name__)
async def test_memory_brokers_conform(
    check: Callable[[BrokerFactory], Awaitable[None]],
    factory: BrokerFactory,
    autojump_clock: trio.testing.MockClock,
) -> None:
    await check(factory)


async def test_check_broker_runs_the_suite_on_a_plain_opener(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A zero-argument opener is a factory with the default capabilities.
    results = await check_broker(_open_memory_url)
    assert [(r.check, r.outcome) for r in results] == [
        (check.__name__, "passed") for check in BROKER_CHECKS
    ]
    with pytest.raises(TypeError, match="must be callable"):
        await check_broker("memory://")  # type: ignore[arg-type]


async def test_a_check_fails_on_a_broker_that_breaks_the_contract(
    autojump_clock: trio.testing.MockClock,
) -> None:
    @asynccontextmanager
    async def reordering() -> AsyncIterator[Broker]:
        # Delivers a random waiting message: priorities mean nothing.
        broker = MemoryBroker(BrokerFaults(reorder=True, seed=1))
        try:
            yield broker
        finally:
            await broker.aclose()

    with pytest.raises(AssertionError):
        await check_higher_priorities_are_delivered_first(reordering)
    # A factory that says it has no priorities is not held to them: the
    # check is skipped (tests/conformance/test_broken_brokers.py has more
    # brokers that break the contract).
    [result] = await run_checks(
        [check_higher_priorities_are_delivered_first],
        BrokerFactory(open=reordering, priorities=False),
    )
    assert result.outcome == "skipped"


async def test_memory_brokers_satisfy_the_protocol() -> None:
    # Checked by mypy: the memory broker and its consumer are structurally a
    # Broker and a Consumer.
    broker: Broker = MemoryBroker()
    async with broker.open_consumer("q", prefetch=1) as consumer:
        typed: Consumer = consumer
        await typed.ack([])


# -- Helpers of the memory broker's own tests -----------------------------------------


def outgoing(queue: str, *bodies: bytes, priority: int = 0) -> list[Outgoing]:
    return [Outgoing(queue=queue, body=body, priority=priority) for body in bodies]


def bodies_of(deliveries: Sequence[Delivery]) -> Counter[bytes]:
    return Counter(d.body for d in deliveries)


async def receive_exactly(consumer: Consumer, count: int) -> list[Delivery]:
    """Receive until ``count`` messages have arrived (never asking for more)."""
    received: list[Delivery] = []
    with trio.fail_after(EVENTUALLY):
        while len(received) < count:
            batch = await consumer.receive(count - len(received))
            assert 1 <= len(batch) <= count - len(received)
            received.extend(batch)
    return received


def descriptor(instance_id: str, *groups: str) -> WorkerDescriptor:
    return WorkerDescriptor(instance_id=instance_id, app="shop", groups=groups)


# -- Memory broker: exact times --------------------------------------------------------


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
