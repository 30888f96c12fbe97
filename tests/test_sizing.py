"""bench/sizing.py's model on fixed inputs, bench/bench_ops.py's counts
(what one workflow, step, timer and fan member cost the store and the
broker, exactly: counts, not speed, so a change in them is a change in the
engine), and the commands of docs/operations.md's "Sizing", run."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import bench_ops  # noqa: E402
import sizing  # noqa: E402
from sizing import Inputs, Verdict, project, saturates_first  # noqa: E402

# -- the model -----------------------------------------------------------------------

FIXED = Inputs(
    engine_rate=1000.0,
    engine_ms=1.0,
    server_ms=0.5,
    transactions=0.1,
    commits_per_s=300.0,
    primary_cores=8,
    pool_size=4,
    max_connections=100,
    reserved_connections=3,
)


def test_each_term_of_the_projection() -> None:
    row = project(FIXED, 3)
    assert row.ceilings == {
        "engines": 3000.0,
        "primary CPU": 16000.0,  # 1000 * 8 cores / 0.5 ms
        "WAL commits": 36000.0,  # 300 commits/s * 12 pool connections / 0.1
        "broker": math.inf,
        "shared host": math.inf,
    }
    assert (row.throughput, row.bound_by) == (3000.0, "engines")
    # 5 connections per engine: the pool of 4 and the store's watch.
    assert row.connections == 15 - 97
    assert row.fits


def test_the_primary_cpu_saturates_first() -> None:
    assert saturates_first(FIXED) == Verdict("primary CPU", 17)
    row = project(FIXED, 17)
    assert (row.throughput, row.bound_by) == (16000.0, "primary CPU")


def test_connections_saturate_first_on_a_large_primary() -> None:
    large = attrs.evolve(FIXED, primary_cores=64)
    # 19 engines hold 95 of the 97 slots; the 20th's pool does not fit.
    assert saturates_first(large) == Verdict("connections", 20)
    assert not project(large, 20).fits


def test_the_broker_saturates_first_with_remote_steps() -> None:
    remote = attrs.evolve(FIXED, remote_steps=2, broker_round_trips=9000)
    assert project(remote, 4).ceilings["broker"] == 4500.0
    assert saturates_first(remote) == Verdict("broker", 5)


def test_wal_commits_saturate_first_when_each_workflow_commits_alone() -> None:
    alone = attrs.evolve(FIXED, transactions=2.0, server_ms=0.1)
    # 300 commits/s * 4 connections / 2 transactions: 600 workflows/s.
    assert saturates_first(alone) == Verdict("WAL commits", 1)
    assert project(alone, 2).throughput == 1200.0


def test_nothing_saturates_when_the_primary_is_free() -> None:
    free = attrs.evolve(FIXED, server_ms=0.0, commits_per_s=0.0, max_connections=1000)
    assert saturates_first(free) == Verdict("engines", None)
    assert project(free, 100).throughput == 100_000.0


def test_the_shared_host_check() -> None:
    host = attrs.evolve(FIXED, host_cores=2)
    # 2 cores / (1 ms + 0.5 ms): 1,333 workflows/s for any fleet.
    assert project(host, 1).throughput == 1000.0
    assert project(host, 2).throughput == pytest.approx(1333.33, abs=0.01)
    assert sizing.check_lines(host, 1.5)[1] == (
        "  measured (bench_postgres, postgres.two_engines_ratio): 1.50x; projected / measured 0.89"
    )


def test_steady_transactions() -> None:
    found = {"engine_rate": 1000.0, "transactions": 0.002, "transactions_alone": 2.0}
    # Each engine commits at most pool_size * F times a second.
    assert sizing.steady_transactions({**found, "commits_per_s": 100.0}, 4) == 0.4
    assert sizing.steady_transactions({**found, "commits_per_s": 1000.0}, 4) == 2.0
    assert sizing.steady_transactions(found, 4) == 2.0


def _figure(bench: str, case: str, value: float) -> dict[str, Any]:
    return {"bench": bench, "case": case, "value": value, "unit": "", "better": "lower"}


def test_the_command_reads_figures_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "figures.jsonl"
    figures = [
        _figure("bench_postgres", "postgres.concurrent", 900.0),
        _figure("bench_postgres", "postgres.concurrent", 1000.0),
        _figure("bench_postgres", "postgres.concurrent", 1100.0),
        _figure("bench_postgres", "postgres.concurrent.engine_cpu", 1.0),
        _figure("bench_postgres", "postgres.concurrent.server_cpu", 0.5),
        _figure("bench_postgres", "postgres.two_engines_ratio", 1.9),
        _figure("bench_ops", "ops.postgres.server_ms_per_transaction", 1.0),
        _figure("bench_ops", "ops.postgres.server_ms_per_op", 0.05),
        _figure("bench_ops", "ops.postgres.load.transactions", 0.1),
        _figure("bench_ops", "ops.postgres.load.ops", 8.0),
        _figure("bench_ops", "ops.postgres.commits_per_s", 300.0),
    ]
    path.write_text("".join(json.dumps(f) + "\n" for f in figures))
    assert sizing.main(["--figures", str(path), "--primary-cores", "8", "--engines", "1,17"]) == 0
    out = capsys.readouterr().out
    # s = 1.0 ms * 0.1 + 0.05 ms * 8 = 0.5 ms: as FIXED.
    assert "s 0.5000 ms" in out
    assert "| 17 | 17,000 | 16,000 | 204,000 | 16,000 | primary CPU | 85 of 97 |" in out
    assert "saturates first: primary CPU, at 17 engines" in out
    assert "ratio 1.33x" in out
    assert "measured (bench_postgres, postgres.two_engines_ratio): 1.90x" in out


def test_the_command_refuses_files_without_the_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "figures.jsonl"
    path.write_text(json.dumps(_figure("bench_engine", "sqlite.sequential", 1.0)) + "\n")
    assert sizing.main(["--figures", str(path)]) == 2
    assert "no engine_rate, engine_ms in the figures" in capsys.readouterr().err
    assert sizing.main(["--figures", str(tmp_path / "missing.jsonl")]) == 2


# -- the counts ----------------------------------------------------------------------


async def _costs(store: str) -> dict[str, dict[str, float]]:
    async with bench_ops.counted_engine(store, td.MemoryBroker()) as (engine, broker):
        return await bench_ops.unit_costs(engine, broker, 2)


def _store_counts(costs: dict[str, float]) -> tuple[float, ...]:
    return tuple(costs[key] for key in bench_ops.COUNTERS)


# (ops, batches, transactions, rows read) of a one-local-step workflow, and
# what a child fan's member adds: ops, batches, transactions. The SQL stores
# write one more op per run (the announcement of its start, for other
# engines' watches), read nothing (a start by id writes at once, and the
# result of a run just started here waits without a read), and commit a
# child fan's batches together (group commit); the memory store reads the
# run's row once, at its result, and commits each batch alone.
PER_STORE = {
    "memory": ((3, 2, 2, 1), (4.01, 1.01, 1.01)),
    "sqlite": ((4, 2, 2, 0), (5.01, 1.01, 0.01)),
}


@pytest.mark.parametrize("store", sorted(PER_STORE))
async def test_operations_per_unit(
    store: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    url = "memory://" if store == "memory" else f"sqlite:///{tmp_path / 'ops.db'}"
    found = await _costs(url)
    one_step_workflow, child_member = PER_STORE[store]
    # A one-local-step workflow: its start (the run, leased) and its end
    # (the step's checkpoint, the run's output): two transactions.
    assert _store_counts(found["one_step_workflow"]) == one_step_workflow
    # A local step adds its checkpoint to the turn's last write: one op.
    assert _store_counts(found["local_step"]) == (1, 0, 0, 0)
    ops, batches, transactions, rows = one_step_workflow
    assert _store_counts(found["workflow"]) == (ops - 1, batches, transactions, rows)
    # A remote step: its checkpoint with the suspend, the settle, the next
    # turn, which reads the run's checkpoints so far (7.5 on average for the
    # steps 2 to 11 of a run: rows read grow with a run's length).
    assert _store_counts(found["remote_step"]) == (3, 3, 3, 7.5)
    # A timer: its checkpoint with the suspend, then the turn that wakes.
    assert _store_counts(found["timer"]) == (3, 2, 2, 7.5)
    # Fan members: linear, one row read each, written in batches.
    child = found["child_member"]
    assert (child["ops"], child["batches"], child["transactions"]) == child_member
    assert child["rows_read"] == 1
    step = found["step_member"]
    assert (step["ops"], step["rows_read"]) == (2, 1)
    assert step["batches"] == step["transactions"] == 0.06


async def test_broker_messages_per_remote_step(autojump_clock: trio.testing.MockClock) -> None:
    found = await _costs("memory://")
    for unit in ("remote_step", "step_member"):
        # The task out, the result back; each delivered once and acked.
        assert {key: found[unit][key] for key in bench_ops.MESSAGES} == {
            "tasks": 1,
            "results": 1,
            "delivered": 2,
            "acked": 2,
        }, unit
    assert found["local_step"]["tasks"] == 0


def test_server_costs_fit() -> None:
    points = [
        {"transactions": 2.0, "ops": 6.0, "server_ms": 2.6},
        {"transactions": 0.0, "ops": 6.0, "server_ms": 0.6},
    ]
    a, b = bench_ops.fit_server_costs(points)
    assert a == pytest.approx(1.0)
    assert b == pytest.approx(0.1)


# -- the commands of docs/operations.md, "Sizing" ------------------------------------

ROOT = BENCH.parent


def _section_commands() -> list[str]:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text[text.index("\n## Sizing\n") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip().startswith("python bench/")
    ]


COMMANDS = _section_commands()
FILE_COMMANDS = [c for c in COMMANDS if "figures.jsonl" in c]
# Appended to the page's command (the last of an option wins): the same
# command at a size a test run affords.
SMALLER = {
    "bench/bench_ops.py": ["--repeat", "1", "--concurrent", "100", "--sequential", "20"],
    "bench/bench_postgres.py": ["--rounds", "1", "--concurrent", "200"],
}


def _run(command: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    words = command.split()
    script = words[1]
    argv = [sys.executable, str(ROOT / script), *words[2:], *SMALLER.get(script, [])]
    paths = [str(ROOT / "src"), str(BENCH), os.environ.get("PYTHONPATH", "")]
    done = subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in paths if p)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_section_shows_these_commands() -> None:
    assert COMMANDS == [
        "python bench/bench_ops.py --json figures.jsonl",
        "python bench/bench_postgres.py --latency 0 --json figures.jsonl",
        "python bench/sizing.py --figures figures.jsonl",
        "python bench/sizing.py --figures figures.jsonl --steady --primary-cores 32"
        " --max-connections 500",
        "python bench/sizing.py --steady",
        "python bench/sizing.py --remote-steps 1 --broker-round-trips 5953",
    ]


def test_the_projections_the_section_gives(tmp_path: Path) -> None:
    # The section's table comes from the measured figures (the defaults).
    assert "saturates first: connections, at 20 engines" in _run("python bench/sizing.py", tmp_path)
    steady = _run(COMMANDS[4], tmp_path)
    assert "saturates first: primary CPU, at 8 engines" in steady
    assert "| 8 | 9,280 | 8,553 | 9,280 | 8,553 | primary CPU | 40 of 97 |" in steady
    assert "projected 1 engine 1,160/s, 2 engines 2,313/s, ratio 1.99x" in steady
    assert "1.82x; projected / measured 1.10" in steady
    broker = _run(COMMANDS[5], tmp_path)
    assert "saturates first: broker, at 6 engines" in broker
    larger = _run(
        "python bench/sizing.py --steady --primary-cores 32 --max-connections 500", tmp_path
    )
    assert "saturates first: primary CPU, at 15 engines" in larger
    assert "| 16 | 18,560 | 17,106 |" in larger


def test_the_commands_on_your_own_figures(
    tmp_path: Path, real_server: Callable[[str], str]
) -> None:
    env = {"POSTGRES_URL": real_server("postgres")}
    outputs = [_run(command, tmp_path, env) for command in FILE_COMMANDS]
    figures = sizing.figures_from([tmp_path / "figures.jsonl"])
    [connections] = [
        json.loads(line)
        for line in (tmp_path / "figures.jsonl").read_text().splitlines()
        if '"ops.postgres.connections"' in line
    ]
    # The pool (4 at most) and the watch's connection: never more.
    assert 2 <= connections["value"] <= connections["pool_size"] + 1 == 5
    assert {"engine_rate", "two_engines_ratio", "transactions", "commits_per_s"} <= figures.keys()
    for projection in outputs[2:]:
        assert "saturates first:" in projection
        assert "measured (bench_postgres, postgres.two_engines_ratio)" in projection
