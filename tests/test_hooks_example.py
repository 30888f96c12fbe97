"""examples/hooks_demo.py runs as docs/webhooks-and-breakpoints.md says: a
breakpoint a client set pauses the run before its step until continued,
and ``POST /hooks/{token}`` delivers the webhook once."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


async def test_the_hooks_example_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(ROOT / "examples" / "hooks_demo.py"), str(tmp_path / "h.db")],
            capture_stdout=True,
            capture_stderr=True,
        )
    out = done.stdout.decode()
    assert done.stderr == b"", (out, done.stderr.decode())
    assert re.sub(r"bp-[0-9a-f]+", "bp-ID", out).splitlines() == [
        "paused before 'charge' (seq 1) at bp-ID",
        "webhook: 202 {'delivered': True}",
        "refund-1 -> refunded 30, customer says thanks",
        "again: 409 webhook_used",
    ]


def test_the_page_shows_the_example() -> None:
    page = (ROOT / "docs" / "webhooks-and-breakpoints.md").read_text()
    assert "examples/hooks_demo.py" in page
