"""bench/compare.py: the ratio of two files of bench figures, case by case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_processes import WITHIN

BENCH = Path(__file__).parent.parent / "bench"


def _write(path: Path, figures: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(f) + "\n" for f in figures))
    return path


def _fig(
    case: str, value: float, better: str = "higher", bench: str = "bench_engine"
) -> dict[str, Any]:
    return {
        "bench": bench,
        "case": case,
        "value": value,
        "unit": "runs/s" if better == "higher" else "s",
        "better": better,
        "commit": "abc1234",
        "date": "2026-12-05T01:00:00+00:00",
        "host": "h",
    }


def _compare(*args: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=WITHIN,
    )


def test_ratios_verdicts_and_medians(tmp_path: Path) -> None:
    old = _write(
        tmp_path / "old.jsonl",
        [
            _fig("sqlite.sequential", 500.0),
            _fig("sqlite.fan_children", 0.4, "lower"),
            _fig("sqlite.concurrent", 2000.0),
            _fig("only.old", 1.0),
            # Three repetitions: the median (100) counts, not the mean.
            _fig("raw.nats_round_trips", 100.0, bench="bench_nats"),
            _fig("raw.nats_round_trips", 90.0, bench="bench_nats"),
            _fig("raw.nats_round_trips", 400.0, bench="bench_nats"),
        ],
    )
    new = _write(
        tmp_path / "new.jsonl",
        [
            _fig("sqlite.sequential", 1000.0),
            _fig("sqlite.fan_children", 0.2, "lower"),
            _fig("sqlite.concurrent", 1500.0),
            _fig("raw.nats_round_trips", 100.0, bench="bench_nats"),
            _fig("only.new", 1.0),
        ],
    )
    done = _compare(old, new)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line.split() for line in done.stdout.splitlines()[1:5]}
    assert done.stdout.splitlines()[0].split() == ["bench", "case", "old", "new", "unit", "new/old"]
    assert rows["sqlite.sequential"] == [
        "bench_engine", "sqlite.sequential", "500", "1,000", "runs/s", "2.00x", "better",
    ]  # fmt: skip
    # Lower is better: half the time is better, though the ratio is 0.5.
    assert rows["sqlite.fan_children"][2:] == ["0.4", "0.2", "s", "0.50x", "better"]
    assert rows["sqlite.concurrent"][2:] == ["2,000", "1,500", "runs/s", "0.75x", "worse"]
    assert rows["raw.nats_round_trips"][2:] == ["100", "100", "runs/s", "1.00x", "same"]
    assert "only.old" not in done.stdout
    assert "only.new" not in done.stdout
    assert "4 cases in both: 2 better, 1 worse" in done.stdout
    assert f"only in {old}: 1; only in {new}: 1" in done.stdout


def test_nothing_in_common_still_exits_zero(tmp_path: Path) -> None:
    old = _write(tmp_path / "old.jsonl", [_fig("a", 1.0)])
    new = _write(tmp_path / "new.jsonl", [_fig("b", 1.0)])
    done = _compare(old, new)
    assert done.returncode == 0
    assert "no case is present in both files" in done.stdout


def test_unreadable_files_are_a_clear_error(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.jsonl", [_fig("a", 1.0)])
    missing = tmp_path / "missing.jsonl"
    done = _compare(missing, good)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"compare.py: cannot read {missing}:")

    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_fig("a", 1.0)) + "\nnot json\n")
    done = _compare(good, broken)
    assert done.returncode == 2
    assert done.stderr.startswith(f"compare.py: {broken}:2: not JSON")

    no_value = _write(tmp_path / "no_value.jsonl", [{"bench": "b", "case": "c"}])
    done = _compare(good, no_value)
    assert done.returncode == 2
    assert done.stderr.strip() == f"compare.py: {no_value}:1: no value key"
