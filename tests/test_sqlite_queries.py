"""The SQLite store's run queries: their plans use the indexes, and a file
of an older schema is upgraded in place with its rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from trio_durable._base._records import RunFilter
from trio_durable._stores import _sql_queries, _sqlite_schema
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable._stores._sqlite_ops import DIALECT
from trio_durable.testing.conformance._store_support import make_checkpoint, make_run


@pytest.fixture
async def database(tmp_path: Path) -> Path:
    """A file with the current schema and a few thousand runs, analyzed, so
    the planner judges as it would on a store in use."""
    path = tmp_path / "store.db"
    async with open_sqlite_store(f"sqlite:///{path}"):
        pass
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000)
            INSERT INTO runs (id, workflow, version, namespace, status, tags, compensate,
                              recoveries, created_at, updated_at, parent_id)
            SELECT 'r' || i, 'w' || (i % 7), '1', 'ns' || (i % 3),
                CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END,
                CASE WHEN i % 5 = 0 THEN '["vip","eu"]' ELSE '[]' END, 0, 0, i, i,
                CASE WHEN i % 50 = 0 THEN 'r1' END
            FROM n;
            INSERT INTO run_inputs (run_id, input) SELECT id, '[]' FROM runs;
            WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)
            INSERT INTO checkpoints (run_id, seq, name, kind, status, attempts,
                                     parallel_group, parallel_size)
            SELECT 'r' || (i / 1000 + 1), i % 1000, 's', 'remote',
                CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'completed' END, 1, 1, 999
            FROM n;
            ANALYZE;
            """
        )
    connection.close()
    return path


def _plan(path: Path, statement: str, params: list[Any]) -> list[str]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(f"EXPLAIN QUERY PLAN {statement}", params).fetchall()
    connection.close()
    return [row[3] for row in rows]


def _walks(plan: list[str], index: str) -> None:
    """The plan reads ``runs`` (or ``run_tags``) by ``index`` alone, in its
    order: no scan of a whole table, no sort."""
    assert any(index in step for step in plan), plan
    assert not any(step.startswith("SCAN") and "INDEX" not in step for step in plan), plan
    assert not any("TEMP B-TREE FOR ORDER BY" in step for step in plan), plan


FILTERS = [
    (RunFilter(), "runs_created"),
    (RunFilter(statuses=frozenset({"failed"})), "runs_status"),
    (RunFilter(statuses=frozenset({"failed", "completed"})), "runs_status"),
    (RunFilter(workflow="w3"), "runs_workflow"),
    (RunFilter(namespace="ns1"), "runs_namespace"),
    (RunFilter(parent_id="r1"), "runs_parent"),
    (RunFilter(created_after=100.0, created_before=200.0), "runs_created"),
    (RunFilter(tags=("vip",)), "SEARCH t USING PRIMARY KEY"),
    (RunFilter(tags=("eu", "vip"), statuses=frozenset({"failed"})), "SEARCH t USING PRIMARY KEY"),
]


@pytest.mark.parametrize(("where", "index"), FILTERS)
@pytest.mark.parametrize("before", [None, (4000.0, "r4000")])
async def test_pages_of_runs_walk_an_index(
    database: Path, where: RunFilter, index: str, before: tuple[float, str] | None
) -> None:
    for statement, params in _sql_queries.find_runs_statements(DIALECT, where, before, 101):
        plan = _plan(database, statement, params)
        _walks(plan, index)
        if before is not None and index != "runs_created":
            # The cursor is a bound of the index walk, not a filter.
            assert any("<(?,?)" in step for step in plan), plan


async def test_counts_and_checkpoint_pages_use_indexes(database: Path) -> None:
    statement, params = _sql_queries.count_runs_statement(DIALECT, RunFilter())
    assert _plan(database, statement, params) == ["SCAN r USING COVERING INDEX runs_status"]
    # Facets read every matching run's index entry (some index, by the
    # planner's judgement of the filters), never the table in full.
    for where in (RunFilter(namespace="ns1"), RunFilter(workflow="w3", tags=("vip",))):
        statement, params = _sql_queries.count_runs_statement(DIALECT, where)
        plan = _plan(database, statement, params)
        assert plan[0].startswith(("SEARCH", "SCAN r USING")), plan
        assert "INDEX" in plan[0] or "PRIMARY KEY" in plan[0], plan

    statement, params = _sql_queries.find_checkpoints_statement(
        DIALECT, "r3", 1, 998, ["failed"], 10, 100
    )
    assert _plan(database, statement, params) == [
        "SEARCH checkpoints USING INDEX checkpoints_status (run_id=? AND status=? AND seq>? AND seq<?)"
    ]
    statement, params = _sql_queries.find_checkpoints_statement(
        DIALECT, "r3", 100, 998, None, 0, 100
    )
    [step] = _plan(database, statement, params)
    assert "(run_id=? AND seq>? AND seq<?)" in step
    # A run's fans are found by hops along the primary key; each fan is
    # summed up, and the run's stamp read, from checkpoints_status alone
    # (its entries, never a row with payloads, and never sorted).
    plan = _plan(database, _sql_queries._FANS.format(p="?"), ["r3"] * 4)
    assert all("checkpoints_status" not in step for step in plan), plan
    assert not any("TEMP B-TREE" in step or step.startswith("SCAN c") for step in plan), plan
    per_fan = _sql_queries._FAN_STATUS.format(fan=0, status="failed", p="?")
    assert _plan(database, per_fan, ["r3", 2, 500]) == [
        "SEARCH checkpoints USING COVERING INDEX checkpoints_status"
        " (run_id=? AND status=? AND seq>? AND seq<?)"
    ]
    stamp = _sql_queries._CHECKPOINT_STAMP.format(status="completed", p="?")
    assert _plan(database, stamp, ["r3"]) == [
        "SEARCH checkpoints USING COVERING INDEX checkpoints_status (run_id=? AND status=?)"
    ]

    plan = _plan(database, _sql_queries.prune_candidates_statement(DIALECT), ["failed", 99.0, 10])
    assert plan[0] == "SEARCH r USING INDEX runs_ended (status=? AND updated_at<?)", plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


async def test_a_version_2_file_is_upgraded_in_place(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runs = [
        make_run("a", tags=("vip", "eu"), created_at=1.0, input='["x"]'),
        make_run("b", created_at=2.0),
        make_run("c", tags=("eu",), created_at=3.0, status="failed"),
    ]
    async with open_sqlite_store(url) as store:
        for run in runs:
            await store.create_run(run)
        await store.save_checkpoint(make_checkpoint("a", 1))
    # Version 2 had neither run_tags nor the query indexes.
    with sqlite3.connect(tmp_path / "store.db", isolation_level=None) as connection:
        connection.executescript(
            """
            BEGIN;
            DROP TRIGGER runs_tags_insert;
            DROP TRIGGER runs_tags_update;
            DROP TRIGGER runs_tags_delete;
            DROP TABLE run_tags;
            DROP INDEX runs_status;
            DROP INDEX runs_workflow;
            DROP INDEX runs_namespace;
            DROP INDEX runs_ended;
            PRAGMA user_version = 2;
            COMMIT;
            """
        )
        triggers = connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'runs_tags%'"
        )
        assert triggers.fetchall() == []
    connection.close()

    async with open_sqlite_store(url) as store:
        assert [await store.get_run(run.id) for run in runs] == runs
        assert await store.get_checkpoints("a") == [make_checkpoint("a", 1)]
        found = await store.find_runs(RunFilter(tags=("eu",)))
        assert [run.id for run in found] == ["c", "a"]
        assert await store.count_runs(RunFilter(tags=("vip",))) == {"pending": 1}
        await store.create_run(make_run("d", tags=("vip",), created_at=4.0))
        found = await store.find_runs(RunFilter(tags=("vip",)))
        assert [run.id for run in found] == ["d", "a"]
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (
            _sqlite_schema.SCHEMA_VERSION,
        )
        indexes = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        assert {"runs_status", "runs_workflow", "runs_namespace", "runs_ended"} <= indexes
    connection.close()


async def test_fan_counts_ends_on_members_outside_their_range(tmp_path: Path) -> None:
    """Members whose size is missing or too small for their seq (no engine
    writes them) neither make the search for fans loop nor get lost: each
    is counted in its fan, as the memory store counts it."""
    from trio_durable._stores import open_store

    def members() -> list[Any]:
        return [
            make_checkpoint("r1", 1, parallel_group=1, parallel_size=0),
            make_checkpoint("r1", 2, parallel_group=1, parallel_size=0, status="completed"),
            make_checkpoint("r1", 3, parallel_group=3, parallel_size=None),
            make_checkpoint("r1", 4, parallel_group=3, parallel_size=None),
            make_checkpoint("r1", 5, status="completed"),
            make_checkpoint("r1", 6, parallel_group=6, parallel_size=2),
        ]

    found = []
    for url in ("memory://", f"sqlite:///{tmp_path / 'odd.db'}"):
        async with open_store(url) as store:
            await store.create_run(make_run("r1"))
            for checkpoint in members():
                await store.save_checkpoint(checkpoint)
            found.append(
                [
                    (r.fan, r.status, r.count, r.first_seq, r.last_seq)
                    for r in await store.fan_counts("r1")
                ]
            )
    assert (
        found[0]
        == found[1]
        == [
            (1, "completed", 1, 2, 2),
            (1, "pending", 1, 1, 1),
            (3, "pending", 2, 3, 4),
            (6, "pending", 1, 6, 6),
        ]
    ), found
