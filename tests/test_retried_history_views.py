"""What a retry replaced, where people read a run: ``trio-durable runs
history`` (its tables and ``--json``) and ``runs show``, the console's JSON
API for the run and its history, and its run page, on a SQLite file; and a
payload codec keeping it encrypted at rest, shown as such without the keys.
"""

from __future__ import annotations

import base64
import html
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

import trio_durable as td
from conftest import fixed_wall
from test_cli import invoke
from trio_durable._features.lifecycle._retried import retried_scope
from trio_durable.console import console_app

app = td.App("retried-views")
CARD = "SECRET-4111-1111"
K1 = bytes(range(16))
RING1 = td.Keyring.single(K1, "k1")
KEYS = f"k1:{base64.b64encode(K1).decode()}"
failing: dict[str, int] = {}


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def charge(card: str) -> str:
    if failing.get(card, 0) > 0:
        failing[card] -= 1
        raise ValueError(f"card {card} declined")
    return f"paid-{card[-4:]}"


@app.workflow()
async def checkout(ctx: td.Context, card: str) -> str:
    return await ctx.step(charge, card)


async def _fill(url: str, card: str, retries: int, codec: td.PayloadCodec | None) -> None:
    """Run ``c`` fails ``retries`` times, is retried after each, and completes."""
    failing[card] = 2 * retries
    async with td.open_engine(app, store=url, seed=0, wall_clock=fixed_wall, codec=codec) as engine:
        await engine.start(checkout, card, run_id="c")
        for _ in range(retries):
            with pytest.raises(td.RunFailed):
                await engine.result("c")
            await engine.retry("c")
        await engine.result("c")
        await engine.drain()


def _filled(tmp_path: Path, card: str, retries: int, codec: td.PayloadCodec | None = None) -> str:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    trio.run(_fill, url, card, retries, codec)
    return url


@asynccontextmanager
async def console(url: str, codec: td.PayloadCodec | None) -> AsyncIterator[httpx.AsyncClient]:
    async with td.open_client(url, codec=codec) as client:
        transport = httpx.ASGITransport(app=console_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
            yield http


def test_runs_history_shows_each_retry_with_its_tracebacks(tmp_path: Path) -> None:
    url = _filled(tmp_path, "visa", 2)
    shown = invoke(["runs", "history", "c", "--store", url])
    assert shown.exit_code == 0, shown.output
    out = shown.stdout
    # Two retries, in order, each with the run's failure then, the failed
    # step, and the tracebacks.
    first, second = out.index("Before retry 1"), out.index("Before retry 2")
    assert out.index("Timeline of c") < first < second
    assert "from its failures): the run was failed: StepFailed: card visa declined" in out
    assert out.count("Retry 1: seq 1 (charge), attempt 2, ValueError: card visa declined") == 1
    assert out.count("Retry 2: seq 1 (charge), attempt 2, ValueError: card visa declined") == 1
    assert out.count('raise ValueError(f"card {card} declined")') >= 4
    assert "Traceback (most recent call last)" in out

    as_json = invoke(["runs", "history", "c", "--store", url, "--json"])
    assert as_json.exit_code == 0, as_json.output
    document = json.loads(as_json.stdout)
    assert document["run"]["status"] == "completed"
    assert [kept["retry"] for kept in document["retried"]] == [1, 2]
    for kept in document["retried"]:
        assert kept["status"] == "failed"
        assert kept["from_seq"] is None
        assert "card visa declined" in kept["error"]["traceback"]
        [entry] = kept["entries"]
        assert (entry["seq"], entry["status"], entry["attempts"]) == (1, "failed", 2)
        assert all("_fill" not in e["traceback"] for e in entry["errors"])
        assert all("card visa declined" in e["traceback"] for e in entry["errors"])

    detail = invoke(["runs", "show", "c", "--store", url])
    assert detail.exit_code == 0, detail.output
    assert "Before retry 1" in detail.stdout
    assert "Before retry 2" in detail.stdout


def test_the_console_shows_each_retry_in_its_api_and_on_the_run_page(tmp_path: Path) -> None:
    url = _filled(tmp_path, "visa", 1)

    async def main() -> None:
        async with console(url, None) as http:
            for path in ("/api/runs/c", "/api/runs/c/history"):
                response = await http.get(path)
                assert response.status_code == 200, response.text
                [kept] = response.json()["retried"]
                assert (kept["retry"], kept["status"], kept["from_seq"]) == (1, "failed", None)
                assert "card visa declined" in kept["error"]["traceback"]
                [entry] = kept["entries"]
                assert entry["type"] == "operation"
                assert (entry["seq"], entry["name"], entry["status"]) == (1, "charge", "failed")
                assert [e["message"] for e in entry["errors"]] == ["card visa declined"] * 2
                assert "raise ValueError" in entry["errors"][-1]["traceback"]
            page = await http.get("/runs/c")
            assert page.status_code == 200
            text = html.unescape(page.text)
            assert "Before retry 1" in text
            assert "from its failures" in text
            assert 'raise ValueError(f"card {card} declined")' in text
            assert text.index("Timeline") < text.index("Before retry 1")

    trio.run(main)


def test_a_codec_keeps_what_a_retry_replaced_encrypted(tmp_path: Path) -> None:
    url = _filled(tmp_path, CARD, 1, td.AesGcmCodec(RING1))
    connection = sqlite3.connect(tmp_path / "runs.db")
    try:
        dump = "\n".join(connection.iterdump())
    finally:
        connection.close()
    assert CARD not in dump
    assert "declined" not in dump

    async def main() -> None:
        async with td.open_client(url, codec=td.AesGcmCodec(RING1)) as client:
            [stored] = await client.store.list_values(retried_scope("c"))
            [kept] = (await client.history("c")).retried
        assert CARD in stored.value
        assert kept.error is not None
        assert kept.error.message == f"card {CARD} declined"
        assert kept.error.traceback is not None
        assert CARD in kept.error.traceback
        async with td.open_client(url) as client:
            [sealed] = (await client.history("c")).retried
        assert (sealed.retry, sealed.status, sealed.entries) == (1, None, ())
        assert sealed.retried_at == kept.retried_at
        assert sealed.encrypted_with == "k1"
        async with console(url, None) as http:
            [shown] = (await http.get("/api/runs/c/history")).json()["retried"]
            assert shown["encrypted_with"] == "k1"
            assert "sealed" not in shown
            page = (await http.get("/runs/c")).text
            assert "encrypted with k1" in page
            assert CARD not in page
            assert "$enc" not in page

    trio.run(main)
    table = invoke(["runs", "history", "c", "--store", url])
    assert table.exit_code == 0, table.output
    assert "Before retry 1" in table.stdout
    assert "encrypted with k1" in table.stdout
    assert CARD not in table.stdout
    as_json = invoke(["runs", "history", "c", "--store", url, "--json"])
    [shown] = json.loads(as_json.stdout)["retried"]
    assert shown["encrypted_with"] == "k1"
    assert "sealed" not in shown
    decrypted = invoke(
        ["runs", "history", "c", "--store", url], env={"TRIO_DURABLE_CODEC_KEYS": KEYS}
    )
    assert decrypted.exit_code == 0, decrypted.output
    assert f"ValueError: card {CARD} declined" in decrypted.stdout
