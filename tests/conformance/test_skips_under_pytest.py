"""How pytest reports a conformance check that does not apply, in an
outside adapter's own test run: a separate pytest (with pytest-trio's
``trio_mode``, as adapters run it) over a test file that parametrizes the
suite as docs/writing-a-broker-adapter.md shows, for a broker without
priorities and a store that takes no announcements."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Final

import pytest

TESTS: Final = textwrap.dedent(
    """
    from contextlib import asynccontextmanager

    import pytest

    import trio_durable as td
    from trio_durable.brokers import MemoryBroker
    from trio_durable.testing.conformance import (
        STORE_CHECKS,
        BrokerFactory,
        check_higher_priorities_are_delivered_first,
        check_queues_are_separate,
    )


    @asynccontextmanager
    async def open_memory():
        broker = MemoryBroker()
        try:
            yield broker
        finally:
            await broker.aclose()


    factory = BrokerFactory(open=open_memory, priorities=False, trio_clock=True)


    @pytest.mark.parametrize(
        "check",
        [check_higher_priorities_are_delivered_first, check_queues_are_separate],
        ids=lambda check: check.__name__,
    )
    async def test_my_broker(check, autojump_clock):
        await check(factory)


    class Plain:
        # A store that is no RunWatch: every call goes to a MemoryStore.
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            if name == "watch":
                raise AttributeError(name)
            return getattr(self.inner, name)


    @asynccontextmanager
    async def open_plain():
        yield Plain(td.MemoryStore())


    [announcements] = [
        check
        for check in STORE_CHECKS
        if check.__name__ == "check_announcements_reach_the_watches_of_other_writers"
    ]


    async def test_my_store():
        await announcements(open_plain)
    """
)

PRIORITIES_REASON: Final = "the broker has no priorities (its BrokerFactory says priorities=False)"
WATCH_REASON: Final = "the store is no RunWatch: it takes no announcements"


def run_pytest(folder: Path, *, plugin: bool) -> str:
    (folder / "test_adapter.py").write_text(TESTS)
    (folder / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    if plugin:
        (folder / "conftest.py").write_text(
            'pytest_plugins = ["trio_durable.testing.pytest_plugin"]\n'
        )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", str(folder)],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def outcomes(output: str) -> dict[str, str]:
    """Each test's outcome, from the short summary of ``-rA``."""
    return {
        name: outcome
        for outcome, name in re.findall(r"^(PASSED|SKIPPED|FAILED) \S*?::(\S+)", output, re.M)
    }


@pytest.mark.parametrize("plugin", [True, False], ids=["with-the-plugin", "without"])
def test_a_check_that_does_not_apply_is_reported_skipped(tmp_path: Path, plugin: bool) -> None:
    output = run_pytest(tmp_path, plugin=plugin)
    assert "1 passed, 2 skipped" in output, output
    # pytest counts skips of one place and reason together: "SKIPPED [2] ...".
    skipped = [
        reason
        for count, reason in re.findall(r"^SKIPPED \[(\d+)\] \S+: (.*)$", output, re.M)
        for _ in range(int(count))
    ]
    if plugin:
        # The reasons, as the checks gave them.
        assert sorted(skipped) == sorted([PRIORITIES_REASON, WATCH_REASON]), output
    else:
        # pytest-trio reports the skip without its reason.
        assert skipped == ["Skipped", "Skipped"], output
    assert outcomes(output) == {"test_my_broker[check_queues_are_separate]": "PASSED"}, output
