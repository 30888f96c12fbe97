"""Results replayed into a later execution of their step, over the memory
broker, with signing on and off: the scenarios of tests/replayed_results.py
(the same run over real NATS and RabbitMQ in
tests/integration/test_replayed_results_brokers.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio.testing

import trio_durable as td
from replayed_results import (
    RING,
    decisions_replayed_into_a_new_run_under_a_pruned_id,
    duplicates_of_an_old_result,
    replayed_after_a_retryable_failure,
    replayed_after_retry_from_seq,
    replayed_into_a_new_run_under_a_pruned_id,
)
from trio_durable.brokers import Broker

Scenario = Callable[[Broker, str, td.Keyring | None], Awaitable[None]]


@pytest.mark.parametrize("signing", [RING, None], ids=["signed", "unsigned"])
@pytest.mark.parametrize(
    "scenario",
    [
        replayed_after_retry_from_seq,
        replayed_after_a_retryable_failure,
        replayed_into_a_new_run_under_a_pruned_id,
        duplicates_of_an_old_result,
        decisions_replayed_into_a_new_run_under_a_pruned_id,
    ],
    ids=lambda scenario: scenario.__name__,
)
async def test_a_replayed_result_is_stale_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, scenario: Scenario, signing: td.Keyring | None
) -> None:
    await scenario(td.MemoryBroker(), "signed" if signing else "unsigned", signing)
