"""A PostgreSQL store of schema version 7 (before keyed values went with
runs) migrates with nothing lost, and retention then prunes what goes with
each run: tests/test_values_store_upgrade.py on PostgreSQL.

The store is written by the workload of tests/record_values_store.py (runs
that ended and runs in flight, a keyed value of every family), then taken
back to version 7: ``durable_values`` without ``run_id`` (its indexes go
with it), the runs' records back in checkpoints at the seqs (names and
kinds) that release kept them at, ``run_records`` dropped, and the version
rows of 8 and 9 deleted, which leaves the tables, columns, indexes and
triggers a release of version 7 creates.
"""

from __future__ import annotations

from ast import literal_eval
from collections.abc import Callable
from typing import Any, Final

import psycopg
import trio
from psycopg import sql

import trio_durable as td
from conftest import EngineFactory
from record_values_store import app, record
from servers.postgres import scratch_schema
from test_values_store_upgrade import Sql, check_migrated, finish_and_prune, owners
from trio_durable._stores._migrations_records import ADMISSION_SEQ, MOVED_TO_RECORDS
from trio_durable._stores._postgres_schema import SCHEMA_VERSION
from trio_durable.stores import QUEUE_SLOT, WHOLE_RUN

EARLIER: Final = {
    "checked_from": ("'check_arguments'", "'local'"),
    "updates": ("'updates'", "'signal'"),
    "deadline": ("'deadline'", "'timer'"),
    "continued": ("(SELECT workflow FROM runs WHERE id = r.run_id)", "'child'"),
}
"""The name and kind of checkpoint a record was before schema 9, where it
was not its own kind and ``local``."""

KINDS: Final = {**MOVED_TO_RECORDS, ADMISSION_SEQ: "admission"}
"""The seq each kind of record was kept at before schemas 9 and 10."""

BACK_TO_CHECKPOINTS: Final = (
    "INSERT INTO checkpoints (run_id, seq, name, kind, status, input, output, error, errors,"
    " attempts, worker_group, child_id, wake_at, enqueued_at, started_at, finished_at,"
    " executions)"
    " SELECT run_id, "
    + "CASE kind "
    + " ".join(f"WHEN '{kind}' THEN {seq}" for seq, kind in KINDS.items())
    + " END, CASE kind "
    + " ".join(f"WHEN '{kind}' THEN {name}" for kind, (name, _) in EARLIER.items())
    + " ELSE kind END, CASE kind "
    + " ".join(f"WHEN '{kind}' THEN {ckind}" for kind, (_, ckind) in EARLIER.items())
    + " ELSE 'local' END, status, input, output,"
    # A run waiting in line: the error code marked it.
    " CASE WHEN kind = 'admission' AND status = 'pending' AND output IS NULL AND NOT EXISTS"
    f" (SELECT 1 FROM run_records s WHERE s.run_id = r.run_id AND s.kind = '{QUEUE_SLOT}')"
    """ THEN '{"message":"waiting for a slot","code":"queued"}' ELSE error END,"""
    " errors, attempts, worker_group,"
    " CASE kind WHEN 'continued' THEN output::json #>> '{}' END,"
    " wake_at, enqueued_at, started_at, finished_at, executions FROM run_records r"
    f" WHERE kind <> '{QUEUE_SLOT}'",
    f"UPDATE queue_slots SET seq = {ADMISSION_SEQ} WHERE seq = {WHOLE_RUN}",
    f"UPDATE queue_waiters SET seq = {ADMISSION_SEQ} WHERE seq = {WHOLE_RUN}",
)
"""Puts every record back where a release of schema 7 kept it."""


def _runner(url: str) -> Sql:
    base, schema = url.partition("?")[0], url.rpartition("schema=")[2]

    async def run(statement: str) -> list[tuple[Any, ...]]:
        def trip() -> list[tuple[Any, ...]]:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
                cur = conn.execute(statement.encode())
                return cur.fetchall() if cur.description else []

        return await trio.to_thread.run_sync(trip)

    return run


async def _rows(run: Sql) -> dict[str, list[str]]:
    """Every row of every table, in every column of version 7 (all but
    ``durable_values.run_id``), as text, sorted; ``schema_version`` aside."""
    columns = await run(
        "SELECT table_name, column_name FROM information_schema.columns"
        " WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position"
    )
    tables: dict[str, list[str]] = {}
    for table, column in columns:
        if (table, column) != ("durable_values", "run_id") and table != "schema_version":
            tables.setdefault(table, []).append(column)
    found = {}
    for table, names in tables.items():
        listed = ", ".join(f'"{name}"::text' for name in names)
        found[table] = sorted(repr(row) for row in await run(f'SELECT {listed} FROM "{table}"'))
    return found


async def test_a_store_of_schema_7_migrates_whole_and_its_runs_values_go_with_them(
    real_server: Callable[[str], str], open_test_engine: EngineFactory
) -> None:
    async with scratch_schema(real_server("postgres")) as url:
        run = _runner(url)
        await record(url)
        await run("ALTER TABLE durable_values DROP COLUMN run_id")
        for statement in BACK_TO_CHECKPOINTS:
            await run(statement)
        await run("DROP TABLE run_records")
        await run("DELETE FROM schema_version WHERE version >= 8")
        before = await _rows(run)
        # The recording's runs, their checkpoints and keyed values are there
        # (how many of its runs are mid-way when it stops depends on timing).
        assert before["runs"]
        assert before["checkpoints"]
        assert before["durable_values"]

        # Opening the store migrates it, and changes no row of any table but
        # the checkpoints at reserved seqs, which become the runs' records.
        async with td.open_store(url):
            pass
        versions = await run("SELECT version FROM schema_version ORDER BY version")
        assert versions == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
        assert SCHEMA_VERSION == 13
        after = await _rows(run)
        moved = [row for row in before["checkpoints"] if int(literal_eval(row)[1]) in KINDS]
        # The recording's runs have streams, update logs, admissions, ...
        assert {KINDS[int(literal_eval(row)[1])] for row in moved} >= {"stream", "admission"}
        kept = dict(before, checkpoints=[row for row in before["checkpoints"] if row not in moved])
        # The slots runs hold and wait for are theirs as whole runs now.
        for table in ("queue_slots", "queue_waiters"):
            kept[table] = sorted(
                row.replace(f"'{ADMISSION_SEQ}'", f"'{WHOLE_RUN}'") for row in kept[table]
            )
        assert {table: rows for table, rows in after.items() if table in before} == kept
        assert len(after["run_records"]) == len(moved) + len(kept["queue_slots"])
        claims = check_migrated(await owners(run))
        async with open_test_engine(app, store=url) as engine:
            await finish_and_prune(engine, run, claims, settle=0.01)
