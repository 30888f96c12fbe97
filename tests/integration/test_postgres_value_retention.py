"""Keyed values and retention in the PostgreSQL store, beyond the
conformance suite: a schema of version 7 gains the run a value goes with in
place, and the walks retention makes of the values use their indexes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from servers.postgres import scratch_schema
from trio_durable._stores._ops import CreateRun, PutValue
from trio_durable._stores._postgres import open_postgres_store
from trio_durable._stores._postgres_schema import SCHEMA_VERSION
from trio_durable._stores._values_sql import prune_values_statement
from trio_durable.testing.conformance._store_support import make_run


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


def _schema_of(url: str) -> str:
    return url.rpartition("schema=")[2]


async def _sql(url: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of one statement run in the URL's schema (in a worker thread)."""
    base = url.partition("?")[0]

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{_schema_of(url)}"')
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(run)


async def _definition(url: str) -> list[tuple[Any, ...]]:
    """The columns and indexes of ``durable_values``."""
    schema = _schema_of(url)
    columns = await _sql(
        url,
        "SELECT column_name, data_type, collation_name, is_nullable"
        " FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = 'durable_values' ORDER BY ordinal_position",
        schema,
    )
    indexes = await _sql(
        url,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
        " AND tablename = 'durable_values' ORDER BY indexname",
        schema,
    )
    return columns + [(name, text.replace(schema, "")) for name, text in indexes]


async def test_a_version_7_schema_gains_the_run_a_value_goes_with(url: str) -> None:
    async with open_postgres_store(url):
        pass
    fresh = await _definition(url)
    assert ("run_id", "text", None, "YES") in fresh
    # Back to version 7: durable_values without its column and indexes.
    await _sql(url, "ALTER TABLE durable_values DROP COLUMN run_id")
    await _sql(
        url,
        "INSERT INTO durable_values (scope, key, value, version, updated_at)"
        " VALUES ('s', 'old', '\"v\"', 1, 1.0), ('stream:r', '0', '1', 1, 1.0),"
        " ('run-event:r', 'k', '1', 1, 1.0), ('update:r', 'record/u', '{}', 1, 1.0),"
        " ('update:other', 'record/u', '{}', 1, 1.0), ('streams:r', '0', '1', 1, 1.0)",
    )
    await _sql(url, "DELETE FROM schema_version WHERE version >= 8")
    assert await _definition(url) != fresh
    async with open_postgres_store(url) as store:
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
    assert await _sql(url, "SELECT max(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    assert await _definition(url) == fresh
    assert SCHEMA_VERSION == 13


async def _plan(url: str, statement: str, params: tuple[Any, ...]) -> str:
    rows = await _sql(url, f"EXPLAIN (COSTS OFF) {statement}", *params)
    return "\n".join(row[0] for row in rows)


async def test_retention_walks_the_value_indexes(url: str) -> None:
    async with open_postgres_store(url):
        pass
    await _sql(
        url,
        "INSERT INTO durable_values (scope, key, value, version, updated_at, run_id)"
        " SELECT 'scope' || (i % 10), 'key' || i, '{}', 1, i,"
        " CASE WHEN i % 2 = 0 THEN 'r' || (i / 20) END"
        " FROM generate_series(1, 50000) AS i",
    )
    await _sql(url, "ANALYZE durable_values")
    statement = prune_values_statement("%s", " FOR UPDATE OF r SKIP LOCKED")
    plan = await _plan(url, statement, ("scope3", "scope3", 40_000.0, 50))
    assert "durable_values_age" in plan, plan
    assert "Sort" not in plan, plan
    assert "Seq Scan" not in plan, plan
    plan = await _plan(url, "DELETE FROM durable_values WHERE run_id = %s", ("r7",))
    assert "durable_values_run" in plan, plan
    assert "Seq Scan" not in plan, plan
