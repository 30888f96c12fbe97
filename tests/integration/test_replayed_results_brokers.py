"""Results replayed into a later execution of their step, over a real NATS
and RabbitMQ, with signing on and off: the scenarios of
tests/replayed_results.py, each in a namespace of its own on the shared
server."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest

import trio_durable as td
from replayed_results import (
    RING,
    decisions_replayed_into_a_new_run_under_a_pruned_id,
    duplicates_of_an_old_result,
    replayed_after_a_retryable_failure,
    replayed_after_retry_from_seq,
    replayed_into_a_new_run_under_a_pruned_id,
)
from trio_durable.brokers import Broker, open_broker

Scenario = Callable[[Broker, str, td.Keyring | None], Awaitable[None]]


@pytest.mark.parametrize("server", ["nats", "rabbitmq"])
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
async def test_a_replayed_result_is_stale_over_a_real_broker(
    real_server: Callable[[str], str],
    server: str,
    signing: td.Keyring | None,
    scenario: Scenario,
) -> None:
    namespace = f"replays{secrets.token_hex(4)}"
    async with open_broker(real_server(server)) as broker:
        await scenario(broker, namespace, signing)
