"""Search attributes in the SQLite store: a file of schema version 5, with
runs in it, gains them in place; the queries walk ``run_search``'s
indexes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from trio_durable._base._records import RunFilter
from trio_durable._base._search_values import SearchRange, conditions
from trio_durable._stores import _sql_queries, _sqlite_schema
from trio_durable._stores._ops import PutValue, UpdateRun
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable._stores._sqlite_ops import DIALECT
from trio_durable.testing.conformance._store_support import make_run

_SEARCH_OBJECTS = "SELECT type, name FROM sqlite_master WHERE name LIKE '%search%' ORDER BY name"


def _objects(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as connection:
        found = connection.execute(_SEARCH_OBJECTS).fetchall()
    connection.close()
    return found


async def test_a_version_5_file_gains_search_attributes_in_place(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    async with open_sqlite_store(url) as store:
        await store.create_run(make_run("old", tags=("t",), created_at=1.0, input='["in"]'))
        await store.apply([PutValue("s", "k", '"v"', 1.0)])
    fresh = _objects(path)
    assert ("table", "run_search") in fresh
    # Back to version 5, as a trio-durable of that version wrote it.
    with sqlite3.connect(path, isolation_level=None) as connection:
        connection.executescript(
            """
            BEGIN;
            DROP TRIGGER runs_search_insert;
            DROP TRIGGER runs_search_update;
            DROP TRIGGER runs_search_delete;
            DROP TABLE run_search;
            ALTER TABLE runs DROP COLUMN search_attributes;
            PRAGMA user_version = 5;
            COMMIT;
            """
        )
        # A run written at version 5 (its row has no attributes column).
        connection.execute(
            "INSERT INTO runs (id, workflow, version, namespace, status, tags, compensate,"
            " recoveries, created_at, updated_at) VALUES"
            " ('older', 'w', '1', 'default', 'pending', '[]', 0, 0, 0.5, 0.5)"
        )
        connection.execute("INSERT INTO run_inputs (run_id, input) VALUES ('older', '[]')")
    connection.close()
    assert _objects(path) == []

    async with open_sqlite_store(url) as store:
        old = await store.get_run("old")
        assert old is not None
        assert (old.input, old.tags, dict(old.search_attributes)) == ('["in"]', ("t",), {})
        older = await store.get_run("older")
        assert older is not None
        assert dict(older.search_attributes) == {}
        value = await store.get_value("s", "k")
        assert value is not None
        assert value.value == '"v"'
        # Runs old and new take attributes, and are found by them.
        await store.apply([UpdateRun("old", {"search_attributes": {"region": "eu"}})])
        await store.create_run(
            make_run("new", created_at=2.0, search_attributes={"region": "eu", "n": 3})
        )
        types: Any = {"region": "str", "n": "int"}
        found = await store.find_runs(RunFilter(search=conditions({"region": "eu"}, types)))
        assert [run.id for run in found] == ["new", "old"]
        assert [r.id for r in await store.find_runs(RunFilter(tags=("t",)))] == ["old"]
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (
            _sqlite_schema.SCHEMA_VERSION,
        )
    connection.close()
    assert _sqlite_schema.SCHEMA_VERSION == 14
    assert _objects(path) == fresh


def _plan(path: Path, statement: str, params: list[Any]) -> list[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    connection.close()
    return [row[3] for row in rows]


async def test_search_queries_walk_run_search(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    async with open_sqlite_store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
            INSERT INTO runs (id, workflow, version, namespace, status, tags, compensate,
                              recoveries, created_at, updated_at, search_attributes)
            SELECT 'r' || i, 'w', '1', 'default',
                CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END, '[]', 0, 0, i, i,
                json_object('customer', json_array('str', 'c' || (i % 100)),
                            'amount', json_array('int', i),
                            'labels', json_array('keywords', json_array('all', 'l' || (i % 7))))
            FROM n;
            INSERT INTO run_inputs (run_id, input) SELECT id, '[]' FROM runs;
            ANALYZE;
            """
        )
        assert connection.execute("SELECT count(*) FROM run_search").fetchone() == (20000,)
    connection.close()
    types: Any = {"customer": "str", "amount": "int", "labels": "keywords"}
    for filters, index in (
        ({"customer": "c7"}, "run_search_text"),
        ({"labels": "l3"}, "run_search_text"),
        ({"amount": 4000}, "run_search_int"),
        ({"customer": "c7", "amount": SearchRange(ge=100)}, "run_search_text"),
    ):
        where = RunFilter(search=conditions(filters, types))
        for before in (None, (4000.0, "r4000")):
            [(statement, params)] = _sql_queries.find_runs_statements(DIALECT, where, before, 101)
            plan = _plan(path, statement, params)
            assert any(index in step for step in plan), plan
            assert not any(step.startswith("SCAN") for step in plan), plan
            if index == "run_search_text":
                # Many runs per value: a walk in the order of a page (for
                # the one run of an int, SQLite may as well sort that one).
                assert not any("TEMP B-TREE" in step for step in plan), plan
    # A range alone: a walk of the runs newest first probing each one's
    # value, or of the values in range (then ordered); never a table scan.
    where = RunFilter(search=conditions({"amount": SearchRange(ge=4990)}, types))
    [(statement, params)] = _sql_queries.find_runs_statements(DIALECT, where, None, 101)
    plan = _plan(path, statement, params)
    assert not any(step.startswith("SCAN") and "INDEX" not in step for step in plan), plan
    async with open_sqlite_store(f"sqlite:///{path}") as store:
        found = await store.find_runs(where)
        assert [run.id for run in found] == [f"r{i}" for i in range(5000, 4989, -1)]
        counted = await store.count_runs(RunFilter(search=conditions({"labels": "l3"}, types)))
        labelled = [i for i in range(1, 5001) if i % 7 == 3]
        failed = sum(1 for i in labelled if i % 10 == 0)
        assert counted == {"completed": len(labelled) - failed, "failed": failed}
