"""The end-to-end broker suite: an engine and workers over a broker, with
the workflows in the engine (`_broker_engine`) and remote, decided on the
workers (`_broker_engine_remote`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from ._broker_engine import check_a_mix_of_remote_workflows_settles_exactly_once
from ._broker_engine_remote import (
    check_a_mix_of_workflows_decided_on_workers_settles_exactly_once,
)
from ._broker_factory import BrokerFactory, BrokerMaker, as_factory
from ._outcomes import CheckResult, run_suite

BROKER_ENGINE_CHECKS: Final[
    tuple[Callable[[BrokerFactory | BrokerMaker], Awaitable[None]], ...]
] = (
    check_a_mix_of_remote_workflows_settles_exactly_once,
    check_a_mix_of_workflows_decided_on_workers_settles_exactly_once,
)
"""Every check of the engine suite: parametrize a test over it."""


async def check_broker_engine(factory: BrokerFactory | BrokerMaker) -> list[CheckResult]:
    """Run every check of `BROKER_ENGINE_CHECKS` against ``factory``; the
    first that fails raises.

    Args:
      factory: A `BrokerFactory` (or a plain opener), as for `check_broker`.

    Returns:
      One `CheckResult` per check (``"passed"``: no check of this suite is
      about an optional capability).

    Raises:
      AssertionError: An engine and workers over the broker broke a
        guarantee (the message and the traceback say which).
      RuntimeError: ``factory.trio_clock`` without an autojump `MockClock`.
    """
    return await run_suite(BROKER_ENGINE_CHECKS, as_factory(factory))
