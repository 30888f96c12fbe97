"""Payload codecs (docs/payload-codecs.md): `AesGcmCodec` itself (key ids,
rotation, a missing or wrong key), and engines and clients whose store is
wrapped in a `CodecStore`, on the memory and SQLite stores: what is stored
holds no plaintext, a run started under one key finishes under the next,
a missing key never fails a run, and what reads no payload still works
without the key. (On PostgreSQL: tests/integration/test_codecs_postgres.py;
the store conformance suite over a CodecStore: tests/conformance.)"""

from __future__ import annotations

import base64
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from trio_durable._payloads._stored_payloads import codec_text, said
from trio_durable.stores import CodecStore

K1 = bytes(range(16))
K2 = bytes(range(100, 132))
K9 = bytes(range(50, 74))
RING1 = td.Keyring.single(K1, "k1")
RING21 = td.Keyring({"k2": K2, "k1": K1}, current="k2")
RING9 = td.Keyring.single(K9, "k9")

CARD = "SECRET-4111-1111"
APPROVER = "SECRET-approver"

app = td.App("codecs")


@app.step()
async def charge(order: dict[str, str]) -> str:
    return f"charged {order['card']}"


@app.step(group="remote")
async def echo(text: str) -> str:
    return f"{text}!"


@app.step()
async def refuse(card: str) -> None:
    raise td.FatalError(f"card {card} declined", code="declined", details={"card": card})


@app.workflow()
async def checkout(ctx: td.Context, order: dict[str, str]) -> dict[str, Any]:
    receipt = await ctx.step(charge, order)
    echoed = await ctx.step(echo, order["card"])
    approval = await ctx.wait_signal("approved")
    return {"receipt": receipt, "echo": echoed, "approval": approval}


@app.workflow()
async def declined(ctx: td.Context, card: str) -> None:
    await ctx.step(refuse, card)


@app.workflow(events=["order.placed"])
async def on_order(ctx: td.Context, order: dict[str, str]) -> str:
    return order["card"][-4:]


# -- the codec ----------------------------------------------------------------------


def test_a_payload_is_encrypted_as_json_naming_its_key() -> None:
    codec = td.AesGcmCodec(RING1)
    sealed = codec.encode('{"card":"SECRET"}')
    envelope = json.loads(sealed)
    assert set(envelope) == {"$enc", "d"}
    assert envelope["$enc"] == "k1"
    # A 12-byte nonce, the ciphertext (as long as the text) and a 16-byte tag.
    assert len(base64.b64decode(envelope["d"])) == 12 + len('{"card":"SECRET"}') + 16
    assert "SECRET" not in sealed
    assert codec.decode(sealed) == '{"card":"SECRET"}'
    assert codec.describe(sealed) == "encrypted with k1"
    # A fresh nonce each time: equal payloads are not equal at rest.
    assert codec.encode('{"card":"SECRET"}') != sealed


def test_text_the_codec_did_not_make_is_refused() -> None:
    # A CodecStore hands the codec only what it marked as the codec's: any
    # other text reaching it is an error, never a payload passed through.
    codec = td.AesGcmCodec(RING1)
    for text in ['{"card":"x"}', "[1,2]", '"$enc"', '{"$enc":"k1"}', '{"$enc":1,"d":"x"}', "null"]:
        with pytest.raises(td.CodecError, match="not an AES-GCM envelope"):
            codec.decode(text)
        assert codec.describe(text) is None


@pytest.mark.parametrize("size", [16, 24, 32])
def test_aes_keys_of_16_24_and_32_bytes(size: int) -> None:
    codec = td.AesGcmCodec(td.Keyring.single(bytes(size)))
    assert codec.decode(codec.encode("[]")) == "[]"


def test_other_key_sizes_and_non_keyrings_are_refused() -> None:
    with pytest.raises(td.KeyringError, match="key 'k1' has 20"):
        td.AesGcmCodec(td.Keyring.single(bytes(20)))
    with pytest.raises(td.KeyringError, match=r"needs a td\.Keyring"):
        td.AesGcmCodec(K1)  # type: ignore[arg-type]


def test_rotation_old_keys_decrypt_the_current_key_encrypts() -> None:
    old = td.AesGcmCodec(RING1).encode('"under k1"')
    rotated = td.AesGcmCodec(RING21)
    assert rotated.decode(old) == '"under k1"'
    fresh = rotated.encode('"under k2"')
    assert json.loads(fresh)["$enc"] == "k2"
    assert rotated.decode(fresh) == '"under k2"'
    # Once k1 leaves the ring, what it encrypted cannot be read.
    retired = td.AesGcmCodec(td.Keyring.single(K2, "k2"))
    assert retired.decode(fresh) == '"under k2"'
    with pytest.raises(td.CodecError, match="key 'k1'") as caught:
        retired.decode(old)
    assert caught.value.key_id == "k1"
    assert isinstance(caught.value, td.StoreError)


def test_a_wrong_key_under_the_id_or_altered_bytes_fail_authentication() -> None:
    sealed = td.AesGcmCodec(RING1).encode('"x"')
    impostor = td.AesGcmCodec(td.Keyring.single(bytes(16), "k1"))
    with pytest.raises(td.CodecError, match="fails to decrypt") as caught:
        impostor.decode(sealed)
    assert caught.value.key_id == "k1"
    envelope = json.loads(sealed)
    raw = bytearray(base64.b64decode(envelope["d"]))
    raw[-1] ^= 1
    altered = json.dumps({"$enc": "k1", "d": base64.b64encode(raw).decode()})
    with pytest.raises(td.CodecError, match="fails to decrypt"):
        td.AesGcmCodec(RING1).decode(altered)
    # The key id is authenticated too: relabelled, it fails.
    both = td.AesGcmCodec(td.Keyring({"k1": K1, "k3": K1}, current="k1"))
    relabelled = json.dumps({"$enc": "k3", "d": envelope["d"]})
    with pytest.raises(td.CodecError, match="fails to decrypt"):
        both.decode(relabelled)


def test_a_codec_never_prints_its_keys() -> None:
    assert repr(td.AesGcmCodec(RING21)) == "AesGcmCodec(Keyring(ids=['k1', 'k2'], current='k2'))"


# -- engines and clients on a coded store ----------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Stored:
    """A store of ``kind`` that engines and clients share, and everything
    it keeps as text (the SQLite file's dump, the memory store's rows)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.path = tmp_path / "coded.db"
        self.memory = td.MemoryStore() if kind == "memory" else None

    @property
    def target(self) -> str | td.Store:
        return self.memory if self.memory is not None else f"sqlite:///{self.path}"

    def raw(self) -> str:
        if self.memory is not None:
            return repr(vars(self.memory))
        connection = sqlite3.connect(self.path)
        try:
            return "\n".join(connection.iterdump())
        finally:
            connection.close()


@pytest.fixture
def stored(kind: str, tmp_path: Path) -> Stored:
    return Stored(kind, tmp_path)


@asynccontextmanager
async def engine_on(
    open_test_engine: EngineFactory, stored: Stored, ring: td.Keyring, **kwargs: Any
) -> AsyncIterator[td.Engine]:
    async with open_test_engine(
        app, store=stored.target, serve=["remote"], codec=td.AesGcmCodec(ring), **kwargs
    ) as engine:
        yield engine


async def test_nothing_is_stored_in_the_clear(
    open_test_engine: EngineFactory, stored: Stored
) -> None:
    async with engine_on(open_test_engine, stored, RING1) as engine:
        run = await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.signal(run.id, "approved", {"by": APPROVER})
        assert await engine.result(run.id) == {
            "receipt": f"charged {CARD}",
            "echo": f"{CARD}!",
            "approval": {"by": APPROVER},
        }
        # A signal buffered for a run that does not wait for it yet.
        await engine.start(checkout, {"card": CARD}, run_id="order-2")
        await engine.signal("order-2", "approved", APPROVER)
        with pytest.raises(td.RunFailed) as caught:
            await engine.result((await engine.start(declined, CARD, run_id="bad-1")).id)
        failure = caught.value
        assert (failure.message, failure.code, failure.details) == (
            f"card {CARD} declined",
            "declined",
            {"card": CARD},
        )
        assert failure.traceback is not None
        assert CARD in failure.traceback
        receipt = await engine.send_event("order.placed", {"card": CARD}, event_id="ev-1")
        assert await engine.result(receipt.run_ids[0]) == CARD[-4:]
        # Sent again, the stored event (a keyed value) is read back.
        assert await engine.send_event("order.placed", {"card": CARD}, event_id="ev-1") == receipt
        assert await engine.result("order-2") == {
            "receipt": f"charged {CARD}",
            "echo": f"{CARD}!",
            "approval": APPROVER,
        }
        await engine.drain()
    raw = stored.raw()
    assert "SECRET" not in raw
    assert '"$enc":"k1"' in raw or "'$enc': 'k1'" in raw or '\\"$enc\\":\\"k1\\"' in raw
    # The error's code stays readable (stores and on-error routes match it).
    assert "declined" in raw
    assert "encrypted with k1" in raw


async def test_a_run_started_under_k1_finishes_under_k2(
    open_test_engine: EngineFactory, stored: Stored
) -> None:
    async with engine_on(open_test_engine, stored, RING1) as engine:
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.drain()
        assert (await engine.get("order-1")).status == "suspended"
    async with engine_on(open_test_engine, stored, RING21) as engine:
        await engine.signal("order-1", "approved", APPROVER)
        assert (await engine.result("order-1"))["receipt"] == f"charged {CARD}"
    async with td.open_client(stored.target) as plain:
        run = await plain.get("order-1")
        # Without the codec, the output cannot be read (never taken for a value).
        with pytest.raises(td.CodecError, match="no codec") as caught:
            await plain.result("order-1")
        assert caught.value.key_id == "k2"
    # The input was written under k1, the output under k2.
    assert json.loads(codec_text(run.input) or "")["$enc"] == "k1"
    assert json.loads(codec_text(run.output) or "")["$enc"] == "k2"
    assert "SECRET" not in stored.raw()


async def test_a_missing_key_raises_its_own_error_and_never_fails_a_run(
    open_test_engine: EngineFactory,
    stored: Stored,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with engine_on(open_test_engine, stored, RING1, lease_ttl=5.0) as engine:
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        await engine.drain()
    async with td.open_client(stored.target, codec=td.AesGcmCodec(RING9)) as wrong:
        with pytest.raises(td.CodecError, match="key 'k1'") as caught:
            await wrong.get("order-1")
        assert caught.value.key_id == "k1"
        with pytest.raises(td.CodecError):
            await wrong.signal("order-1", "approved", "never")
    async with td.open_client(
        stored.target, codec=td.AesGcmCodec(RING1), wall_clock=fixed_wall
    ) as client:
        await client.signal("order-1", "approved", APPROVER)
    # An engine without k1 cannot take the run's turn: it reports why on
    # the run, once, and leaves it for an engine that has the key.
    async with engine_on(open_test_engine, stored, RING9, lease_ttl=5.0):
        # Its reconciliation finds the run woken by the signal; each minute
        # it tries again.
        await trio.sleep(300)
    reports = [
        record.getMessage()
        for record in caplog.records
        if "'order-1'" in record.getMessage() and "cannot be decoded" in record.getMessage()
    ]
    assert len(reports) == 1, reports
    assert "key 'k1'" in reports[0]
    assert not any("failed on the store" in record.getMessage() for record in caplog.records)
    async with td.open_client(stored.target) as plain:
        waiting = await plain.get("order-1")
    assert waiting.status == "suspended"
    assert waiting.error is not None
    assert (waiting.error.code, waiting.error.type) == ("payload_undecodable", "CodecError")
    assert waiting.error.details == {"key_id": "k1"}
    assert "key 'k1', which the codec's keyring (keys k9) does not have" in waiting.error.message
    ring = td.Keyring({"k9": K9, "k1": K1}, current="k9")
    async with engine_on(open_test_engine, stored, ring, lease_ttl=5.0) as engine:
        assert (await engine.result("order-1"))["approval"] == APPROVER
        assert (await engine.get("order-1")).error is None


async def test_what_reads_no_payload_works_without_the_key(
    open_test_engine: EngineFactory, stored: Stored
) -> None:
    async with engine_on(open_test_engine, stored, RING1) as engine:
        await engine.start(checkout, {"card": CARD}, run_id="order-1")
        with pytest.raises(td.RunFailed):
            await engine.result((await engine.start(declined, CARD, run_id="bad-1")).id)
        await engine.drain()
    for codec in (None, td.AesGcmCodec(RING9)):
        async with td.open_client(stored.target, codec=codec) as client:
            page = await client.list_runs(facets=True)
            assert sorted(run.id for run in page.runs) == ["bad-1", "order-1"]
            assert page.facets == {"suspended": 1, "failed": 1}
            # Listed as stored: the payloads and the error's message say
            # what they are.
            bad = next(run for run in page.runs if run.id == "bad-1")
            assert bad.error is not None
            assert (bad.error.message, bad.error.code) == ("encrypted with k1", "declined")
            assert said(bad.input) == "encrypted with k1"
            if codec is None:
                history = await client.history("bad-1")
                assert [entry.status for entry in history.entries] == ["failed"]
            else:
                # A run read by itself is decoded, or raises.
                with pytest.raises(td.CodecError):
                    await client.history("bad-1")
            detail = await client.list_runs(workflow="checkout", status="suspended")
            assert [run.id for run in detail.runs] == ["order-1"]


async def test_a_client_with_the_codec_reads_and_writes_as_the_engine_does(
    open_test_engine: EngineFactory, stored: Stored
) -> None:
    async with td.open_client(
        stored.target, app=app, codec=td.AesGcmCodec(RING1), wall_clock=fixed_wall
    ) as client:
        run = await client.start(checkout, {"card": CARD}, run_id="order-1")
        await client.signal(run.id, "approved", APPROVER)
    assert "SECRET" not in stored.raw()
    async with engine_on(open_test_engine, stored, RING1) as engine:
        assert (await engine.result("order-1"))["approval"] == APPROVER
    async with td.open_client(
        stored.target, app=app, codec=td.AesGcmCodec(RING1), wall_clock=fixed_wall
    ) as client:
        assert (await client.result("order-1"))["echo"] == f"{CARD}!"
        assert json.loads((await client.get("order-1")).input) == [{"card": CARD}]


async def test_rows_written_before_the_codec_stay_readable(
    open_test_engine: EngineFactory, stored: Stored
) -> None:
    async with open_test_engine(app, store=stored.target, serve=["remote"]) as engine:
        await engine.start(checkout, {"card": "plain"}, run_id="order-1")
        await engine.drain()
    async with engine_on(open_test_engine, stored, RING1) as engine:
        await engine.signal("order-1", "approved", APPROVER)
        assert (await engine.result("order-1"))["echo"] == "plain!"
    assert APPROVER not in stored.raw()


async def test_bad_codec_arguments_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(td.UsageError, match="codec= takes a codec"):
        async with td.open_engine(app, store=f"sqlite:///{path}", codec=RING1):  # type: ignore[arg-type]
            pass
    with pytest.raises(td.UsageError, match="codec= takes a codec"):
        async with td.open_client(f"sqlite:///{path}", codec="k1"):  # type: ignore[arg-type]
            pass
    assert not path.exists()
    coded = CodecStore(td.MemoryStore(), td.AesGcmCodec(RING1))
    with pytest.raises(td.UsageError, match="CodecStore already"):
        async with td.open_engine(app, store=coded, codec=td.AesGcmCodec(RING1)):
            pass
    with pytest.raises(td.UsageError, match="wraps a Store"):
        CodecStore("memory://", td.AesGcmCodec(RING1))  # type: ignore[arg-type]
    with pytest.raises(td.UsageError, match="needs a codec"):
        CodecStore(td.MemoryStore(), RING1)  # type: ignore[arg-type]


async def test_a_codec_store_is_a_store_for_open_engine(tmp_path: Path) -> None:
    async with td.open_store(f"sqlite:///{tmp_path / 'x.db'}") as inner:
        coded = CodecStore(inner, td.AesGcmCodec(RING1))
        assert isinstance(coded, td.stores.RunWatch)
        assert not isinstance(coded, td.stores.ChangeFeed)
        async with td.open_engine(app, store=coded, wall_clock=fixed_wall) as engine:
            with pytest.raises(td.RunFailed):
                await engine.result((await engine.start(declined, CARD)).id)
        assert coded.statistics() is inner.statistics()


@app.entity("wallet", key=str)
class Wallet:
    def __init__(self) -> None:
        self.cards: list[str] = []

    @td.exclusive
    async def add(self, card: str) -> int:
        self.cards.append(card)
        return len(self.cards)

    @td.shared
    async def last(self) -> str:
        return self.cards[-1]


async def test_keyed_values_entities_and_schedules_work_encrypted(
    open_test_engine: EngineFactory, stored: Stored, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_on(open_test_engine, stored, RING1) as engine:
        wallet = engine.entity("wallet", "w-1")
        assert await wallet.add(CARD) == 1
        assert await wallet.add(f"{CARD}-2") == 2
        assert await wallet.last() == f"{CARD}-2"
        await engine.create_schedule("nightly", declined, cron="0 * * * *", args=[CARD])
        await trio.sleep(3_600)
        [info] = await engine.list_schedules()
        assert (info.name, info.workflow, info.started) == ("nightly", "declined", 1)
        started = await engine.list_runs(tags=["schedule:nightly"])
        assert len(started.runs) == 1
        for run in started.runs:
            with pytest.raises(td.RunFailed, match="declined"):
                await engine.result(run.id)
        await engine.drain()
    async with engine_on(open_test_engine, stored, RING21) as engine:
        assert await engine.entity("wallet", "w-1").add("third") == 3
        assert await engine.entity("wallet", "w-1").last() == "third"
        await engine.drain()
    assert "SECRET" not in stored.raw()
