"""What a retry replaced, on the real PostgreSQL server: a run retried twice
(from its failures, then from a seq) keeps both in its history, read by a
client and by ``trio-durable runs history --json``; under a codec it is
encrypted in the values table; pruning the run removes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
import trio
from psycopg import sql

import trio_durable as td
from servers.postgres import scratch_schema
from test_cli import invoke
from trio_durable._features.lifecycle._retried import retried_scope

app = td.App("retried_pg")
CARD = "SECRET-4111-1111"
RING = td.Keyring.single(bytes(range(16)), "k1")
failing: dict[str, int] = {}


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    failing.clear()
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


@app.step(retry=td.Retry(attempts=2, backoff=0.01, jitter=0.0))
async def charge(card: str) -> str:
    if failing.get(card, 0) > 0:
        failing[card] -= 1
        raise ValueError(f"card {card} declined")
    return f"paid-{card[-4:]}"


@app.step()
async def reserve(card: str) -> str:
    return f"reserved-{card[-4:]}"


@app.workflow()
async def checkout(ctx: td.Context, card: str) -> str:
    await ctx.step(reserve, card)
    return await ctx.step(charge, card)


def _stored_values(url: str, scope: str) -> list[str]:
    base, _, schema = url.rpartition("schema=")
    with psycopg.connect(base.rstrip("?&")) as conn:
        rows = conn.execute(
            sql.SQL("SELECT value FROM {}.durable_values WHERE scope = %s").format(
                sql.Identifier(schema)
            ),
            (scope,),
        ).fetchall()
    return [str(row[0]) for row in rows]


async def test_a_run_retried_twice_keeps_both_on_postgres(url: str) -> None:
    failing["visa"] = 2
    with trio.fail_after(60):
        async with td.open_engine(app, store=url, seed=1) as engine:
            await engine.start(checkout, "visa", run_id="c")
            with pytest.raises(td.RunFailed):
                await engine.result("c")
            await engine.retry("c")
            assert await engine.result("c") == "paid-visa"
            await engine.retry("c", from_seq=2)
            assert await engine.result("c") == "paid-visa"
            await engine.drain()
        async with td.open_client(url) as client:
            history = await client.history("c")
    first, second = history.retried
    assert (first.retry, first.status, first.from_seq) == (1, "failed", None)
    assert first.error is not None
    assert first.error.traceback is not None
    assert "card visa declined" in first.error.traceback
    [failed] = first.entries
    assert (failed.seq, failed.status, failed.attempts) == (2, "failed", 2)
    assert all(e.traceback and "card visa declined" in e.traceback for e in failed.errors)
    assert (second.retry, second.status, second.from_seq) == (2, "completed", 2)
    assert [(e.seq, e.status) for e in second.entries] == [(2, "completed")]
    assert first.retried_at < second.retried_at

    shown = await trio.to_thread.run_sync(
        lambda: invoke(["runs", "history", "c", "--store", url, "--json"])
    )
    assert shown.exit_code == 0, shown.output
    document = json.loads(shown.stdout)
    assert [kept["retry"] for kept in document["retried"]] == [1, 2]
    assert "card visa declined" in document["retried"][0]["error"]["traceback"]


async def test_a_codec_encrypts_it_and_pruning_removes_it_on_postgres(url: str) -> None:
    failing[CARD] = 2
    codec = td.AesGcmCodec(RING)
    with trio.fail_after(60):
        async with td.open_engine(app, store=url, seed=1, codec=codec) as engine:
            await engine.start(checkout, CARD, run_id="c")
            with pytest.raises(td.RunFailed):
                await engine.result("c")
            await engine.retry("c")
            await engine.result("c")
            await engine.drain()
            [kept] = (await engine.history("c")).retried
            assert kept.error is not None
            assert kept.error.message == f"card {CARD} declined"
            [stored] = await trio.to_thread.run_sync(_stored_values, url, retried_scope("c"))
            assert stored.startswith("~enc:")
            assert CARD not in stored
            assert "declined" not in stored
            assert await engine.prune(td.Retention(completed=0)) == 1
            assert await trio.to_thread.run_sync(_stored_values, url, retried_scope("c")) == []
