"""The code of docs/payload-codecs.md runs as the page says: its blocks are
this module's code (a test checks that each block is found here), and the
tests below run them."""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
from pathlib import Path

import pytest

import trio_durable as td
from trio_durable._payloads._stored_payloads import codec_text

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "payload-codecs.md"

# -- "Encrypting a store's payloads" ---------------------------------------------------

app = td.App("vault")


@app.step()
async def charge(card: str, cents: int) -> str:
    return f"charged {cents} to the card ending {card[-4:]}"


@app.workflow()
async def pay(ctx: td.Context, card: str, cents: int) -> str:
    return await ctx.step(charge, card, cents)


async def main(store: str) -> str:
    ring = td.Keyring.parse(os.environ["TRIO_DURABLE_CODEC_KEYS"])
    async with td.open_engine(app, store=store, codec=td.AesGcmCodec(ring)) as engine:
        run = await engine.start(pay, "4111111111111111", 500, run_id="pay-1")
        return await run.result()


# -- "Keys" -------------------------------------------------------------------------------


def new_key_text(key_id: str) -> str:
    key = os.urandom(32)  # AES-256; 16 or 24 bytes give AES-128 or AES-192
    return f"{key_id}:{base64.b64encode(key).decode()}"


# -- "Rotating keys" ----------------------------------------------------------------------


def rotated(old: str, new: str) -> td.Keyring:
    # Step 2 of a rotation: the new key first (current), the old one still there.
    return td.Keyring.parse(f"{new},{old}")


# -- "Reading from another process" ------------------------------------------------------


async def read_run(store: str, run_id: str, ring: td.Keyring) -> td.Run:
    async with td.open_client(store, codec=td.AesGcmCodec(ring)) as client:
        return await client.get(run_id)


# -- "Wrapping a store yourself" ---------------------------------------------------------


async def count_by_status(store_url: str, ring: td.Keyring) -> dict[td.stores.RunStatus, int]:
    async with td.open_store(store_url) as store:
        coded = td.stores.CodecStore(store, td.AesGcmCodec(ring))
        async with td.open_client(coded) as client:
            page = await client.list_runs(facets=True)
            return dict(page.facets or {})


# -- the tests ----------------------------------------------------------------------------


def _dump(path: Path) -> str:
    connection = sqlite3.connect(path)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


async def test_the_example_stores_no_card_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    k1 = new_key_text("k1")
    monkeypatch.setenv("TRIO_DURABLE_CODEC_KEYS", k1)
    store = f"sqlite:///{tmp_path / 'vault.db'}"
    assert await main(store) == "charged 500 to the card ending 1111"
    dump = _dump(tmp_path / "vault.db")
    assert "4111111111111111" not in dump
    assert "card ending" not in dump
    ring = td.Keyring.parse(k1)
    run = await read_run(store, "pay-1", ring)
    assert json.loads(run.input) == ["4111111111111111", 500]
    assert await count_by_status(store, ring) == {"completed": 1}
    # Counting needs no key: without a codec, a client counts all the same.
    async with td.open_client(store) as plain:
        assert (await plain.list_runs(facets=True)).facets == {"completed": 1}
        assert json.loads(codec_text((await plain.get("pay-1")).input) or "")["$enc"] == "k1"


async def test_a_rotation_reads_old_payloads_and_writes_new_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"sqlite:///{tmp_path / 'vault.db'}"
    k1, k2 = new_key_text("k1"), new_key_text("k2")
    monkeypatch.setenv("TRIO_DURABLE_CODEC_KEYS", k1)
    await main(store)
    ring = rotated(k1, k2)
    assert ring.current == "k2"
    assert (await read_run(store, "pay-1", ring)).output == '"charged 500 to the card ending 1111"'
    async with td.open_engine(app, store=store, codec=td.AesGcmCodec(ring)) as engine:
        await (await engine.start(pay, "5500000000000004", 1, run_id="pay-2")).result()
    async with td.open_client(store) as plain:
        assert json.loads(codec_text((await plain.get("pay-1")).input) or "")["$enc"] == "k1"
        assert json.loads(codec_text((await plain.get("pay-2")).input) or "")["$enc"] == "k2"
    # Step 3: once nothing under k1 is left, it leaves the ring; what it
    # encrypted can no longer be read.
    with pytest.raises(td.CodecError, match="key 'k1'"):
        await read_run(store, "pay-1", td.Keyring.parse(k2))


def _code(text: str) -> str:
    """``text`` without its import lines and blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) >= 5
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block
