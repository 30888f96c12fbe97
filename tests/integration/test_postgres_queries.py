"""The PostgreSQL store's run queries against a real server: their plans use
the indexes, and a database of schema version 1 is upgraded in place."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from servers.postgres import scratch_schema
from trio_durable._base._records import RunFilter
from trio_durable._stores import _sql_queries
from trio_durable._stores._postgres import open_postgres_store
from trio_durable._stores._postgres_ops import DIALECT
from trio_durable._stores._postgres_schema import _MIGRATIONS, SCHEMA_VERSION
from trio_durable.testing.conformance._store_support import make_checkpoint, make_run


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def _sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement run in the URL's schema (in a worker thread)."""
    base, _, options = url.partition("?")
    schema = options.rpartition("schema=")[2]

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{schema}"')
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(run)


async def _plan(url: str, statement: str, params: list[Any]) -> str:
    rows = await _sql(url, f"EXPLAIN (COSTS OFF) {statement}", *params)
    return "\n".join(row[0] for row in rows)


FILTERS = [
    (RunFilter(), "runs_created"),
    (RunFilter(statuses=frozenset({"failed"})), "runs_status"),
    (RunFilter(statuses=frozenset({"failed", "completed"})), "runs_status"),
    (RunFilter(workflow="w3"), "runs_workflow"),
    (RunFilter(namespace="ns1"), "runs_namespace"),
    (RunFilter(parent_id="r1"), "runs_parent"),
    (RunFilter(created_after=100.0, created_before=20000.0), "runs_created"),
    (RunFilter(tags=("vip",)), "run_tags_pkey"),
    (RunFilter(tags=("eu", "vip"), statuses=frozenset({"failed"})), "run_tags_pkey"),
]


async def test_run_queries_use_indexes(url: str) -> None:
    async with open_postgres_store(url):
        pass
    # Enough rows that a sequential scan and a sort would be the planner's
    # choice if no index served: 50,000 runs, 20,000 checkpoints.
    await _sql(
        url,
        "INSERT INTO runs (id, workflow, version, namespace, status, input, tags, compensate,"
        " recoveries, created_at, updated_at, parent_id)"
        " SELECT 'r' || i, 'w' || (i % 7), '1', 'ns' || (i % 3),"
        " CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END, '[]',"
        ' CASE WHEN i % 500 = 0 THEN \'["rare","vip","eu"]\''
        " WHEN i % 5 = 0 THEN '[\"vip\",\"eu\"]' ELSE '[]' END, false, 0, i, i,"
        " CASE WHEN i % 50 = 0 THEN 'r1' END"
        " FROM generate_series(1, 50000) AS i",
    )
    await _sql(
        url,
        "INSERT INTO checkpoints (run_id, seq, name, kind, status, attempts, parallel_group,"
        " parallel_size)"
        " SELECT 'r' || (i / 1000 + 1), i % 1000, 's', 'remote',"
        " CASE WHEN i % 3 = 0 THEN 'failed' ELSE 'completed' END, 1, 1, 999"
        " FROM generate_series(0, 19999) AS i",
    )
    # Vacuumed as autovacuum would (the visibility map lets index-only
    # scans skip the table), and analyzed.
    await _sql(url, "VACUUM ANALYZE")

    for where, index in FILTERS:
        for before in (None, (40000.0, "r40000")):
            statements = _sql_queries.find_runs_statements(DIALECT, where, before, 101)
            for statement, params in statements:
                plan = await _plan(url, statement, params)
                # An ordered walk of the filter's index, or of runs_created
                # filtering as it goes where most runs match: never a scan of
                # the table nor a sort of what matches.
                assert index in plan or (index.startswith("runs_") and "runs_created" in plan), plan
                assert "Seq Scan" not in plan, plan
                assert "Sort" not in plan, plan
                if before is not None:
                    assert "Index Cond" in plan, plan

    # Facets count every matching run: all of them (the planner may well
    # read the table then), or those a selective filter's index finds.
    for where, index in (
        (RunFilter(tags=("rare",)), "run_tags_pkey"),
        (RunFilter(parent_id="r1"), "runs_parent"),
    ):
        statement, params = _sql_queries.count_runs_statement(DIALECT, where)
        plan = await _plan(url, statement, params)
        assert index in plan, plan
        assert "Seq Scan on runs" not in plan, plan

    statement, params = _sql_queries.find_checkpoints_statement(
        DIALECT, "r3", 1, 998, ["failed"], 10, 100
    )
    plan = await _plan(url, statement, params)
    assert "checkpoints_status" in plan, plan
    assert "Sort" not in plan, plan
    statement, params = _sql_queries.find_checkpoints_statement(
        DIALECT, "r3", 100, 998, None, 0, 100
    )
    plan = await _plan(url, statement, params)
    assert "checkpoints_pkey" in plan, plan
    assert "Seq Scan" not in plan, plan
    # Fans are found by hops along the primary key, then summed up, and a
    # run's stamp read, from the entries of checkpoints_status alone.
    plan = await _plan(url, _sql_queries._FANS.format(p="%s"), ["r3"] * 4)
    assert "Seq Scan" not in plan, plan
    per_fan = _sql_queries._FAN_STATUS.format(fan=0, status="failed", p="%s")
    plan = await _plan(url, per_fan, ["r3", 2, 500])
    assert "Index Only Scan using checkpoints_status" in plan, plan
    assert "Sort" not in plan, plan
    stamp = _sql_queries._CHECKPOINT_STAMP.format(status="completed", p="%s")
    plan = await _plan(url, stamp, ["r3"])
    assert "Index Only Scan using checkpoints_status" in plan, plan
    plan = await _plan(url, _sql_queries.prune_candidates_statement(DIALECT), ["failed", 99.0, 10])
    assert "runs_ended" in plan, plan
    assert "Sort" not in plan, plan

    async with open_postgres_store(url) as store:
        page = await store.find_runs(RunFilter(tags=("vip",), statuses=frozenset({"failed"})))
        assert [run.id for run in page[:3]] == ["r50000", "r49990", "r49980"]
        assert await store.count_runs(RunFilter(tags=("eu",))) == {
            "completed": 5000,
            "failed": 5000,
        }


async def test_a_version_1_database_is_upgraded_in_place(url: str) -> None:
    # Version 1 as it was: its statements alone, and its version recorded.
    schema = url.rpartition("schema=")[2]
    await _sql(url, f'CREATE SCHEMA "{schema}"')
    await _sql(
        url,
        "CREATE TABLE schema_version (version integer PRIMARY KEY,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
    )
    for statement in _MIGRATIONS[0]:
        await _sql(url, statement)
    await _sql(url, "INSERT INTO schema_version (version) VALUES (1)")
    await _sql(
        url,
        "INSERT INTO runs (id, workflow, version, namespace, status, input, tags, compensate,"
        " recoveries, created_at, updated_at)"
        " VALUES ('a', 'w', '1', 'default', 'completed', '[1]', '[\"vip\",\"eu\"]', false, 0,"
        " 1, 1), ('b', 'w', '1', 'default', 'failed', '[]', '[\"eu\"]', false, 0, 2, 2)",
    )
    async with open_postgres_store(url) as store:
        a = await store.get_run("a")
        assert a is not None
        assert (a.input, a.tags) == ("[1]", ("vip", "eu"))
        assert [r.id for r in await store.find_runs(RunFilter(tags=("eu",)))] == ["b", "a"]
        await store.create_run(make_run("c", tags=("vip",), created_at=3.0))
        await store.save_checkpoint(make_checkpoint("c", 1))
        assert [r.id for r in await store.find_runs(RunFilter(tags=("vip",)))] == ["c", "a"]
        assert await store.prune_runs({"failed": 10.0}, 10) == ["b"]
        assert [r.id for r in await store.find_runs(RunFilter(tags=("eu",)))] == ["a"]
    versions = await _sql(url, "SELECT version FROM schema_version ORDER BY version")
    assert versions == [(v,) for v in range(1, SCHEMA_VERSION + 1)]
