"""The public conformance suites (`trio_durable.testing.conformance`)
against NATS JetStream, in both bridge modes: the broker protocol, and an
engine with workers end to end.

NATS has no priorities (``docs/nats.md``): its factory says so, so the
priority check reports SKIPPED, and it runs once more with a factory that
claims them, as a strict expected failure, so the day it passes is noticed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import attrs
import pytest

from trio_durable.brokers import BridgeMode, Broker
from trio_durable.testing.conformance import (
    BROKER_CHECKS,
    BROKER_ENGINE_CHECKS,
    BrokerFactory,
    check_higher_priorities_are_delivered_first,
)
from trio_durable_nats import open_nats_broker

Check = Callable[[BrokerFactory], Awaitable[None]]


@pytest.fixture(params=["thread", "trio-asyncio"])
def factory(request: pytest.FixtureRequest, real_server: Callable[[str], str]) -> BrokerFactory:
    """NATS brokers in one bridge mode, on the shared server."""
    nats_url = real_server("nats")
    bridge: BridgeMode = request.param
    separator = "&" if "?" in nats_url else "?"

    def open_broker() -> AbstractAsyncContextManager[Broker]:
        return open_nats_broker(f"{nats_url}{separator}bridge={bridge}")

    # No priorities; a short TTL that is not a whole number of seconds (the
    # server's per-message TTL is); the default quiet period.
    return BrokerFactory(open=open_broker, priorities=False, short_ttl=1.5)


@pytest.mark.parametrize("check", BROKER_CHECKS, ids=lambda check: check.__name__)
async def test_nats_conforms(check: Check, factory: BrokerFactory) -> None:
    await check(factory)


@pytest.mark.xfail(reason="NATS delivers in order of arrival: no priorities", strict=True)
async def test_nats_has_no_priorities(factory: BrokerFactory) -> None:
    await check_higher_priorities_are_delivered_first(attrs.evolve(factory, priorities=True))


@pytest.mark.parametrize("check", BROKER_ENGINE_CHECKS, ids=lambda check: check.__name__)
async def test_nats_under_an_engine(check: Check, factory: BrokerFactory) -> None:
    await check(factory)
