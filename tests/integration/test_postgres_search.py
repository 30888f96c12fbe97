"""Search attributes in the PostgreSQL store, against a real server: a
database of schema version 4 with runs in it gains them in place, the
queries use ``run_search``'s indexes, and an engine sets and filters them."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._base._records import RunFilter
from trio_durable._base._search_values import SearchRange, conditions
from trio_durable._stores import _sql_queries
from trio_durable._stores._ops import PutValue, UpdateRun
from trio_durable._stores._postgres import open_postgres_store
from trio_durable._stores._postgres_ops import DIALECT
from trio_durable._stores._postgres_schema import SCHEMA_VERSION
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
    """The search column, run_search's columns and indexes, and the
    triggers on runs."""
    schema = _schema_of(url)
    columns = await _sql(
        url,
        "SELECT table_name, column_name, data_type, is_nullable, column_default"
        " FROM information_schema.columns WHERE table_schema = %s"
        " AND (table_name = 'run_search' OR column_name = 'search_attributes')"
        " ORDER BY table_name, ordinal_position",
        schema,
    )
    indexes = await _sql(
        url,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
        " AND tablename = 'run_search' ORDER BY indexname",
        schema,
    )
    triggers = await _sql(
        url,
        "SELECT trigger_name, event_manipulation FROM information_schema.triggers"
        " WHERE trigger_schema = %s ORDER BY trigger_name, event_manipulation",
        schema,
    )
    return columns + [(name, text.replace(schema, "")) for name, text in indexes] + triggers


async def test_a_version_4_database_gains_search_attributes_in_place(url: str) -> None:
    async with open_postgres_store(url) as store:
        await store.create_run(make_run("old", tags=("t",), created_at=1.0, input='["in"]'))
        await store.apply([PutValue("s", "k", '"v"', 1.0)])
    fresh = await _definition(url)
    assert any(row[0] == "run_search" for row in fresh)
    # Back to version 4, as a trio-durable of that version left it.
    for statement in (
        "DROP TRIGGER runs_search_insert ON runs",
        "DROP TRIGGER runs_search_update ON runs",
        "DROP TRIGGER runs_search_delete ON runs",
        "DROP FUNCTION run_search_sync()",
        "DROP TABLE run_search",
        "ALTER TABLE runs DROP COLUMN search_attributes",
        "DELETE FROM schema_version WHERE version >= 5",
    ):
        await _sql(url, statement)
    # A run written at version 4 (its row has no attributes column).
    await _sql(
        url,
        "INSERT INTO runs (id, workflow, version, namespace, status, input, tags, compensate,"
        " recoveries, created_at, updated_at) VALUES"
        " ('older', 'w', '1', 'default', 'pending', '[]', '[]', false, 0, 0.5, 0.5)",
    )
    async with open_postgres_store(url) as store:
        old = await store.get_run("old")
        assert old is not None
        assert (old.input, old.tags, dict(old.search_attributes)) == ('["in"]', ("t",), {})
        older = await store.get_run("older")
        assert older is not None
        assert dict(older.search_attributes) == {}
        assert await store.get_value("s", "k") is not None
        await store.apply([UpdateRun("old", {"search_attributes": {"region": "eu"}})])
        await store.create_run(
            make_run("new", created_at=2.0, search_attributes={"region": "eu", "n": 3})
        )
        types: Any = {"region": "str", "n": "int"}
        found = await store.find_runs(RunFilter(search=conditions({"region": "eu"}, types)))
        assert [run.id for run in found] == ["new", "old"]
        assert [r.id for r in await store.find_runs(RunFilter(tags=("t",)))] == ["old"]
    assert await _sql(url, "SELECT max(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    assert SCHEMA_VERSION == 13
    assert await _definition(url) == fresh


async def _plan(url: str, statement: str, params: list[Any]) -> str:
    rows = await _sql(url, f"EXPLAIN (COSTS OFF) {statement}", *params)
    return "\n".join(row[0] for row in rows)


async def test_search_queries_use_run_search_indexes(url: str) -> None:
    async with open_postgres_store(url):
        pass
    await _sql(
        url,
        "INSERT INTO runs (id, workflow, version, namespace, status, input, tags, compensate,"
        " recoveries, created_at, updated_at, search_attributes)"
        " SELECT 'r' || i, 'w', '1', 'default',"
        " CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'completed' END, '[]', '[]', false, 0, i, i,"
        " json_build_object('customer', json_build_array('str', 'c' || (i % 1000)),"
        " 'amount', json_build_array('int', i), 'score', json_build_array('float', i / 4.0),"
        " 'labels', json_build_array('keywords', json_build_array('all', 'l' || (i % 500))))::text"
        " FROM generate_series(1, 50000) AS i",
    )
    await _sql(url, "VACUUM ANALYZE")
    assert await _sql(url, "SELECT count(*) FROM run_search") == [(250000,)]
    types: Any = {"customer": "str", "amount": "int", "score": "float", "labels": "keywords"}
    for filters, index in (
        ({"customer": "c7"}, "run_search_text"),
        ({"labels": "l3"}, "run_search_text"),
        ({"amount": 4000}, "run_search_int"),
        ({"score": 1000.25}, "run_search_real"),
        ({"customer": "c7", "amount": SearchRange(ge=100)}, "run_search_text"),
    ):
        where = RunFilter(search=conditions(filters, types))
        for before in (None, (40000.0, "r40000")):
            [(statement, params)] = _sql_queries.find_runs_statements(DIALECT, where, before, 101)
            plan = await _plan(url, statement, params)
            assert index in plan, plan
            assert "Seq Scan" not in plan, plan
    where = RunFilter(search=conditions({"amount": SearchRange(gt=49990)}, types))
    [(statement, params)] = _sql_queries.find_runs_statements(DIALECT, where, None, 101)
    plan = await _plan(url, statement, params)
    assert "Seq Scan" not in plan, plan
    async with open_postgres_store(url) as store:
        found = await store.find_runs(where)
        assert [run.id for run in found] == [f"r{i}" for i in range(50000, 49990, -1)]
        assert found[0].search_attributes["labels"] == ("all", "l0")
        assert found[0].search_attributes["score"] == 12500.0
        counted = await store.count_runs(RunFilter(search=conditions({"labels": "l3"}, types)))
        assert counted == {"completed": 100}


app = td.App("pg-search")
app.search_attribute("customer", str)
app.search_attribute("due", datetime.datetime)
app.search_attribute("vip", bool)
app.search_attribute("stage", str)


@app.workflow()
async def ship(ctx: td.Context) -> None:
    ctx.upsert_search_attributes({"stage": "shipped", "vip": None})
    await ctx.sleep(0.5)


async def test_an_engine_sets_and_filters_attributes_on_postgres(url: str) -> None:
    due = datetime.datetime(2026, 12, 4, tzinfo=datetime.UTC)
    async with td.open_engine(app, store=url) as engine:
        first = await engine.start(
            ship, run_id="s1", search_attributes={"customer": "acme", "vip": True, "due": due}
        )
        await engine.start(ship, run_id="s2", search_attributes={"customer": "beta"})
        await first.result()
        run = await engine.get("s1")
        assert dict(run.search_attributes) == {"customer": "acme", "due": due, "stage": "shipped"}
        page = await engine.list_runs(search_attributes={"stage": "shipped", "customer": "acme"})
        assert [r.id for r in page.runs] == ["s1"]
        page = await engine.list_runs(search_attributes={"due": SearchRange(ge=due)})
        assert [r.id for r in page.runs] == ["s1"]
        assert (await engine.list_runs(search_attributes={"vip": True})).runs == ()
    other = td.App("other")
    other.search_attribute("vip", str)
    with pytest.raises(td.SearchAttributeError, match="records it as bool"):
        async with td.open_engine(other, store=url):
            pass
