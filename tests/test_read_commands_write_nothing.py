"""A store of an older schema: what only reads never writes to it.

The fixture is a SQLite file at schema version 2, as the release that had
it left it (tests/data/schema_2/SOURCE.md). The read commands, the console
and a client refuse it with `td.SchemaVersionError` (exit status 3) and
leave it byte for byte as it was; ``trio-durable engine`` refuses it
unless ``--migrate`` is given; ``--migrate``, ``trio-durable migrate`` and
an engine opened from Python upgrade it, logging each step at WARNING,
and its runs go on.
"""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import sqlite3
from pathlib import Path

import pytest
import trio

import trio_durable as td
from cli_processes import ROOT, cli_process, read_runs
from schema_2_app import app as schema_2_app
from sql_fixtures import restore_dump
from test_cli import invoke, one_error_line
from trio_durable._stores._sqlite_schema import SCHEMA_VERSION

FIXTURE = Path(__file__).parent / "data" / "schema_2" / "store.sql"


def restore(tmp_path: Path) -> Path:
    """The fixture as the release before left it: schema version 2, WAL."""
    return restore_dump(FIXTURE, tmp_path / "old.db", wal=True)


def digest(folder: Path) -> dict[str, str]:
    """Every file of the folder (the store, and any -wal or -shm beside it)
    by its SHA-256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def _version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        version: int = connection.execute("PRAGMA user_version").fetchone()[0]
    finally:
        connection.close()
    return version


def _refusal(text: str, store: str, opener: str) -> None:
    assert (
        f"the store {store} has schema version 2, older than {SCHEMA_VERSION}, the version"
        f" this trio-durable reads and writes; {opener} does not change a store's schema:"
        f" upgrade it first with `trio-durable migrate --store {store}`"
    ) in text


def test_read_commands_refuse_it_and_change_no_byte(tmp_path: Path) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    before = digest(tmp_path)
    for args in (
        ["runs", "list"],
        ["runs", "show", "counted-0"],
        ["runs", "history", "counted-0"],
        ["runs", "result", "counted-0"],
        ["breakpoints", "list"],
        ["console", "--port", "0"],
    ):
        result = invoke([*args, "--store", store])
        assert result.exit_code == 3, (args, result.output)
        _refusal(one_error_line(result), store, "a client")
        assert digest(tmp_path) == before, args
    assert _version(path) == 2


async def test_a_client_refuses_it_and_changes_no_byte(tmp_path: Path) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    before = digest(tmp_path)
    with pytest.raises(td.SchemaVersionError) as caught:
        async with td.open_client(store):
            pass  # pragma: no cover - refused
    assert (caught.value.found, caught.value.newest) == (2, SCHEMA_VERSION)
    assert isinstance(caught.value, td.StoreError)
    _refusal(str(caught.value), store, "a client")
    assert digest(tmp_path) == before


def test_the_engine_command_refuses_it_without_migrate(tmp_path: Path) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    before = digest(tmp_path)
    result = invoke(["engine", "schema_2_app:app", "--store", store])
    assert result.exit_code == 3, result.output
    _refusal(one_error_line(result), store, "`trio-durable engine` without --migrate")
    assert digest(tmp_path) == before


async def test_the_engine_command_with_migrate_upgrades_it_and_its_runs_go_on(
    tmp_path: Path,
) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    args = ["engine", "schema_2_app:app", "--store", store, "--migrate"]
    async with cli_process([*args, "--reconcile-interval", "0.2"], cwd=ROOT / "tests") as engine:
        await engine.wait_for("ready: app schema-2")
        assert _version(path) == SCHEMA_VERSION
        # Each step, one line at WARNING.
        for older in range(2, SCHEMA_VERSION):
            assert (
                f"WARNING trio_durable: upgrading the SQLite store {str(path)!r} from schema"
                f" version {older} to {older + 1}"
            ) in engine.output
        async with td.open_client(store) as client:
            await client.signal("waiting", "go", "went")
            assert await client.result("waiting") == "went"
            assert await client.result("counted-2") == 3
        assert await engine.stop(signal.SIGTERM) == 0
    runs = await read_runs(store, ["counted-0", "waiting"])
    assert [r.status for r in runs.values()] == ["completed", "completed"]


def test_migrate_upgrades_it_and_logs_each_step(tmp_path: Path) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    result = invoke(["migrate", "--store", store, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["action"] == "upgraded"
    for older in range(2, SCHEMA_VERSION):
        assert (
            f"upgrading the SQLite store {str(path)!r} from schema version {older} to {older + 1}"
        ) in result.stderr
    # Current now: the read commands read it.
    listed = invoke(["runs", "list", "--store", store, "--json"])
    assert listed.exit_code == 0, listed.output
    assert {run["id"] for run in json.loads(listed.stdout)["runs"]} == {
        "counted-0",
        "counted-1",
        "counted-2",
        "waiting",
    }


async def test_an_engine_opened_from_python_migrates_it_and_logs_each_step(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = restore(tmp_path)
    store = f"sqlite:///{path}"
    with caplog.at_level(logging.WARNING, logger="trio_durable"):
        async with td.open_engine(schema_2_app, store=store) as engine:
            assert _version(path) == SCHEMA_VERSION
            await engine.signal("waiting", "go", "went")
            assert await engine.result("waiting") == "went"
            with trio.fail_after(10):
                await engine.drain()
    upgrades = [r.getMessage() for r in caplog.records if "upgrading the SQLite" in r.message]
    assert upgrades == [
        f"upgrading the SQLite store {str(path)!r} from schema version {older} to {older + 1}"
        for older in range(2, SCHEMA_VERSION)
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records if "upgrading" in r.message)
