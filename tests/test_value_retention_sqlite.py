"""Keyed values and retention in the SQLite store, beyond the conformance
suite: a file of schema 8 gains the run a value goes with in place, and the
walks retention makes of the values use their indexes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio_durable as td
from trio_durable._stores import _sqlite_schema
from trio_durable._stores._ops import CreateRun, PutValue
from trio_durable._stores._values_sql import prune_values_statement
from trio_durable.testing.conformance._store_support import make_run


def _plan(path: Path, statement: str, params: tuple[object, ...]) -> list[str]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    finally:
        connection.close()
    return [row[3] for row in rows]


def _indexes(path: Path) -> list[tuple[str, str]]:
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name = 'durable_values'"
            " AND type = 'index' AND sql IS NOT NULL ORDER BY name"
        ).fetchall()
    finally:
        connection.close()
    return [(name, sql) for name, sql in rows]


async def test_a_version_8_file_gains_the_run_a_value_goes_with(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    async with td.open_store(url):
        pass
    fresh = _indexes(path)
    assert [name for name, _ in fresh] == ["durable_values_age", "durable_values_run"]
    # Back to version 8: durable_values without its column and indexes.
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(
        "BEGIN; DROP INDEX durable_values_age; DROP INDEX durable_values_run;"
        " ALTER TABLE durable_values DROP COLUMN run_id;"
        " INSERT INTO durable_values (scope, key, value, version, updated_at)"
        " VALUES ('s', 'old', '\"v\"', 1, 1.0), ('stream:r', '0', '1', 1, 1.0),"
        " ('run-event:r', 'k', '1', 1, 1.0), ('update:r', 'record/u', '{}', 1, 1.0),"
        " ('update:other', 'record/u', '{}', 1, 1.0), ('streams:r', '0', '1', 1, 1.0);"
        " PRAGMA user_version = 8; COMMIT;"
    )
    connection.close()
    async with td.open_store(url) as store:
        old = await store.get_value("s", "old")
        assert old is not None
        assert (old.value, old.run_id) == ('"v"', None)
        # The values of a scope named after a run go with that run.
        owners = {}
        for scope in ("stream:r", "run-event:r", "update:r", "update:other", "streams:r"):
            [value] = await store.list_values(scope)
            owners[scope] = value.run_id
        assert owners == {
            "stream:r": "r",
            "run-event:r": "r",
            "update:r": "r",
            "update:other": "other",
            "streams:r": None,
        }
        await store.apply(
            [
                CreateRun(make_run("r", status="completed", updated_at=1.0)),
                PutValue("s", "new", '"n"', 2.0, run_id="r"),
            ]
        )
        assert await store.prune_runs({"completed": 5.0}, 10) == ["r"]
        assert [value.key for value in await store.list_values("s")] == ["old"]
        for scope in ("stream:r", "run-event:r", "update:r"):
            assert await store.list_values(scope) == []
        assert await store.prune_values("s", 5.0, 10) == 1
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA user_version").fetchone() == (_sqlite_schema.SCHEMA_VERSION,)
    connection.close()
    assert _indexes(path) == fresh
    assert _sqlite_schema.SCHEMA_VERSION == 14


async def test_retention_walks_the_value_indexes(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with td.open_store(f"sqlite:///{path}"):
        pass
    connection = sqlite3.connect(path)
    with connection:
        connection.executescript(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
            INSERT INTO durable_values (scope, key, value, version, updated_at, run_id)
            SELECT 'scope' || (i % 10), 'key' || i, '{}', 1, i,
                CASE WHEN i % 2 = 0 THEN 'r' || (i / 20) END
            FROM n;
            ANALYZE;
            """
        )
    connection.close()
    plan = _plan(path, prune_values_statement("?", ""), ("scope3", "scope3", 15_000.0, 50))
    assert any("durable_values_age" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan
    plan = _plan(path, "DELETE FROM durable_values WHERE run_id = ?", ("r7",))
    assert any("durable_values_run" in step for step in plan), plan
    assert not any(step.startswith("SCAN") for step in plan), plan


async def test_the_wal_file_is_cut_back_after_a_burst(tmp_path: Path) -> None:
    """A checkpoint that starts the ``-wal`` file over cuts it back to
    `JOURNAL_SIZE_LIMIT`: a burst of writes does not leave it large for
    good."""
    path = tmp_path / "store.db"
    wal = tmp_path / "store.db-wal"
    async with td.open_store(f"sqlite:///{path}") as store:
        limit = _sqlite_schema.JOURNAL_SIZE_LIMIT
        # One batch larger than the limit: the file grows past it.
        large = '"' + "x" * (1024 * 1024) + '"'
        keys = range(limit // (1024 * 1024) + 8)
        await store.apply([PutValue("s", f"k{i}", large, 1.0) for i in keys])
        assert wal.stat().st_size > limit
        await store.apply([PutValue("s", f"k{i}", None, 2.0) for i in keys])
        connection = sqlite3.connect(path)
        try:
            connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        finally:
            connection.close()
        # The next write starts the file over, and cuts it back.
        await store.apply([PutValue("s", "small", '"v"', 3.0)])
        assert wal.stat().st_size <= limit
