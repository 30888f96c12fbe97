"""Webhooks (`Context.webhook`): one-time callbacks delivered through the
engine or a client as a signal, refused when unknown or used, stored only
hashed, and surviving restarts across engines sharing a store."""

from __future__ import annotations

import itertools
import json
import random
import sqlite3
import types
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

import trio_durable as td
import trio_durable._kernel._webhook_keys
from conftest import fixed_wall
from trio_durable._base._records import signal_token
from trio_durable._features.hooks._webhooks import (
    SECRET_SETTING,
    derive_token,
    new_token,
    token_hash,
)

app = td.App("webhooks")

HANDED: dict[str, str] = {}
"""Tokens the workflows handed out (as they would by email), by run id."""
_ARRIVED: dict[str, trio.Event] = {}


def _hand(run_id: str, token: str) -> None:
    HANDED[run_id] = token
    _ARRIVED.setdefault(run_id, trio.Event()).set()


@app.step()
async def hand_out(run_id: str, token: str) -> None:
    _hand(run_id, token)


@app.workflow()
async def approval(ctx: td.Context) -> dict[str, Any]:
    token = await ctx.webhook("approval")
    await ctx.step(hand_out, ctx.run_id, token)
    await ctx.sleep(1)  # a turn boundary: on replay the token is derived again
    again = await ctx.webhook("approval")
    decision = await ctx.wait_signal("approval")
    return {"token": token, "again": again, "decision": decision}


@app.workflow()
async def quiet(ctx: td.Context) -> str:
    # Handed out outside any step: a step's arguments are recorded.
    _hand(ctx.run_id, await ctx.webhook("approval"))
    return str(await ctx.wait_signal("approval"))


async def _handed(run_id: str) -> str:
    await _ARRIVED.setdefault(run_id, trio.Event()).wait()
    return HANDED[run_id]


async def test_a_webhook_delivers_its_payload_once(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine:
        handle = await engine.start(approval, run_id="once")
        with trio.fail_after(30):
            token = await _handed("once")
        # >= 128 random bits, URL-safe.
        assert len(token) >= 43
        assert token.replace("-", "").replace("_", "").isalnum()
        # Unknown tokens (and a hash, which is no token) change nothing.
        with pytest.raises(td.WebhookNotFoundError):
            await engine.deliver_webhook("nope", {"ok": True})
        with pytest.raises(td.WebhookNotFoundError):
            await engine.deliver_webhook(token_hash(token), {"ok": True})
        assert await store.buffered_signals(signal_token("once", "approval")) == []
        hook = await store.get_webhook(token_hash(token))
        assert hook is not None
        assert (hook.used_at, hook.name) == (None, "approval")

        await engine.deliver_webhook(token, {"ok": True})
        with trio.fail_after(30):
            result = await handle.result()
        assert result["token"] == token
        assert result["again"] != token  # each call makes its own webhook
        assert result["decision"] == {"ok": True}

        # Used: refused, and nothing is buffered for the run.
        with pytest.raises(td.WebhookUsedError) as used:
            await engine.deliver_webhook(token, {"ok": False})
        assert isinstance(used.value, td.WebhookError)
        assert isinstance(used.value, td.UsageError)
        assert await store.buffered_signals(signal_token("once", "approval")) == []
        # The second webhook's run has ended.
        with pytest.raises(td.InvalidRunStateError):
            await engine.deliver_webhook(result["again"], None)
        history = await engine.history("once")
        assert [e.kind for e in history.entries][:2] == ["webhook", "local"]


async def test_two_deliveries_of_one_token_one_wins(tmp_path: Path) -> None:
    await deliveries_race(f"sqlite:///{tmp_path / 'race.db'}", "race")


async def deliveries_race(url: str, run_id: str) -> None:
    """Six deliveries of one token at once, through an engine and a client
    on its own store object: one wins, five are told it was used."""
    async with (
        td.open_engine(app, store=url, seed=2) as engine,
        td.open_store(url) as other,
        td.open_client(other) as client,
    ):
        handle = await engine.start(approval, run_id=run_id)
        with trio.fail_after(10):
            token = await _handed(run_id)
        outcomes: list[str] = []

        async def deliver(via: td.Engine | td.Client, i: int) -> None:
            try:
                await via.deliver_webhook(token, i)
                outcomes.append(f"won {i}")
            except td.WebhookUsedError:
                outcomes.append("used")

        async with trio.open_nursery() as nursery:
            for i in range(6):
                nursery.start_soon(deliver, engine if i % 2 else client, i)
        winners = [o for o in outcomes if o.startswith("won")]
        assert len(winners) == 1
        assert outcomes.count("used") == 5
        with trio.fail_after(20):
            result = await handle.result()
        assert f"won {result['decision']}" == winners[0]


async def test_the_store_never_holds_a_token(tmp_path: Path) -> None:
    path = tmp_path / "hashed.db"
    async with td.open_engine(app, store=f"sqlite:///{path}", seed=3) as engine:
        handle = await engine.start(quiet, run_id="h")
        with trio.fail_after(10):
            token = await _handed("h")
            await engine.deliver_webhook(token, "yes")
            assert await handle.result() == "yes"
    dump = "\n".join(sqlite3.connect(path).iterdump())
    assert token not in dump
    assert token_hash(token) in dump
    # The token derives from the checkpoint's nonce and the secret the
    # store keeps (no webhook_secret was given).
    connection = sqlite3.connect(path)
    [(secret,)] = connection.execute(
        "SELECT value FROM store_settings WHERE name = ?", (SECRET_SETTING,)
    ).fetchall()
    [(output,)] = connection.execute(
        "SELECT output FROM checkpoints WHERE run_id = 'h' AND seq = 1"
    ).fetchall()
    assert derive_token(secret.encode(), json.loads(output)["nonce"]) == token


async def test_a_webhook_survives_restarts_across_engines(tmp_path: Path) -> None:
    await webhook_across_engines(f"sqlite:///{tmp_path / 'restart.db'}", "restart")
    connection = sqlite3.connect(tmp_path / "restart.db")
    # Derived from the given secret: the store keeps no secret then.
    assert connection.execute("SELECT COUNT(*) FROM store_settings").fetchone() == (0,)
    connection.close()


async def webhook_across_engines(url: str, run_id: str) -> None:
    """Created on one engine, delivered by a client after that engine
    closed, its run resumed by a second engine with the same secret: the
    token the body derives on replay is the one handed out."""
    secret = b"a fleet-wide secret of 32 bytes!"
    async with td.open_engine(app, store=url, seed=4, webhook_secret=secret) as first:
        await first.start(approval, run_id=run_id)
        with trio.fail_after(10):
            token = await _handed(run_id)
            await first.drain()
        assert (await first.get(run_id)).status == "suspended"
    async with td.open_store(url) as store, td.open_client(store) as client:
        await client.deliver_webhook(token, "approved")
        with pytest.raises(td.WebhookUsedError):
            await client.deliver_webhook(token, "again")
        async with td.open_engine(app, store=url, seed=5, webhook_secret=secret) as second:
            with trio.fail_after(20):
                result = await second.result(run_id)
    assert result["token"] == token
    assert result["decision"] == "approved"


@pytest.mark.parametrize("bad", [b"short", 42, ""])
async def test_a_bad_webhook_secret_is_refused(bad: Any) -> None:
    with pytest.raises(td.UsageError, match="webhook_secret"):
        async with td.open_engine(app, webhook_secret=bad):
            pass  # pragma: no cover


async def test_a_webhook_of_a_pruned_or_missing_run_is_unknown(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=6, wall_clock=fixed_wall) as engine:
        handle = await engine.start(approval, run_id="pruned")
        with trio.fail_after(30):
            token = await _handed("pruned")
        await engine.deliver_webhook(token, 1)
        with trio.fail_after(30):
            await handle.result()
        await trio.sleep(100)
        assert await engine.prune(td.Retention(completed=10)) == 1
        with pytest.raises(td.WebhookNotFoundError):
            await engine.deliver_webhook(token, 2)


SECRET = b"a fleet-wide secret of 32 bytes!"


def dashed_nonces(secret: bytes, count: int) -> list[str]:
    """``count`` nonces whose tokens (under ``secret``) begin with ``-``."""
    found: list[str] = []
    for i in itertools.count():
        if len(found) == count:
            return found
        if derive_token(secret, f"nonce-{i}").startswith("-"):
            found.append(f"nonce-{i}")
    raise AssertionError("unreachable")  # pragma: no cover


@settings(max_examples=200, deadline=None)
@given(secret=st.binary(min_size=16, max_size=64), dashed=st.integers(0, 4), seed=st.integers())
def test_a_new_token_never_begins_with_a_dash(secret: bytes, dashed: int, seed: int) -> None:
    # Nonces drawn at random, after ``dashed`` whose tokens begin with '-'.
    rng = random.Random(seed)
    drawn = [*dashed_nonces(secret, dashed), *(f"r{rng.getrandbits(64)}" for _ in range(200))]
    taken: list[str] = []

    def draw() -> str:
        taken.append(drawn[len(taken)])
        return taken[-1]

    nonce, token = new_token(secret, draw)
    assert not token.startswith("-")
    assert token == derive_token(secret, nonce)
    # The first drawn whose token does not begin with '-': the draws stay
    # uniform over the tokens that are kept.
    assert nonce == next(n for n in drawn if not derive_token(secret, n).startswith("-"))
    assert nonce == taken[-1]
    assert all(derive_token(secret, n).startswith("-") for n in taken[:-1])


async def test_a_run_never_gets_a_token_that_begins_with_a_dash(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The webhook's nonces come from `secrets`; the first three drawn give
    # tokens beginning with '-' (as about 1 in 64 random ones do).
    scripted = iter([*dashed_nonces(SECRET, 3), "a plain nonce"])
    monkeypatch.setattr(
        trio_durable._kernel._webhook_keys,
        "secrets",
        types.SimpleNamespace(token_urlsafe=lambda nbytes: next(scripted)),
    )
    store = td.MemoryStore()
    async with td.open_engine(
        app, store=store, seed=7, wall_clock=fixed_wall, webhook_secret=SECRET
    ) as engine:
        handle = await engine.start(quiet, run_id="dash")
        with trio.fail_after(30):
            token = await _handed("dash")
        assert token == derive_token(SECRET, "a plain nonce")
        await engine.deliver_webhook(token, "yes")
        with trio.fail_after(30):
            assert await handle.result() == "yes"
