"""A SQLite store written by the release before keyed values went with runs
(schema version 8) migrates with nothing lost, and retention then prunes
what goes with each run.

`tests/data/values_before_runs/` was written by `tests/record_values_store.py`
run with that release's code: runs that ended and runs in flight, with a
keyed value of every family that release wrote (published values, stream
values, update records, signal keys, singleton, dedup and step-dedup
claims, a fan window, a debounce window, event records), none naming a
run. Opened by this release, the migration keeps every row of every table
as it was, and gives the values of a run's own scopes (``run-event:``,
``stream:``, ``update:``) to their run; the runs in flight finish, their
claims still hold, and pruning the runs deletes their values.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from record_values_store import app, deduped, sender, single, target
from sql_fixtures import restore_dump
from trio_durable._stores import _sqlite_schema
from trio_durable._stores._migrations_records import ADMISSION_SEQ, MOVED_TO_RECORDS
from trio_durable.stores import QUEUE_SLOT, WHOLE_RUN

FIXTURE: Final = Path(__file__).parent / "data" / "values_before_runs" / "store.sql"

_RUN_SCOPES: Final = ("run-event:", "stream:", "update:")

_FAMILIES: Final = {
    "run-event",
    "stream",
    "update",
    "signal-key",
    "singleton",
    "dedup",
    "step-dedup",
    "fan-window",
    "debounce",
    "event",
}


def restore(tmp_path: Path) -> Path:
    """The fixture's store as a SQLite file at its old schema version."""
    return restore_dump(FIXTURE, tmp_path / "before.db")


def _version(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        version: int = connection.execute("PRAGMA user_version").fetchone()[0]
    finally:
        connection.close()
    return version


_ADDED_LATER: Final = frozenset(
    {("durable_values", "run_id"), ("checkpoints", "mark"), ("run_records", "mark")}
)


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in every column the schema before had
    (all but ``durable_values.run_id`` and the ``mark`` of checkpoints and
    records, which later schemas added), sorted."""
    connection = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        found = {}
        for table in tables:
            columns = [
                row[1]
                for row in connection.execute(f'PRAGMA table_info("{table}")')
                if (table, row[1]) not in _ADDED_LATER
            ]
            listed = ", ".join(f'"{column}"' for column in columns)
            rows = connection.execute(f'SELECT {listed} FROM "{table}"').fetchall()
            found[table] = sorted(rows, key=repr)
    finally:
        connection.close()
    return found


def _own_run(scope: str) -> str | None:
    for prefix in _RUN_SCOPES:
        if scope.startswith(prefix):
            return scope[len(prefix) :]
    return None


def _pragma_columns(path: Path, table: str) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute(f'PRAGMA table_info("{table}")').fetchall()
    finally:
        connection.close()


def _statuses(path: Path) -> list[tuple[str, str]]:
    connection = sqlite3.connect(path)
    try:
        return connection.execute("SELECT id, status FROM runs").fetchall()
    finally:
        connection.close()


def test_the_fixture_is_as_the_release_before_wrote_it(tmp_path: Path) -> None:
    path = restore(tmp_path)
    assert _version(path) == 8
    rows = _rows(path)
    assert "run_id" not in {row[1] for row in _pragma_columns(path, "durable_values")}
    assert {scope.partition(":")[0] for scope, *_ in rows["durable_values"]} == _FAMILIES
    statuses = {run_id: status for run_id, status in _statuses(path)}
    assert statuses["done-t"] == "completed"
    assert statuses["done-fan"] == "cancelled"
    assert {statuses[r] for r in ("live-t", "live-single", "live-dedup")} == {"suspended"}


Sql = Callable[[str], Awaitable[list[tuple[Any, ...]]]]
"""Runs one statement on the store's database, returning its rows."""


async def owners(sql: Sql) -> dict[tuple[str, str], str | None]:
    """The run each keyed value goes with, by scope and key."""
    rows = await sql("SELECT scope, key, run_id FROM durable_values")
    return {(scope, key): run_id for scope, key, run_id in rows}


def check_migrated(found: dict[tuple[str, str], str | None]) -> set[tuple[str, str]]:
    """Check the migration gave the values of a run's own scopes to their
    run, and no other; return the others but event records (the claims and
    windows)."""
    assert found == {key: _own_run(key[0]) for key in found}
    assert {owner for owner in found.values() if owner} == {"done-t", "done-fan", "live-t"}
    return {key for key, owner in found.items() if owner is None and key[0] != "event"}


async def finish_and_prune(
    engine: td.Engine, sql: Sql, claims: set[tuple[str, str]], settle: float
) -> None:
    """On the migrated store: what the runs published reads as before, the
    runs in flight finish, a claim written before still holds, and pruning
    every ended run (``settle`` seconds after the last ended) leaves only
    the claims and windows written before (``claims``) but the one taken
    over."""
    assert await engine.get_event("done-t", "ready") == "done"
    # The claim of the singleton in flight still holds: a start with its
    # key returns the run that holds it.
    assert (await engine.start(single, 2, run_id="again-single")).id == "live-single"
    # A dedup key holds only while its run is queued: a start takes the
    # claim written before over, and from then on it goes with that run.
    assert (await engine.start(deduped, 2, run_id="again-dedup")).id == "again-dedup"
    assert (await owners(sql))[("dedup:deduped", "default:d2")] == "again-dedup"
    # The runs in flight finish.
    assert await engine.update("live-t", "bump", 3) == 5
    await engine.start(sender, "live-t", run_id="new-s")
    assert await engine.result("live-t") == 6
    assert [value async for _, value in engine.stream("live-t")] == ["live"]
    for name in ("live-single", "live-dedup", "again-dedup"):
        await engine.signal(name, "done")
        assert await engine.result(name) == 2
    # A run of this release: its values name it.
    await engine.start(target, "new", run_id="new-t")
    await engine.signal("new-t", "go", 1)
    assert await engine.result("new-t") == 1
    assert (await owners(sql))[("stream:new-t", "000000000000")] == "new-t"

    await trio.sleep(settle)  # ages count strictly: every run ended before now
    ended = len(await sql("SELECT id FROM runs"))
    assert ended > 10
    retention = td.Retention(completed=0, failed=0, cancelled=0, events=0)
    assert await engine.prune(retention) == ended
    assert await sql("SELECT id FROM runs") == []
    # Every value that went with a run went with it, and the event records
    # by age; the claims and windows written before the upgrade, which name
    # no run, stay (docs/operations.md).
    assert await owners(sql) == dict.fromkeys(claims - {("dedup:deduped", "default:d2")})


async def test_a_store_of_schema_8_migrates_whole_and_its_runs_values_go_with_them(
    tmp_path: Path, open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    path = restore(tmp_path)
    url = f"sqlite:///{path}"
    before = _rows(path)

    async def sql(statement: str) -> list[tuple[Any, ...]]:
        connection = sqlite3.connect(path)
        try:
            return connection.execute(statement).fetchall()
        finally:
            connection.close()

    # Opening the store migrates it, and changes no row of any table but
    # the checkpoints at reserved seqs, which become the runs' records.
    async with td.open_store(url):
        pass
    assert _version(path) == _sqlite_schema.SCHEMA_VERSION == 14
    after = _rows(path)
    kinds = {**MOVED_TO_RECORDS, ADMISSION_SEQ: "admission"}
    moved = [row for row in before["checkpoints"] if row[1] in kinds]
    # The fixture's runs have streams, update logs, admissions, ...
    assert {kinds[row[1]] for row in moved} >= {"stream", "updates", "admission"}
    kept = dict(before, checkpoints=[r for r in before["checkpoints"] if r not in moved])
    # The slots runs hold and wait for are theirs as whole runs now.
    for table in ("queue_slots", "queue_waiters"):
        kept[table] = sorted(
            tuple(WHOLE_RUN if v == ADMISSION_SEQ else v for v in row) for row in kept[table]
        )
    assert kept["queue_slots"]
    assert {table: rows for table, rows in after.items() if table in before} == kept
    records = {(row[0], row[1], row[4]) for row in after["run_records"]}
    assert records == {(row[0], kinds[row[1]], row[6]) for row in moved} | {
        (run_id, QUEUE_SLOT, None) for _, run_id, _ in kept["queue_slots"]
    }
    claims = check_migrated(await owners(sql))
    async with open_test_engine(app, store=url) as engine:
        # Past the end of every run: the fixture's clock, which began where
        # the test's does, ran a few seconds.
        await finish_and_prune(engine, sql, claims, settle=3600)
