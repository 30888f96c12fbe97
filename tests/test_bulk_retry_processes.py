"""The Done-when of bulk actions: 10,000 failed runs retried by
``runs retry --code`` in a process of its own, interrupted with SIGINT
midway, their retried runs failing again with the same code, and the same
command run again: each run is retried exactly once, and no run of another
code. bench/bench_bulk_retry.py does it and prints the counts (and the
time docs/operations.md quotes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench" / "bench_bulk_retry.py"


def test_ten_thousand_runs_retried_exactly_once_across_a_sigint(tmp_path: Path) -> None:
    figures = tmp_path / "figures.jsonl"
    done = subprocess.run(
        [sys.executable, str(BENCH), "--runs", "10000", "--json", str(figures)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=BENCH.parent,
    )
    assert done.returncode == 0, done.stderr
    found = {
        line["case"].removeprefix("sqlite.bulk_retry."): line["value"]
        for line in map(json.loads, figures.read_text().splitlines())
    }
    assert found["first_exit"] == 130, done.stderr
    assert found["second_exit"] == 0, done.stderr
    # Stopped midway: the second command had runs left to retry.
    assert 0 < found["interrupted_after"] < 10_000
    assert (found["retried_once"], found["retried_twice"], found["retried_others"]) == (
        10_000,
        0,
        0,
    )
