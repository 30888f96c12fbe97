"""A PostgreSQL store of an older schema, on the real server: the read
commands, a client and ``trio-durable engine`` refuse it (exit status 3,
`td.SchemaVersionError`) and change nothing in it; ``trio-durable
migrate`` upgrades it, logging each step at WARNING.

The store is made at schema version 2 by the first two migrations, which
are append-only: what a release of that version created."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
import trio
from psycopg import sql

import trio_durable as td
from servers.postgres import scratch_schema
from test_cli import invoke, one_error_line
from trio_durable._stores._postgres_schema import _MIGRATIONS, SCHEMA_VERSION

OLD = 2

Snapshot = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


def _schema_of(url: str) -> tuple[str, str]:
    base, _, schema = url.rpartition("schema=")
    return base.rstrip("?&"), schema


def _make_old(url: str) -> None:
    base, schema = _schema_of(url)
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(
            "CREATE TABLE schema_version (version integer PRIMARY KEY,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version in range(OLD):
            for statement in _MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (version + 1,))


def _snapshot(url: str) -> Snapshot:
    """The schema's versions, columns and indexes, as the server has them."""
    base, schema = _schema_of(url)
    with psycopg.connect(base) as conn:
        versions = conn.execute(
            sql.SQL("SELECT version, applied_at FROM {}.schema_version ORDER BY version").format(
                sql.Identifier(schema)
            )
        ).fetchall()
        columns = conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema = %s ORDER BY table_name, column_name",
            (schema,),
        ).fetchall()
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s ORDER BY indexname",
            (schema,),
        ).fetchall()
    return versions, columns, indexes


@pytest.fixture
async def old_store(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as url:
        await trio.to_thread.run_sync(_make_old, url)
        yield url


async def test_an_older_postgres_schema_is_refused_unchanged_then_migrated(
    old_store: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = old_store
    before = await trio.to_thread.run_sync(_snapshot, url)
    assert [v for v, _ in before[0]] == [1, 2]
    for args in (
        ["runs", "list", "--store", url],
        ["runs", "show", "some-run", "--store", url],
        ["runs", "history", "some-run", "--store", url],
        ["engine", "cli_app:app", "--store", url, "--serve", "cli"],
    ):
        result = await trio.to_thread.run_sync(invoke, args)
        assert result.exit_code == 3, (args, result.output)
        error = one_error_line(result)
        assert f"has schema version {OLD}, older than {SCHEMA_VERSION}" in error, error
        assert "trio-durable migrate --store" in error
        assert await trio.to_thread.run_sync(_snapshot, url) == before, args
    with pytest.raises(td.SchemaVersionError) as refused:
        async with td.open_client(url):
            pass  # pragma: no cover
    assert (refused.value.found, refused.value.newest) == (OLD, SCHEMA_VERSION)
    assert await trio.to_thread.run_sync(_snapshot, url) == before

    with caplog.at_level("WARNING"):
        result = await trio.to_thread.run_sync(invoke, ["migrate", "--store", url])
    assert result.exit_code == 0, result.output
    assert f"upgraded the schema from version {OLD} to {SCHEMA_VERSION}" in result.output
    steps = [
        r.getMessage() for r in caplog.records if "upgrading the PostgreSQL store" in r.getMessage()
    ]
    assert len(steps) == SCHEMA_VERSION - OLD
    assert steps[0].endswith(f"from schema version {OLD} to {OLD + 1}")
    after = await trio.to_thread.run_sync(_snapshot, url)
    assert [v for v, _ in after[0]] == list(range(1, SCHEMA_VERSION + 1))
    async with td.open_client(url) as client:
        assert (await client.list_runs()).runs == ()
