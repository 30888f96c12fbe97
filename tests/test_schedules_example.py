"""examples/schedules_demo.py runs as docs/schedules.md says: two engines on
a SQLite file tick a schedule through a DST change and a restart of both,
and a client pauses, triggers and resumes it."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


async def test_the_schedules_example_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(ROOT / "examples" / "schedules_demo.py"), str(tmp_path / "s.db")],
            capture_stdout=True,
            capture_stderr=True,
        )
    out = done.stdout.decode()
    assert done.stderr == b"", (out, done.stderr.decode())
    assert out.splitlines() == [
        "declared night-shift: next tick 00:00 UTC",
        "every engine stops at 00:40 UTC",
        "engines back at 01:20 UTC",
        "triggered night-shift@trigger-1-2026-03-29T01:40:00.000Z: report for ops",
        "resumed: next tick 23:30 UTC",
        "night-shift@2026-03-29T00:00:00Z started 00:00 UTC, completed",
        "night-shift@2026-03-29T00:30:00Z started 00:30 UTC, completed",
        # Missed while every engine was down; started when they came back.
        "night-shift@2026-03-29T01:00:00Z started 01:20 UTC, completed",
        "night-shift@2026-03-29T01:30:00Z started 01:30 UTC, completed",
        "night-shift@trigger-1-2026-03-29T01:40:00.000Z started 01:40 UTC, completed",
        "night-shift@2026-03-29T23:30:00Z started 23:30 UTC, completed",
        "started 5, skipped 0, missed 0, triggered 1",
    ]


def test_the_page_shows_the_example() -> None:
    page = (ROOT / "docs" / "schedules.md").read_text()
    assert "examples/schedules_demo.py" in page
