"""The broker conformance suites fail brokers that break the protocol: for
each check of `BROKER_CHECKS` (each a family of its own: one property of
the protocol), and for the engine suite, a broker with one fault
(tests/conformance/broken_brokers.py) makes the check about it fail, with
an assertion or a wait that never ends, as it would for an outside adapter
with that bug. If a check stopped checking its property, its test here
fails.

Also: a "nothing arrives" check sees a message that arrives late only by
waiting `BrokerFactory.quiet_period`, which is not 0 by default; and a
check that does not apply (a factory without priorities) is skipped, never
passed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Final

import pytest
import trio
import trio.testing
from broken_brokers import (
    AlwaysQuiet,
    BrokerWrapper,
    CorruptsLargeBodies,
    CountsDispatchesAsBacklog,
    DeafWhileWaiting,
    DropsCapabilities,
    ForgetsHeldAnnouncements,
    ForgetsUnackedOnClose,
    IgnoresMaxItems,
    IgnoresPrefetch,
    IgnoresPriorities,
    KeepsDescriptorsForever,
    LosesOnCancel,
    LosesOne,
    LosesOneInFifty,
    LosesResults,
    NeedsHeartbeats,
    OneQueue,
    RedeliversAcked,
    RedeliversAckedLate,
    RejectNeverRequeues,
    SendsBeforeRefusing,
    SingleActiveConsumer,
    WithdrawIgnored,
    factory_of,
)
from suite_outcomes import assert_caught

from trio_durable.brokers import Broker, MemoryBroker, open_broker
from trio_durable.testing.conformance import (
    BROKER_CHECKS,
    BROKER_ENGINE_CHECKS,
    QUIET_PERIOD,
    BrokerFactory,
    check_acked_messages_are_never_delivered_again,
    check_an_announcement_without_heartbeat_lasts_until_withdrawn,
    check_broker,
    check_higher_priorities_are_delivered_first,
    run_checks,
)

Wrapper = Callable[[MemoryBroker, trio.Nursery], BrokerWrapper]

# (the fault, its broker, the checks that must catch it)
CASES: Final = [
    pytest.param(LosesOne, ["check_dispatched_bodies_arrive_intact"], id="loses-a-message"),
    pytest.param(
        CorruptsLargeBodies, ["check_dispatched_bodies_arrive_intact"], id="corrupts-a-body"
    ),
    pytest.param(OneQueue, ["check_queues_are_separate"], id="one-queue-for-all"),
    pytest.param(
        DeafWhileWaiting,
        ["check_a_waiting_receive_gets_a_later_dispatch"],
        id="waiting-receive-never-wakes",
    ),
    pytest.param(
        IgnoresMaxItems,
        ["check_receive_returns_at_least_one_and_at_most_max_items"],
        id="receive-over-max-items",
    ),
    pytest.param(
        IgnoresPrefetch, ["check_prefetch_bounds_unacked_messages"], id="prefetch-ignored"
    ),
    pytest.param(
        RedeliversAcked,
        ["check_acked_messages_are_never_delivered_again"],
        id="redelivers-an-acked-message",
    ),
    pytest.param(
        RedeliversAckedLate,
        ["check_acked_messages_are_never_delivered_again"],
        id="redelivers-an-acked-message-late",
    ),
    pytest.param(
        ForgetsUnackedOnClose,
        ["check_unacked_messages_are_delivered_again_after_the_consumer_closes"],
        id="never-redelivers-after-a-consumer-closes",
    ),
    pytest.param(
        RejectNeverRequeues, ["check_reject_requeues_or_drops"], id="reject-never-requeues"
    ),
    pytest.param(
        LosesOnCancel, ["check_a_cancelled_receive_loses_nothing"], id="cancelled-receive-loses"
    ),
    pytest.param(
        SingleActiveConsumer,
        ["check_two_consumers_share_a_queue"],
        id="one-consumer-at-a-time",
    ),
    pytest.param(
        IgnoresPriorities,
        ["check_higher_priorities_are_delivered_first"],
        id="ignores-priorities",
    ),
    pytest.param(LosesResults, ["check_the_results_queue_is_a_queue"], id="loses-results"),
    pytest.param(
        AlwaysQuiet,
        ["check_quiet_says_nothing_or_exactly_when_the_queues_hold_nothing"],
        id="quiet-while-holding",
    ),
    pytest.param(
        CountsDispatchesAsBacklog,
        ["check_backlog_counts_what_waits"],
        id="backlog-counts-acked",
    ),
    pytest.param(
        WithdrawIgnored, ["check_announce_withdraw_and_lookup_by_group"], id="withdraw-ignored"
    ),
    pytest.param(
        DropsCapabilities,
        ["check_descriptors_round_trip_every_field"],
        id="descriptor-field-lost",
    ),
    pytest.param(
        KeepsDescriptorsForever,
        ["check_a_descriptor_is_forgotten_after_its_ttl"],
        id="descriptor-ttl-ignored",
    ),
    pytest.param(
        ForgetsHeldAnnouncements,
        ["check_an_announcement_without_heartbeat_lasts_until_withdrawn"],
        id="held-announcement-lapses",
    ),
]


@pytest.mark.parametrize(("broken", "catching"), CASES)
async def test_the_broker_suite_catches(
    broken: Wrapper, catching: list[str], autojump_clock: trio.testing.MockClock
) -> None:
    results = await run_checks(BROKER_CHECKS, factory_of(broken))
    assert_caught(results, catching)


async def test_the_broker_suite_catches_a_batch_sent_in_part(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Over a size limit, a batch must be refused whole.
    results = await run_checks(BROKER_CHECKS, factory_of(SendsBeforeRefusing, max_payload=200_000))
    assert_caught(results, ["check_a_body_over_max_payload_is_refused_and_nothing_is_sent"])


@pytest.mark.parametrize("check", BROKER_ENGINE_CHECKS, ids=lambda check: check.__name__)
async def test_the_engine_suite_catches_a_lost_message(
    check: Callable[[BrokerFactory], Awaitable[None]], autojump_clock: trio.testing.MockClock
) -> None:
    # One task or result lost (of the hundreds a check sends): a run never
    # ends, and the check says so.
    [result] = await run_checks([check], factory_of(LosesOneInFifty))
    assert_caught([result], [result.check])


async def test_the_faithful_wrapper_passes_both_suites(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The faults above are the wrappers' alone.
    results = await run_checks(BROKER_CHECKS + BROKER_ENGINE_CHECKS, factory_of(BrokerWrapper))
    assert [r.outcome for r in results] == ["passed"] * len(results), results


# -- The quiet period --------------------------------------------------------------------


def test_the_default_quiet_period_is_not_zero() -> None:
    def opener() -> AbstractAsyncContextManager[Broker]:
        return open_broker("memory://")

    assert BrokerFactory(open=opener).quiet_period == QUIET_PERIOD > 0
    with pytest.raises(ValueError, match="quiet_period"):
        BrokerFactory(open=opener, quiet_period=-1.0)


async def test_a_late_redelivery_is_seen_only_by_waiting_the_quiet_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The message comes back a tenth of a second after its ack, as from a
    # server: the default quiet period sees it; without one, once every
    # task is blocked the check stops watching and sees nothing.
    check = check_acked_messages_are_never_delivered_again
    [watched] = await run_checks([check], factory_of(RedeliversAckedLate))
    assert_caught([watched], [check.__name__])
    [unwatched] = await run_checks([check], factory_of(RedeliversAckedLate, quiet_period=0.0))
    assert unwatched.outcome == "passed"


# -- Skips -------------------------------------------------------------------------------

PRIORITIES: Final = check_higher_priorities_are_delivered_first.__name__


async def test_a_broker_without_priorities_is_skipped_not_passed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    no_priorities = factory_of(IgnoresPriorities, priorities=False)
    results = {r.check: r for r in await run_checks(BROKER_CHECKS, no_priorities)}
    skipped = results.pop(PRIORITIES)
    assert skipped.outcome == "skipped"
    assert "priorities=False" in skipped.reason
    assert {r.outcome for r in results.values()} == {"passed"}
    # check_broker reports it the same way, among the passes.
    outcomes = {r.check: r.outcome for r in await check_broker(no_priorities)}
    assert outcomes[PRIORITIES] == "skipped"


async def test_a_broker_that_needs_heartbeats_is_skipped_by_the_held_announcement_check(
    autojump_clock: trio.testing.MockClock,
) -> None:
    [result] = await run_checks(
        [check_an_announcement_without_heartbeat_lasts_until_withdrawn],
        factory_of(NeedsHeartbeats),
    )
    assert (result.outcome, result.reason) == (
        "skipped",
        "the broker needs heartbeats (Broker.needs_heartbeat is not False)",
    )


async def test_a_skipped_check_is_a_pytest_skip_under_pytest(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Called as a test calls it: pytest reports the test as skipped, with
    # the reason.
    with pytest.raises(pytest.skip.Exception, match=r"no priorities.*priorities=False"):
        await check_higher_priorities_are_delivered_first(
            factory_of(IgnoresPriorities, priorities=False)
        )


async def test_check_broker_raises_the_first_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The lost message never arrives: the first check waits for it in vain.
    with pytest.RaisesGroup(trio.TooSlowError, allow_unwrapped=True, flatten_subgroups=True):
        await check_broker(factory_of(LosesOne))
