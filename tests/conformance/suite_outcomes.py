"""What the tests of broken implementations assert about a suite's report:
that the checks meant to catch a fault failed, and failed because they
checked (an assertion, or a wait for something that never came), not
because the broken implementation crashed them."""

from __future__ import annotations

from collections.abc import Iterable

import trio

from trio_durable.testing.conformance import CheckResult


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def detected(error: BaseException | None) -> bool:
    """Whether ``error`` is a check noticing a fault: an `AssertionError`, or
    a `trio.TooSlowError` of something that must arrive (alone or in groups)."""
    if error is None:
        return False
    return all(isinstance(leaf, AssertionError | trio.TooSlowError) for leaf in _leaves(error))


def assert_caught(results: Iterable[CheckResult], expected: Iterable[str]) -> None:
    """Every check named in ``expected`` failed by detecting the fault."""
    by_name = {result.check: result for result in results}
    missing = sorted(set(expected) - set(by_name))
    assert not missing, f"not run: {missing}"
    for name in expected:
        result = by_name[name]
        assert result.outcome == "failed", f"{name} did not notice the fault: {result}"
        assert detected(result.error), f"{name} crashed instead of checking: {result.reason}"
