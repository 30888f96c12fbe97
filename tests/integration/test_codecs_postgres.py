"""Payload codecs on PostgreSQL (docs/payload-codecs.md): runs through
engines whose store is wrapped in a `CodecStore` leave no plaintext in any
row of any table, a run started under k1 finishes under {k2 current, k1}
on another engine, and a client without k1 gets `CodecError` for a run
while counting and listing runs still work. Real time (the store's calls go
to threads)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import psycopg
import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from test_codecs import APPROVER, CARD, RING1, RING9, RING21, app, checkout, declined
from trio_durable._payloads._stored_payloads import codec_text


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def _every_row(url: str) -> str:
    """Every row of every table of the URL's schema, as text."""
    base, schema = url.partition("?")[0], url.rpartition("schema=")[2]

    def read() -> str:
        rows: list[str] = []
        with psycopg.connect(base, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            ).fetchall()
            assert len(tables) >= 5
            for (table,) in tables:
                cur = conn.execute(f'SELECT t::text FROM "{schema}"."{table}" t')
                rows.extend(str(row[0]) for row in cur.fetchall())
        return "\n".join(rows)

    return await trio.to_thread.run_sync(read)


def _engine(url: str, ring: td.Keyring, engine_id: str) -> Any:
    return td.open_engine(
        app, store=url, serve=["remote"], codec=td.AesGcmCodec(ring), engine_id=engine_id
    )


async def test_no_row_holds_a_payload_in_the_clear(url: str) -> None:
    async with _engine(url, RING1, "one") as engine:
        run = await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.signal(run.id, "approved", {"by": APPROVER})
        assert (await engine.result(run.id))["approval"] == {"by": APPROVER}
        await engine.start(checkout, {"card": CARD}, run_id="order-2")
        await engine.signal("order-2", "approved", APPROVER)
        with pytest.raises(td.RunFailed) as caught:
            await engine.result((await engine.start(declined, CARD, run_id="bad-1")).id)
        assert caught.value.details == {"card": CARD}
        receipt = await engine.send_event("order.placed", {"card": CARD}, event_id="ev-1")
        assert await engine.result(receipt.run_ids[0]) == CARD[-4:]
        assert (await engine.result("order-2"))["approval"] == APPROVER
        await engine.drain()
    rows = await _every_row(url)
    assert "SECRET" not in rows
    assert '"$enc":"k1"' in rows.replace("\\", "").replace('""', '"')
    assert "declined" in rows
    assert "encrypted with k1" in rows


async def test_a_run_started_under_k1_finishes_under_k2_on_another_engine(url: str) -> None:
    async with _engine(url, RING1, "one") as engine:
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.drain()
    async with _engine(url, RING21, "two") as engine:
        await engine.signal("order-1", "approved", APPROVER)
        assert (await engine.result("order-1"))["receipt"] == f"charged {CARD}"
    async with td.open_client(url) as plain:
        run = await plain.get("order-1")
    assert json.loads(codec_text(run.input) or "")["$enc"] == "k1"
    assert json.loads(codec_text(run.output) or "")["$enc"] == "k2"
    assert "SECRET" not in await _every_row(url)


async def test_a_missing_key_is_its_own_error_and_counts_still_work(url: str) -> None:
    async with _engine(url, RING1, "one") as engine:
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        with pytest.raises(td.RunFailed):
            await engine.result((await engine.start(declined, CARD, run_id="bad-1")).id)
        await engine.drain()
    async with td.open_client(url, codec=td.AesGcmCodec(RING9)) as wrong:
        with pytest.raises(td.CodecError, match="key 'k1'"):
            await wrong.get("order-1")
        with pytest.raises(td.CodecError, match="key 'k1'"):
            await wrong.result("bad-1")
        page = await wrong.list_runs(facets=True)
        assert sorted(run.id for run in page.runs) == ["bad-1", "order-1"]
        assert page.facets == {"suspended": 1, "failed": 1}
