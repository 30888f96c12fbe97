"""The public conformance suites (`trio_durable.testing.conformance`)
against RabbitMQ, in both bridge modes: the broker protocol, and an engine
with workers end to end."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import pytest

from trio_durable.brokers import BridgeMode, Broker
from trio_durable.testing.conformance import BROKER_CHECKS, BROKER_ENGINE_CHECKS, BrokerFactory
from trio_durable_rabbitmq import open_amqp_broker

Check = Callable[[BrokerFactory], Awaitable[None]]


@pytest.fixture(params=["thread", "trio-asyncio"])
def factory(request: pytest.FixtureRequest, real_server: Callable[[str], str]) -> BrokerFactory:
    """RabbitMQ brokers in one bridge mode, on the shared server."""
    amqp_url = real_server("rabbitmq")
    bridge: BridgeMode = request.param
    separator = "&" if "?" in amqp_url else "?"

    def open_broker() -> AbstractAsyncContextManager[Broker]:
        return open_amqp_broker(f"{amqp_url}{separator}bridge={bridge}")

    # On another machine, as far as the suite knows: watch half a second
    # for a message that must not arrive.
    return BrokerFactory(open=open_broker, quiet_period=0.5)


@pytest.mark.parametrize("check", BROKER_CHECKS, ids=lambda check: check.__name__)
async def test_rabbitmq_conforms(check: Check, factory: BrokerFactory) -> None:
    await check(factory)


@pytest.mark.parametrize("check", BROKER_ENGINE_CHECKS, ids=lambda check: check.__name__)
async def test_rabbitmq_under_an_engine(check: Check, factory: BrokerFactory) -> None:
    await check(factory)
