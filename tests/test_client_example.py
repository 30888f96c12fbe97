"""examples/client_demo.py runs as docs/client.md says: a client in this
process starts, signals and cancels runs that an engine in another process
runs, and each write reaches the engine at once."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]


async def test_the_client_example_runs(tmp_path: Path) -> None:
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(ROOT / "examples" / "client_demo.py"), str(tmp_path / "c.db")],
            capture_stdout=True,
            capture_stderr=True,
        )
    out = done.stdout.decode()
    assert done.stderr == b"", (out, done.stderr.decode())
    assert re.sub(r"\d+\.\d+ s", "T s", out).splitlines() == [
        "started req-1 and req-2 (pending)",
        "req-1 -> 'laptop: approved'",
        "  signal to result: T s",
        "req-2 -> cancelled",
        "req-1: completed (workflow approval v1)",
        "req-2: cancelled (workflow approval v1)",
        "refused: run 'req-1' is completed; it takes no signals",
    ]
    latency = float(re.findall(r"signal to result: (\d+\.\d+) s", out)[0])
    # Far below a lease (30 s) or a scan (60 s), which it took before.
    assert latency < 10.0


def test_the_client_page_shows_the_example() -> None:
    page = (ROOT / "docs" / "client.md").read_text()
    assert "examples/client_demo.py" in page
