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

from collections.abc import Awaitable, Callable
from typing import Final

import trio

from ..._brokers._base import (
    RESULTS,
    Consumer,
    Delivery,
    Outgoing,
    PayloadTooLarge,
    Pingable,
    SupportsBacklog,
    is_broker_safe,
)
from ._broker_descriptors import (
    check_a_descriptor_is_forgotten_after_its_ttl,
    check_an_announcement_without_heartbeat_lasts_until_withdrawn,
    check_announce_withdraw_and_lookup_by_group,
    check_descriptors_round_trip_every_field,
)
from ._broker_factory import (
    EVENTUALLY,
    LARGEST_CHECKED_BODY,
    BrokerFactory,
    BrokerMaker,
    as_factory,
    assert_nothing_arrives,
    assert_same_bodies,
    bodies_of,
    outgoing,
    receive_exactly,
    settle,
    unique_name,
)
from ._outcomes import CheckResult, run_suite, skip

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
            assert_same_bodies((d.body for d in received), bodies)
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
            assert_same_bodies((d.body for d in received), bodies)
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
            assert_same_bodies((d.body for d in received), [b"a1", b"a2"])
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
            assert_same_bodies((d.body for d in received), bodies)
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
            assert_same_bodies((d.body for d in held + third + rest), bodies)
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
        assert_same_bodies((d.body for d in taken["one"] + taken["two"]), bodies)
        assert {d.deliveries for d in taken["one"] + taken["two"]} == {1}
        # Everything was acked: nothing comes back.
        async with broker.open_consumer(queue, prefetch=10) as consumer:
            await assert_nothing_arrives(consumer, factory)


async def check_higher_priorities_are_delivered_first(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Waiting messages are delivered highest priority first (9 to 0), in
    order of dispatch within a priority. Skipped for a factory without
    `BrokerFactory.priorities`."""
    factory = as_factory(factory)
    if not factory.priorities:
        skip("the broker has no priorities (its BrokerFactory says priorities=False)")
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
    assert_same_bodies(delivered, (body for _, body in dispatched))


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
            assert_same_bodies((d.body for d in mine), ours)
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


async def check_ping_answers_and_disturbs_nothing(factory: BrokerFactory | BrokerMaker) -> None:
    """A broker with the optional `Pingable.ping` answers it (within
    `EVENTUALLY` seconds) while its server is there, again and again and
    beside a dispatch, and the round trip disturbs nothing: what was
    dispatched before and after it arrives, once each. Skipped for a
    broker without ``ping``. (That it fails while the server is away is for
    the adapter's own tests, which can stop its server.)"""
    factory = as_factory(factory)
    queue = unique_name("ping")
    async with factory() as broker:
        pingable = isinstance(broker, Pingable)
        if isinstance(broker, Pingable):
            with trio.fail_after(EVENTUALLY):
                await broker.ping()
                await broker.dispatch(outgoing(queue, b"before"))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(broker.ping)
                    nursery.start_soon(broker.dispatch, outgoing(queue, b"beside"))
                await broker.ping()
                await broker.dispatch(outgoing(queue, b"after"))
            async with broker.open_consumer(queue, prefetch=10) as consumer:
                received = await receive_exactly(consumer, 3)
                assert_same_bodies((d.body for d in received), [b"before", b"beside", b"after"])
                await consumer.ack(received)
                await assert_nothing_arrives(consumer, factory)
    # Skipped once the broker is closed: the factory's block may be a
    # nursery, which would wrap the skip in an exception group.
    if not pingable:
        skip("the broker has no ping (it is optional: see Pingable)")


async def check_backlog_counts_what_waits(factory: BrokerFactory | BrokerMaker) -> None:
    """A broker with the optional `SupportsBacklog.backlog` counts what
    waits on a queue: 0 for a queue nothing was dispatched to; N once N
    messages were dispatched (another queue's not counted); 0 again once a
    consumer received them all (delivered, not yet acked) and once it acked
    them. Skipped for a broker without ``backlog``."""
    factory = as_factory(factory)
    queue, other = unique_name("backlog"), unique_name("backlog-other")
    bodies = [b"one", b"two", b"three", b"four", b"five"]
    async with factory() as broker:
        counts = isinstance(broker, SupportsBacklog)
        if isinstance(broker, SupportsBacklog):
            with trio.fail_after(EVENTUALLY):
                assert await broker.backlog(queue) == 0, "a queue never used holds no message"
                await broker.dispatch(outgoing(queue, *bodies))
                await broker.dispatch(outgoing(other, b"elsewhere"))
                assert await broker.backlog(queue) == len(bodies)
                assert await broker.backlog(other) == 1
            async with broker.open_consumer(queue, prefetch=len(bodies)) as consumer:
                received = await receive_exactly(consumer, len(bodies))
                with trio.fail_after(EVENTUALLY):
                    # Delivered and not acked: no longer waiting.
                    assert await broker.backlog(queue) == 0
                await consumer.ack(received)
                with trio.fail_after(EVENTUALLY):
                    assert await broker.backlog(queue) == 0
                    assert await broker.backlog(other) == 1
            async with broker.open_consumer(other, prefetch=1) as consumer:
                await consumer.ack(await receive_exactly(consumer, 1))
    if not counts:
        skip("the broker has no backlog (it is optional: see SupportsBacklog)")


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
    check_ping_answers_and_disturbs_nothing,
    check_backlog_counts_what_waits,
    check_announce_withdraw_and_lookup_by_group,
    check_descriptors_round_trip_every_field,
    check_a_descriptor_is_forgotten_after_its_ttl,
    check_an_announcement_without_heartbeat_lasts_until_withdrawn,
)
"""Every check of the broker suite, in order: parametrize a test over it
(``ids=lambda check: check.__name__``) to see each pass or fail alone."""


async def check_broker(factory: BrokerFactory | BrokerMaker) -> list[CheckResult]:
    """Run every check of `BROKER_CHECKS` against ``factory``, one after
    another; the first that fails raises.

    Args:
      factory: A `BrokerFactory`, or a zero-argument callable returning an
        async context manager that yields a connected broker (then the
        broker is taken to have priorities and to live off the Trio thread).

    Returns:
      One `CheckResult` per check, each ``"passed"`` or ``"skipped"`` (a
      capability the factory says the broker lacks).

    Raises:
      AssertionError: The broker breaks the contract (the message and the
        traceback say where).
    """
    return await run_suite(BROKER_CHECKS, as_factory(factory))
