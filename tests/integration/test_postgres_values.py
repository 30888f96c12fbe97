"""Keyed values in the PostgreSQL store, beyond the conformance suite: the
migration that adds their table to an older schema, and the index their
reads walk."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

from servers.postgres import scratch_schema
from trio_durable._base._records import Run
from trio_durable._stores._ops import PutValue
from trio_durable._stores._postgres import open_postgres_store
from trio_durable._stores._postgres_schema import SCHEMA_VERSION
from trio_durable._stores._values_sql import list_values_query


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
    """The columns (with their collations) and indexes of ``durable_values``."""
    columns = await _sql(
        url,
        "SELECT column_name, data_type, collation_name, is_nullable"
        " FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = 'durable_values' ORDER BY ordinal_position",
        _schema_of(url),
    )
    indexes = await _sql(
        url,
        "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
        " AND tablename = 'durable_values'",
        _schema_of(url),
    )
    schema = _schema_of(url)
    return columns + [(name, text.replace(schema, "")) for name, text in indexes]


async def test_a_version_3_schema_gains_keyed_values(url: str) -> None:
    async with open_postgres_store(url) as store:
        await store.create_run(Run(id="kept", workflow="w"))
    fresh = await _definition(url)
    assert fresh
    # Back to version 3, before keyed values.
    await _sql(url, "DROP TABLE durable_values")
    # (Migration 5, which makes what it makes only where it is missing,
    # applies again.)
    await _sql(url, "DELETE FROM schema_version WHERE version >= 4")
    async with open_postgres_store(url) as store:
        assert [run.id for run in await store.list_runs()] == ["kept"]
        assert await store.apply([PutValue("s", "k", '"v"', 1.0)]) == [1]
        value = await store.get_value("s", "k")
        assert value is not None
        assert (value.value, value.version) == ('"v"', 1)
    assert await _sql(url, "SELECT max(version) FROM schema_version") == [(SCHEMA_VERSION,)]
    assert await _definition(url) == fresh
    assert SCHEMA_VERSION == 13


async def _plan(url: str, statement: str, params: tuple[Any, ...]) -> str:
    rows = await _sql(url, f"EXPLAIN (COSTS OFF) {statement}", *params)
    return "\n".join(row[0] for row in rows)


async def test_value_pages_walk_the_primary_key_in_order(url: str) -> None:
    async with open_postgres_store(url):
        pass
    # Enough rows that the planner would rather scan and sort if the index
    # did not serve the order (keys compare as bytes: the "C" collation).
    await _sql(
        url,
        "INSERT INTO durable_values (scope, key, value, version, updated_at)"
        " SELECT 'scope' || (i % 10), 'key:' || lpad(i::text, 6, '0'), '{}', 1, i"
        " FROM generate_series(1, 50000) AS i",
    )
    await _sql(url, "ANALYZE durable_values")
    for prefix, after in (("", None), ("key:00", None), ("key:0", "key:004"), ("", "key:03")):
        statement, params = list_values_query("%s", "scope3", prefix, after, 100)
        plan = await _plan(url, statement, params)
        assert "durable_values_pkey" in plan, plan
        assert "Sort" not in plan, plan
        assert "Seq Scan" not in plan, plan
    async with open_postgres_store(url) as store:
        page = await store.list_values("scope3", prefix="key:0001", limit=3)
        assert [value.key for value in page] == ["key:000103", "key:000113", "key:000123"]
        rest = await store.list_values("scope3", prefix="key:0001", after="key:000173")
        assert [value.key for value in rest] == ["key:000183", "key:000193"]


ROUNDS = 200
KEYS = [f"key-{i:02}" for i in range(8)]


async def test_batches_writing_the_same_keys_in_opposite_orders_never_deadlock(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two stores (as two engines would) write the same keys in opposite
    orders at once, 200 times: each batch upserts the keys every round
    writes, and inserts keys new to the round unless the other batch did. Locked in one order (the
    keys', sorted), the batches queue; locked in the order each one writes
    them, two such batches deadlock (PostgreSQL notices after
    ``deadlock_timeout``, a second, and the store runs the trip again)."""
    caplog.set_level(logging.WARNING, logger="trio_durable")
    async with open_postgres_store(url) as first, open_postgres_store(url) as second:
        for n in range(ROUNDS):
            forward = [
                op
                for key in KEYS
                for op in (
                    PutValue("shared", key, f'"{n}"', float(n)),
                    PutValue(
                        "fresh", f"{n}:{key}", '"new"', float(n), expect_version=0, strict=False
                    ),
                )
            ]
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first.apply, forward)
                nursery.start_soon(second.apply, forward[::-1])
        assert caplog.messages == []
        for key in KEYS:
            value = await first.get_value("shared", key)
            assert value is not None
            assert value.version == 2 * ROUNDS
        assert len(await first.list_values("fresh", limit=10 * ROUNDS * len(KEYS))) == ROUNDS * len(
            KEYS
        )
