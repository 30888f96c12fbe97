"""examples/console_demo.py runs as docs/console.md says: an engine serves
the console itself, the API reads a failed fan (detail, 304, failed
members), refuses a retry without the token and takes one with it."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


async def test_the_console_example_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(ROOT / "examples" / "console_demo.py"), str(tmp_path / "c.db")],
            capture_stdout=True,
            capture_stderr=True,
        )
    assert done.stderr == b"", done.stderr.decode()
    assert done.stdout.decode().splitlines() == [
        "shipment-1 failed: gather_failed, run 'shipment-1' failed: 4 of 40 fan members failed",
        "detail: 200, fan of 40 at seq 1: {'completed': 36, 'failed': 4}",
        "unchanged: 304",
        "failed members: 4, first page [4, 14]",
        "retry without the token: 401 unauthorized",
        "retry with the token: 202",
        "shipment-1 -> 40 parcels shipped",
    ]


def test_the_page_shows_the_example() -> None:
    page = (ROOT / "docs" / "console.md").read_text()
    assert "examples/console_demo.py" in page
