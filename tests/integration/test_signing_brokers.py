"""Message signing over a real RabbitMQ and NATS: the scenarios of
tests/signed_fleet.py (forged results, unsigned tasks, a worker with no key
of the ring, a remote workflow's decisions), each in a namespace of its own
on the shared server."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest

from signed_fleet import (
    a_stranger_worker_is_rejected,
    forged_results_settle_nothing,
    remote_workflows_decide_signed,
    unsigned_tasks_never_run,
)
from trio_durable.brokers import Broker, open_broker

Scenario = Callable[[Broker, str], Awaitable[None]]


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
@pytest.mark.parametrize(
    "scenario",
    [
        forged_results_settle_nothing,
        unsigned_tasks_never_run,
        a_stranger_worker_is_rejected,
        remote_workflows_decide_signed,
    ],
    ids=lambda scenario: scenario.__name__,
)
async def test_signing_over_a_real_broker(
    real_server: Callable[[str], str], server: str, scenario: Scenario
) -> None:
    namespace = f"signing{secrets.token_hex(4)}"
    async with open_broker(real_server(server)) as broker:
        await scenario(broker, namespace)
