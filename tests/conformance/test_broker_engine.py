"""The end-to-end broker suite (`BROKER_ENGINE_CHECKS` of
`trio_durable.testing.conformance`) against memory brokers: a clean one, and
ones that duplicate, delay and reorder messages (`BrokerFaults`), for a few
seeds. They live on Trio's clock, so they run under the autojump clock and
the suite asserts exact times. The adapters in ``brokers/`` run the same
checks against their own servers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import pytest
import trio
import trio.testing

from trio_durable.brokers import Broker, BrokerFaults, MemoryBroker
from trio_durable.testing.conformance import BROKER_ENGINE_CHECKS, BrokerFactory

SEEDS: Final = (1, 2, 3)


def _memory(faults: BrokerFaults | None = None) -> BrokerFactory:
    @asynccontextmanager
    async def open_memory() -> AsyncIterator[Broker]:
        broker = MemoryBroker(faults)
        try:
            yield broker
        finally:
            await broker.aclose()

    return BrokerFactory(open=open_memory, trio_clock=True)


ENGINE_BROKER_FACTORIES: Final = [
    pytest.param(_memory(), id="memory"),
    *(
        pytest.param(_memory(faults), id=f"{name}-{seed}")
        for seed in SEEDS
        for name, faults in (
            ("duplicate", BrokerFaults(duplicate=0.3, seed=seed)),
            ("delay", BrokerFaults(delay=5.0, seed=seed)),
            ("reorder", BrokerFaults(reorder=True, seed=seed)),
            ("all", BrokerFaults(duplicate=0.3, delay=5.0, reorder=True, seed=seed)),
        )
    ),
]


@pytest.mark.parametrize("factory", ENGINE_BROKER_FACTORIES)
@pytest.mark.parametrize("check", BROKER_ENGINE_CHECKS, ids=lambda check: check.__name__)
async def test_memory_brokers_under_an_engine(
    check: Callable[[BrokerFactory], Awaitable[None]],
    factory: BrokerFactory,
    autojump_clock: trio.testing.MockClock,
) -> None:
    await check(factory)


async def test_a_broker_on_trios_clock_needs_the_autojump_clock() -> None:
    # Under the real clock a ten-second step would take ten seconds and an
    # exact time would be luck: refused with a clear error instead.
    for check in BROKER_ENGINE_CHECKS:
        with pytest.raises(RuntimeError, match=r"MockClock\(autojump_threshold=0\)"):
            await check(_memory())
