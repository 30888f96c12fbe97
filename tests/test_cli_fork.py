"""``trio-durable fork RUN --from-seq N`` and ``trio-durable retry RUN
--from-seq N`` (also under ``runs``) on a SQLite file holding runs of
examples/ops_app.py: what they write and print, and the bad input each
refuses with its exit status and nothing written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio

import trio_durable as td
from cli_processes import ROOT
from test_cli import invoke, one_error_line
from trio_durable._cli._apps import load_app

APP = f"{ROOT}/examples/ops_app.py:app"


def _dump(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


async def _fill(store: str, flag: Path) -> None:
    """needs-1 failed (its file was missing), fan-1 (a fan of 3) completed."""
    async with td.open_engine(load_app(APP), store=store, serve=["ops"]) as engine:
        await engine.start("needs_file", str(flag), run_id="needs-1", tags=["ops"])
        fan = await engine.start("fan_out", 3, run_id="fan-1")
        assert await engine.result(fan.id) == 6
        with pytest.raises(td.RunFailed):
            await engine.result("needs-1")
        await engine.drain()


async def _run_all(store: str) -> dict[str, str]:
    """Let an engine run what the commands wrote; the status of each run."""
    async with td.open_engine(load_app(APP), store=store, serve=["ops"]) as engine:
        for run in await engine.store.list_runs():
            await engine.result(run.id)
        await engine.drain()
        return {run.id: run.status for run in await engine.store.list_runs()}


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "ops.db"
    trio.run(_fill, f"sqlite:///{path}", tmp_path / "flag")
    return path, {"TRIO_DURABLE_STORE": f"sqlite:///{path}"}


def test_fork_and_retry_from_a_seq_write_runs_an_engine_then_runs(
    store: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    path, env = store
    (tmp_path / "flag").write_text("found\n")
    result = invoke(["fork", "needs-1", "--from-seq", "1", "--new-run-id", "needs-2"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "forked needs-1 from seq 1: run needs-2 (needs_file, namespace default) is pending"
    )
    result = invoke(["runs", "fork", "fan-1", "--from-seq", "4", "--json"], env=env)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["forked_from"], document["from_seq"]) == ("fan-1", 4)
    assert (document["run"]["id"], document["run"]["status"]) == ("fan-1.fork.1", "pending")
    assert document["run"]["input"] == [3]
    result = invoke(["retry", "needs-1", "--from-seq", "1"], env=env)
    assert result.exit_code == 0, result.output
    assert (
        result.stdout.strip() == "retrying: run needs-1 (needs_file, namespace default) is pending"
    )
    statuses = trio.run(_run_all, env["TRIO_DURABLE_STORE"])
    assert statuses == {
        "needs-1": "completed",
        "fan-1": "completed",
        "needs-2": "completed",
        "fan-1.fork.1": "completed",
    }
    connection = sqlite3.connect(path)
    try:
        [(tags,)] = connection.execute("SELECT tags FROM runs WHERE id = 'needs-2'").fetchall()
    finally:
        connection.close()
    assert "ops" in tags


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (
            ["fork", "needs-1", "--from-seq", "3"],
            2,
            "Error: from_seq 3 is out of range: run 'needs-1' can run again from 1 to 2",
        ),
        (
            ["runs", "fork", "fan-1", "--from-seq", "2"],
            2,
            "Error: from_seq 2 is inside the fan of 'double' at seqs 1 to 3 of run 'fan-1':"
            " run from 1 (the whole fan) or from 4",
        ),
        (
            ["fork", "needs-1", "--from-seq", "1", "--new-run-id", "fan-1"],
            1,
            "Error: run id 'fan-1' is taken",
        ),
        (["fork", "nope", "--from-seq", "1"], 1, "Error: no run 'nope'"),
        (
            ["retry", "needs-1", "--from-seq", "0"],
            2,
            "Error: from_seq 0 is out of range: run 'needs-1' can run again from 1 to 2",
        ),
    ],
)
def test_refused_forks_and_retries_exit_with_one_line_and_write_nothing(
    store: tuple[Path, dict[str, str]], args: list[str], status: int, message: str
) -> None:
    path, env = store
    before = _dump(path)
    result = invoke(args, env=env)
    assert result.exit_code == status, result.output
    assert one_error_line(result) == message
    assert _dump(path) == before


def test_fork_needs_its_seq() -> None:
    result = invoke(["fork", "needs-1", "--store", "sqlite:///x.db"])
    assert result.exit_code == 2
    assert "Missing option '--from-seq'" in result.stderr
