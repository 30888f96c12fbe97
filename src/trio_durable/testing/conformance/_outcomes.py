"""How a suite's checks report: passed, failed, or skipped.

A check passes by returning and fails by raising (`AssertionError`, or
`trio.TooSlowError` when something that must arrive does not). A check about
a capability the implementation says it lacks (a broker without priorities,
a store that takes no announcements) checks nothing, and says so: it is
*skipped*, never passed. Under pytest it calls ``pytest.skip(reason)``, so
the test shows as SKIPPED with the reason; elsewhere, and inside
`run_checks` and the ``check_...`` runners, it raises `CheckSkipped`, which
`run_checks` reports as a `CheckResult` of outcome ``"skipped"``.
"""

from __future__ import annotations

import contextvars
import os
import sys
import unittest
from collections.abc import Awaitable, Callable, Iterable
from typing import Literal, NoReturn, TypeAlias, TypeVar, final

import attrs

F = TypeVar("F")

Outcome: TypeAlias = Literal["passed", "failed", "skipped"]
"""What one check said: it held, it did not, or it did not apply."""


class CheckSkipped(unittest.SkipTest):
    """A check did not apply to the implementation under test: the factory
    or the implementation says it lacks the capability the check is about.

    Raised by a check outside pytest (and always inside `run_checks` and the
    ``check_...`` runners, which report it as a skipped `CheckResult`); a
    `unittest.SkipTest`, so unittest reports it as a skip too. Under pytest a
    check calls ``pytest.skip`` instead. Never raised for a failure: a check
    that ran and found the implementation wrong raises `AssertionError` (or
    `trio.TooSlowError`).

    Attributes:
      reason: What the implementation lacks, and which flag or protocol
        said so.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@final
@attrs.frozen(kw_only=True)
class CheckResult:
    """The outcome of one check, as `run_checks` reports it.

    Attributes:
      check: The check's name (its function's ``__name__``).
      outcome: ``"passed"``, ``"failed"`` or ``"skipped"``.
      reason: Why it was skipped, or the failure as text (its exception's
        type and message); empty when it passed.
      error: The exception a failed check raised (None otherwise).
    """

    check: str
    outcome: Outcome
    reason: str = ""
    error: Exception | None = attrs.field(default=None, eq=False, repr=False)


_reporting_skips: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "trio_durable_conformance_reporting_skips", default=False
)
"""True while `run_checks` runs a check: it reports skips itself."""


def skip(reason: str) -> NoReturn:
    """End the running check as skipped, for ``reason``.

    Under a running pytest test (and not inside `run_checks`), through
    ``pytest.skip(reason)``; otherwise by raising `CheckSkipped`.
    """
    pytest = sys.modules.get("pytest")
    if pytest is not None and "PYTEST_CURRENT_TEST" in os.environ and not _reporting_skips.get():
        pytest.skip(reason)
    raise CheckSkipped(reason)


def _describe(error: BaseException) -> str:
    text = str(error).strip()
    first_line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {first_line}" if first_line else type(error).__name__


async def run_check(check: Callable[[F], Awaitable[None]], factory: F) -> CheckResult:
    """Run one check against ``factory`` and say what it found.

    Returns:
      A `CheckResult` that passed, was skipped (the check raised
      `CheckSkipped`), or failed (it raised any other `Exception`, kept in
      `CheckResult.error`).

    Raises:
      BaseException: What is not an `Exception` (cancellation,
        KeyboardInterrupt) goes through.
    """
    name = getattr(check, "__name__", repr(check))
    token = _reporting_skips.set(True)
    try:
        await check(factory)
    except CheckSkipped as skipped:
        return CheckResult(check=name, outcome="skipped", reason=skipped.reason)
    except Exception as error:
        return CheckResult(check=name, outcome="failed", reason=_describe(error), error=error)
    finally:
        _reporting_skips.reset(token)
    return CheckResult(check=name, outcome="passed")


async def run_checks(
    checks: Iterable[Callable[[F], Awaitable[None]]], factory: F
) -> list[CheckResult]:
    """Run every check of ``checks`` against ``factory``, one after another,
    whatever the earlier ones found, and report each.

    For a report of a whole suite (``await run_checks(BROKER_CHECKS,
    factory)``) where a parametrized pytest test does not fit: a script, a
    CI job of an adapter's own, a notebook. A check that does not apply is
    reported ``"skipped"`` with its reason, never ``"passed"``.

    Args:
      checks: Checks of one suite (`BROKER_CHECKS`, `STORE_CHECKS`, ...,
        or some of them).
      factory: What each check is given (a `BrokerFactory`, a store opener,
        ...).

    Returns:
      One `CheckResult` per check, in the order of ``checks``.
    """
    return [await run_check(check, factory) for check in checks]


async def run_suite(
    checks: Iterable[Callable[[F], Awaitable[None]]], factory: F
) -> list[CheckResult]:
    """What the ``check_...`` runners do: every check in turn, stopping at
    the first failure and raising its exception; the results of the checks
    that passed or were skipped otherwise."""
    results: list[CheckResult] = []
    for check in checks:
        result = await run_check(check, factory)
        if result.error is not None:
            raise result.error
        results.append(result)
    return results
