"""A PostgreSQL store of schema version 6 (before execution ids) with runs
in flight opens, gains the columns in place, and finishes those runs: the
results of their tasks, which carry no execution id, settle by the
rolling-upgrade rule (see tests/execution_upgrade.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import trio

from execution_upgrade import finish_in_flight_runs, runs_in_flight
from servers.postgres import scratch_schema
from trio_durable._stores._postgres_schema import SCHEMA_VERSION


async def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows of one statement run in the URL's schema (in a worker thread)."""
    base, schema = url.partition("?")[0], url.rpartition("schema=")[2]

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{schema}"')
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(run)


_STATE = (
    "SELECT (SELECT max(version) FROM schema_version), array(SELECT column_name::text"
    " FROM information_schema.columns WHERE table_schema = current_schema()"
    " AND table_name = 'checkpoints' AND column_name IN ('executions', 'rerun')"
    " ORDER BY column_name)"
)


async def test_a_version_6_schema_migrates_and_finishes_its_runs_in_flight(
    real_server: Callable[[str], str],
) -> None:
    async with scratch_schema(real_server("postgres")) as url:
        await runs_in_flight(url)
        # Back to version 6, as a trio-durable of that version left it.
        await _sql(url, "ALTER TABLE checkpoints DROP COLUMN executions, DROP COLUMN rerun")
        await _sql(url, "DELETE FROM schema_version WHERE version = 7")
        assert await _sql(url, _STATE) == [(6, [])]

        await finish_in_flight_runs(url)
        assert await _sql(url, _STATE) == [(SCHEMA_VERSION, ["executions", "rerun"])]
