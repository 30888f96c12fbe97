"""A PostgreSQL store written by the release before the kernel (schema
version 8), with runs in every state that release kept in a reserved seq or
in an error code, opens with this release's code and every run finishes as
it finished under the release that wrote it: tests/test_upgrade_pre_kernel.py
on PostgreSQL.

`tests/data/pre_kernel/postgres_rows.json` holds every row of every table
of the store as `tests/record_pre_kernel_stores.py` left it, recorded under
the real clock at ``recorded_at``. The test builds schema 8 in a fresh
schema by applying the store's first eight migrations (the list is append
only), puts the rows back, and finishes every run with a wall clock
`pre_kernel_app.OFFSET` seconds after the recording, where every timer of
the scenario is due.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

import psycopg
import trio
from psycopg import sql

import pre_kernel_app as pk
import trio_durable as td
from servers.postgres import scratch_schema
from test_upgrade_pre_kernel import (
    DATA,
    HANDOFF_BASE,
    MARKS,
    RESERVED_FROM,
    assert_marks_moved,
    expected,
)
from trio_durable._stores._postgres_schema import _MIGRATIONS

RECORDED_VERSION: Final = 8


def _query(url: str, statement: str) -> list[tuple[Any, ...]]:
    base, _, query = url.partition("?")
    with psycopg.connect(base, autocommit=True) as conn:
        schema = query.rpartition("schema=")[2]
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        return conn.execute(statement.encode()).fetchall()


def held(url: str) -> dict[str, Any]:
    """What a store of the recorded schema holds, as ``recorded`` says it."""
    runs: dict[str, Any] = {
        run_id: {"status": status, "reserved": [], "marks": []}
        for run_id, status in _query(url, "SELECT id, status FROM runs ORDER BY id")
    }
    rows = _query(
        url,
        "SELECT run_id, seq, kind, name, status, error::json ->> 'code'"
        " FROM checkpoints ORDER BY run_id, seq",
    )
    for run_id, seq, kind, name, status, code in rows:
        if seq >= RESERVED_FROM:
            runs[run_id]["reserved"].append([seq, kind, name, status])
        if status == "pending" and code in MARKS:
            runs[run_id]["marks"].append([seq, code])
    return runs


def state_left_in_seqs_or_codes(url: str) -> list[tuple[Any, ...]]:
    placeholders = ", ".join(f"'{mark}'" for mark in sorted(MARKS))
    return _query(
        url,
        "SELECT run_id, seq, error::json ->> 'code' FROM checkpoints"
        f" WHERE (seq >= {RESERVED_FROM} AND seq < {HANDOFF_BASE})"
        f" OR (status = 'pending' AND mark IS NULL AND error::json ->> 'code' IN ({placeholders}))",
    )


async def test_every_run_of_the_pre_kernel_postgres_store_finishes_as_recorded(
    real_server: Callable[[str], str],
) -> None:
    want = expected()["postgres"]
    recording = json.loads((DATA / "postgres_rows.json").read_text())
    tables = recording["tables"]
    assert [row["version"] for row in tables["schema_version"]] == list(
        range(1, RECORDED_VERSION + 1)
    )
    async with scratch_schema(real_server("postgres")) as url:
        await trio.to_thread.run_sync(
            pk.restore_postgres, url, _MIGRATIONS[:RECORDED_VERSION], tables
        )
        assert await trio.to_thread.run_sync(held, url) == want["recorded"]
        async with td.open_store(url) as store:
            # Opened by this release: migrated if its schema is newer, and
            # then no run state is left in a reserved seq or an error code,
            # and the marks are the steps' marks.
            version = (
                await trio.to_thread.run_sync(
                    _query, url, "SELECT max(version) FROM schema_version"
                )
            )[0][0]
            if version > RECORDED_VERSION:
                assert await trio.to_thread.run_sync(state_left_in_seqs_or_codes, url) == []
                await assert_marks_moved(store, want["recorded"])
            for run_id, run in want["recorded"].items():
                found = await store.get_run(run_id)
                assert found is not None, run_id
                assert found.status == run["status"], run_id
        wall = pk.RecordedWall(recording["recorded_at"])
        assert await pk.finish_store(url, wall) == want["outcomes"]
