"""bench/all.py: the table from a figures file, and benches skipped with a
reason when their server does not answer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_processes import WITHIN

BENCH = Path(__file__).parent.parent / "bench"


def _fig(bench: str, case: str, value: float, unit: str, better: str = "higher") -> dict[str, Any]:
    return {"bench": bench, "case": case, "value": value, "unit": unit, "better": better}


def _all(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / "all.py"), *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=WITHIN,
    )


def test_table_with_ratios_to_dbos_and_the_raw_clients(tmp_path: Path) -> None:
    figures = [
        _fig("bench_engine", "sqlite.sequential", 500.0, "workflows/s"),
        _fig("bench_dbos", "dbos.sqlite.sequential", 50.0, "workflows/s"),
        _fig("bench_engine", "sqlite.fan_children", 0.5, "s", "lower"),
        _fig("bench_dbos", "dbos.sqlite.fan_children", 15.0, "s", "lower"),
        _fig("bench_amqp", "raw.amqp_round_trips", 1000.0, "round trips/s"),
        _fig("bench_amqp", "amqp.fan", 950.0, "steps/s"),
        _fig("bench_amqp", "amqp.fan.of_raw", 95.0, "% of raw"),
        _fig("bench_amqp", "amqp.runs", 500.0, "steps/s"),
        _fig("bench_amqp", "amqp.runs.of_raw", 50.0, "% of raw"),
        _fig("bench_postgres", "postgres.two_engines_ratio", 1.8, "x"),
    ]
    path = tmp_path / "figures.jsonl"
    path.write_text("".join(json.dumps(f) + "\n" for f in figures))
    done = _all("--table", str(path))
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[0].lstrip("| "): line for line in done.stdout.splitlines()}
    assert rows["SQLite, 3-step workflows one after another"] == (
        "| SQLite, 3-step workflows one after another | DBOS 50/s | 500/s | 10.0x DBOS | >= 1,000/s |"
    )
    # Lower is better for a wall time: the ratio is DBOS's time over ours.
    assert "| DBOS 15.00 s | 0.50 s | 30.0x DBOS |" in rows["SQLite, fan of 1,000 children joined"]
    assert (
        "| raw aio-pika 1,000/s | 950/s / 500/s | 95% / 50% of raw |"
        in rows["RabbitMQ: fan / runs"]
    )
    assert "| 1.80x |" in rows["PostgreSQL, 2 engines vs 1"]
    assert "| DBOS | n/a |" in rows["SQLite, 2,000 started one by one, then awaited"]


def test_a_bench_whose_server_does_not_answer_is_skipped(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port once the probe is closed.
    env = {**os.environ, "POSTGRES_URL": f"postgresql://postgres@127.0.0.1:{port}/x"}
    out = tmp_path / "figures.jsonl"
    done = _all("--only", "postgres", "--lock", "", "--json", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert (
        f"skipped: no server answers at $POSTGRES_URL (postgresql://postgres@127.0.0.1:{port}/x)"
        in done.stdout
    )
    assert "postgres: skipped (no server answers" in done.stdout
    assert not out.exists()


def test_unknown_bench_names_are_refused() -> None:
    done = _all("--only", "nope")
    assert done.returncode == 2
    assert "unknown bench ['nope']" in done.stderr
