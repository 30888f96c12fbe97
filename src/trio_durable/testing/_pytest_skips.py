"""A pytest hook that keeps the reason of a skip raised inside a Trio test.

pytest-trio (0.8) runs a test in a nursery, so a ``pytest.skip(reason)``
in the test reaches it inside an exception group; it reports the skip by
raising a bare ``pytest.skip()``, and the reason is lost (the summary says
"Skipped"). This hook finds the original skip (the bare one's context) and
skips again with its reason. The conformance suites skip this way for a
capability the implementation lacks (``trio_durable.testing.conformance``).
"""

from __future__ import annotations

from collections.abc import Generator

import pytest


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            found.extend(_leaves(inner))
        else:
            found.append(inner)
    return found


def _dropped_reason(skipped: BaseException) -> str | None:
    """The reason of the one skip a reasonless ``skipped`` stands for, if
    it was raised while an exception group holding only that skip was
    handled (as pytest-trio does)."""
    if getattr(skipped, "msg", None):
        return None
    group = skipped.__context__
    if not isinstance(group, BaseExceptionGroup):
        return None
    leaves = _leaves(group)
    if len(leaves) != 1 or not isinstance(leaves[0], pytest.skip.Exception):
        return None
    return leaves[0].msg or None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """Run the test; a skip whose reason pytest-trio dropped is skipped
    again with that reason."""
    try:
        return (yield)
    except pytest.skip.Exception as skipped:
        reason = _dropped_reason(skipped)
        if reason is None:
            raise
        pytest.skip(reason)
