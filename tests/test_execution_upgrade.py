"""A SQLite store of schema version 7 (before execution ids) with runs in
flight opens, gains the columns in place, and finishes those runs: the
results of their tasks, which carry no execution id, settle by the
rolling-upgrade rule (see tests/execution_upgrade.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from execution_upgrade import finish_in_flight_runs, runs_in_flight
from trio_durable._stores import _sqlite_schema

_COLUMNS = "SELECT name FROM pragma_table_info('checkpoints') WHERE name IN ('executions', 'rerun')"


def _version_and_columns(path: Path) -> tuple[int, list[str]]:
    with sqlite3.connect(path) as connection:
        version: int = connection.execute("PRAGMA user_version").fetchone()[0]
        columns = [row[0] for row in connection.execute(_COLUMNS)]
    connection.close()
    return version, sorted(columns)


async def test_a_version_7_file_migrates_and_finishes_its_runs_in_flight(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    await runs_in_flight(url)
    # Back to version 7, as a trio-durable of that version wrote it.
    with sqlite3.connect(path, isolation_level=None) as connection:
        connection.executescript(
            """
            BEGIN;
            ALTER TABLE checkpoints DROP COLUMN executions;
            ALTER TABLE checkpoints DROP COLUMN rerun;
            PRAGMA user_version = 7;
            COMMIT;
            """
        )
    connection.close()
    assert _version_and_columns(path) == (7, [])

    await finish_in_flight_runs(url)
    assert _version_and_columns(path) == (_sqlite_schema.SCHEMA_VERSION, ["executions", "rerun"])
