"""The per-test time limit (``tests/time_limit.py``): a test past its limit,
Trio or not, fails alone, with every thread's stack printed, and the tests
after it run as usual (pytest-timeout's SIGALRM would leave Trio's run
loop half-torn-down for every later test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_processes import TESTS, WITHIN

PROBE = """
import threading
import time

import pytest
import trio


@pytest.mark.timeout(1)
async def test_a_trio_test_that_hangs() -> None:
    await trio.sleep_forever()


@pytest.mark.timeout(1)
def test_a_plain_test_that_hangs() -> None:
    time.sleep(3600)


async def test_a_trio_test_after_them() -> None:
    await trio.sleep(0)


def test_a_plain_test_after_them() -> None:
    pass


@pytest.mark.timeout(60)
def test_a_test_within_its_limit() -> None:
    pass


def test_no_earlier_test_leaves_its_time_limit_running() -> None:
    names = [t.name for t in threading.enumerate()]
    assert [n for n in names if n.startswith(("time limit of", "grace of"))] == []
"""


def test_a_test_past_its_limit_fails_alone(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "time_limit", "-p", "no:cacheprovider"),
            *("-o", "trio_mode=true", "-rA", str(tmp_path / "test_probe.py")),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(TESTS), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=WITHIN,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    for test in ("a_trio_test_that_hangs", "a_plain_test_that_hangs"):
        assert (
            f"FAILED test_probe.py::test_{test} - Failed: Timeout: ran past its limit of 1 s" in out
        )
        assert f"+++ test_probe.py::test_{test} ran past its limit of 1 s" in out
    for test in (
        "a_trio_test_after_them",
        "a_plain_test_after_them",
        "a_test_within_its_limit",
        "no_earlier_test_leaves_its_time_limit_running",
    ):
        assert f"PASSED test_probe.py::test_{test}" in out
    assert "2 failed, 4 passed" in out
