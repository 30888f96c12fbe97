"""Payloads shaped like what the store layer marks, delivered where
payloads enter a run, by writers with and without the codec and the blob
store (for `test_forged_payloads` on the memory and SQLite stores and its
PostgreSQL twin).

The release before kept an encrypted payload as ``{"$enc":"k1","d":...}``
and an offloaded one as ``{"$blob":"sha256-...","size":N}`` in the
payload's place and told them apart by shape: a client without the codec
that sent the first left the run waiting forever; one without the blob
store that sent the second (naming another run's blob) handed that run's
payload over. Now both are data like any other, from every writer and
every entry: a start's input, a signal, a webhook, an event, an update, an
entity call, a local step's result and a remote step's result (from a
worker with the blob store and one without).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import trio

import trio_durable as td

K1: Final = bytes(range(16))
RING1: Final = td.Keyring.single(K1, "k1")
THRESHOLD: Final = 1000
SECRET: Final = "SECRET-victim " * 200
"""The input of the run whose blob a forged reference names."""

app = td.App("forged")


@app.step()
async def keep(value: Any) -> Any:
    return value


@app.step(group="inside")
async def keep_inside(value: Any) -> Any:
    return value


@app.step(group="outside")
async def keep_outside(value: Any) -> Any:
    return value


@app.workflow()
async def echo(ctx: td.Context, value: Any) -> dict[str, Any]:
    return {
        "input": value,
        "local": await ctx.step(keep, value),
        "inside": await ctx.step(keep_inside, value),
        "outside": await ctx.step(keep_outside, value),
    }


@app.workflow()
async def victim(ctx: td.Context, secret: str) -> int:
    return len(secret)


@app.workflow()
async def listens(ctx: td.Context) -> dict[str, Any]:
    updates: list[Any] = []

    @ctx.update("put")
    def put(value: Any) -> Any:
        updates.append(value)
        return value

    ctx.set_event("token", await ctx.webhook("hook"))
    signalled = await ctx.wait_signal("s")
    hooked = await ctx.wait_signal("hook")
    await ctx.wait_signal("done")
    return {"signal": signalled, "hook": hooked, "updates": updates}


@app.workflow(events=["forged.sent"])
async def on_event(ctx: td.Context, payload: Any) -> Any:
    return payload


@app.entity("box", key=str)
class Box:
    def __init__(self) -> None:
        self.value: Any = None

    @td.exclusive
    async def put(self, value: Any) -> Any:
        self.value = value
        return value

    @td.shared
    async def get(self) -> Any:
        return self.value


def forged_encrypted() -> dict[str, str]:
    """An `AesGcmCodec` envelope's shape, in the clear (it decrypts to nothing)."""
    return {"$enc": "k1", "d": base64.b64encode(bytes(range(40))).decode()}


async def forged_reference(engine: td.Engine, blobs: td.LocalBlobStore) -> dict[str, Any]:
    """The reference shape, naming the blob of another run's input."""
    before = {info.key for info in await blobs.list()}
    run = await engine.start(victim, SECRET, run_id="victim")
    assert await engine.result(run.id) == len(SECRET)
    [info] = [info for info in await blobs.list() if info.key not in before]
    return {"$blob": info.key, "size": info.size}


OpenEngine = Callable[..., AbstractAsyncContextManager[td.Engine]]


@asynccontextmanager
async def reader(
    open_engine: OpenEngine, store: str | td.Store, blobs: td.LocalBlobStore, broker: str
) -> AsyncIterator[td.Engine]:
    """The engine with the codec and the blob store that runs everything
    (its own worker serves ``inside``), and a worker without the blob store
    that serves ``outside``."""
    async with (
        open_engine(
            app,
            store=store,
            broker=broker,
            serve=["inside"],
            codec=td.AesGcmCodec(RING1),
            blobs=blobs,
            blob_threshold=THRESHOLD,
        ) as engine,
        td.open_worker(app, broker=broker, groups=["outside"]),
    ):
        yield engine


async def deliver_and_read_back(
    engine: td.Engine, writer: td.Engine | td.Client, forged: Any, tag: str, *, updates: bool
) -> None:
    """``writer`` delivers ``forged`` everywhere; ``engine`` reads it back as
    it was sent and every run completes. A writer without the codec cannot
    replay an encrypted run, so only one with it sends an update and calls
    an entity (``updates``)."""
    with trio.fail_after(120):
        started = await writer.start(echo, forged, run_id=f"echo-{tag}")
        assert await engine.result(started.id) == {
            "input": forged,
            "local": forged,
            "inside": forged,
            "outside": forged,
        }
        listening = await engine.start(listens, run_id=f"listens-{tag}")
        token = await engine.get_event(listening.id, "token", timeout=60)
        if updates:
            assert await writer.update(listening.id, "put", forged) == forged
        await writer.signal(listening.id, "s", forged)
        await writer.deliver_webhook(token, forged)
        await writer.signal(listening.id, "done")
        assert await engine.result(listening.id) == {
            "signal": forged,
            "hook": forged,
            "updates": [forged] if updates else [],
        }
        receipt = await writer.send_event("forged.sent", forged, event_id=f"event-{tag}")
        [run_id] = receipt.run_ids
        assert await engine.result(run_id) == forged
        record = await engine.get_event_record(f"event-{tag}")
        assert record is not None
        assert record.payload == forged
        # Sent again: the stored event is read back, and starts nothing.
        assert await writer.send_event("forged.sent", forged, event_id=f"event-{tag}") == receipt
        if updates:
            box = writer.entity("box", tag)
            assert await box.put(forged) == forged
            assert await engine.entity("box", tag).get() == forged
