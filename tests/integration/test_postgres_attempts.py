"""Attempt times on PostgreSQL, end to end: an engine records each attempt's
start and end, the history reads them back, and a checkpoint whose errors
were written before attempts had times reads with none (the store's own
checks of them are in the store conformance suite)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema

app = td.App("postgres-attempts")
calls: list[int] = []


@app.step(retry=td.Retry(attempts=3, backoff=0.01, jitter=0))
async def wobbly() -> str:
    calls.append(1)
    await trio.sleep(0.02)
    if len(calls) < 3:
        raise ValueError(f"wobble {len(calls)}")
    return "steady"


@app.workflow()
async def steady(ctx: td.Context) -> str:
    return await ctx.step(wobbly)


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_each_attempt_keeps_its_times_and_older_rows_read_without(url: str) -> None:
    calls.clear()
    async with td.open_engine(app, store=url) as engine:
        await engine.start(steady, run_id="s")
        assert await engine.result("s") == "steady"
        [entry] = (await engine.history("s")).entries
        log = entry.attempt_log
        assert [(a.number, a.status) for a in log] == [
            (1, "failed"),
            (2, "failed"),
            (3, "completed"),
        ]
        for attempt, later in itertools.pairwise(log):
            assert attempt.duration is not None
            assert attempt.duration >= 0.02
            assert attempt.finished_at is not None
            assert later.started_at is not None
            assert attempt.finished_at <= later.started_at
        assert entry.enqueued_at == log[0].started_at

        # As a release before wrote it: errors without times.
        schema = url.rpartition("schema=")[2]

        def rewrite() -> None:
            with psycopg.connect(url.partition("?")[0], autocommit=True) as conn:
                conn.execute(f'SET search_path = "{schema}"')
                conn.execute(
                    "UPDATE checkpoints SET errors = %s WHERE run_id = 's'",
                    ('[{"message":"wobble 1"},{"message":"wobble 2"}]',),
                )

        await trio.to_thread.run_sync(rewrite)
        [old] = (await engine.history("s")).entries
    assert [e.message for e in old.errors] == ["wobble 1", "wobble 2"]
    assert [(a.started_at, a.finished_at) for a in old.attempt_log[:2]] == [(None, None)] * 2
    # Then a local step's start was its first attempt's: its last one's is
    # not known.
    assert old.attempt_log[2].started_at is None
