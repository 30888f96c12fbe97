"""The PostgreSQL store writes a run's input once: turns do not rewrite it.

PostgreSQL keeps a large value out of line, in the table's TOAST relation, as
chunks; an UPDATE that leaves the column alone keeps the new row version
pointing at the same chunks, while one that sets the column (even to the same
value) writes new chunks. So after the run's first turn the chunks holding its
input must stay the very same tuples (same ``xmin``) through every later turn,
and the TOAST relation must not grow, while the run's own row is rewritten by
each turn. Autovacuum is off for the table, so nothing frees or reuses space
behind the test's back.
"""

from __future__ import annotations

import random
import string
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema

PATIENCE = 30.0
"""Seconds the test waits at most for the run."""

INPUT_SIZE = 2_000_000

app = td.App("postgres-write-volume")


@app.workflow()
async def wait_then_ten_timers(ctx: td.Context, payload: str) -> int:
    await ctx.wait_signal("go")
    for _ in range(10):
        await ctx.sleep(0.01)
    return len(payload)


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def _sql(url: str, statement: str) -> list[tuple[Any, ...]]:
    """Rows of one statement run in the URL's schema (in a worker thread)."""
    base, schema = url.partition("?")[0], url.rpartition("schema=")[2]

    def run() -> list[tuple[Any, ...]]:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'SET search_path = "{schema}"')
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    return await trio.to_thread.run_sync(run)


async def _input_storage(url: str) -> tuple[list[str], int, str]:
    """The xmins of the live TOAST chunks of the runs table, its TOAST
    relation's size, and the xmin of the run's row."""
    [(toast,)] = await _sql(
        url, "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'runs'::regclass"
    )
    chunks = await _sql(url, f"SELECT DISTINCT xmin::text FROM {toast}")
    [(size,)] = await _sql(url, f"SELECT pg_relation_size('{toast}'::regclass)")
    [(row,)] = await _sql(url, "SELECT xmin::text FROM runs WHERE id = 'big'")
    return sorted(xmin for (xmin,) in chunks), size, row


async def test_turns_do_not_rewrite_a_runs_input(url: str) -> None:
    payload = "".join(random.Random(0).choices(string.ascii_letters, k=INPUT_SIZE))
    async with td.open_engine(app, store=url, seed=0) as engine:
        await _sql(
            url,
            "ALTER TABLE runs SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)",
        )
        with trio.fail_after(PATIENCE):
            await engine.start(wait_then_ten_timers, payload, run_id="big")
            await engine.drain()
            chunks, size, row = await _input_storage(url)
            turns = engine.statistics().turns
            await engine.signal("big", "go", None)
            assert await engine.result("big") == INPUT_SIZE
        assert engine.statistics().turns >= turns + 10
        chunks_after, size_after, row_after = await _input_storage(url)
    # The input is out of line, in chunks all written by one transaction.
    assert len(chunks) == 1
    assert size >= INPUT_SIZE
    # The turns rewrote the run's row, but not one chunk of its input.
    assert row_after != row
    assert chunks_after == chunks
    assert size_after == size
