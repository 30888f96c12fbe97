"""Record a SQLite store and its blob directory as the release before
out-of-band payload marks wrote them, for `test_legacy_envelopes`.

Run it with that release's code first on the path (a worktree of it)::

    PYTHONPATH=<old worktree>/src python tests/record_legacy_envelopes.py tests/data/legacy_envelopes

That release kept an encrypted payload as the JSON object
``{"$enc":"k1","d":"..."}`` and an offloaded one as ``{"$blob":"sha256-...",
"size":N}``, in the rows themselves, and an encrypted error's message,
details and traceback in its ``details`` as such an object. The store
holds, under the key ``k1`` and with payloads over 64 characters in the
blob store (so most are offloaded, encrypted first):

- ``done-1``, completed: its input, its steps' outputs, the signal it took
  and its output;
- ``waiting-1``, suspended, waiting for signal ``first``, with signal
  ``second`` buffered (encrypted and offloaded);
- ``failed-1``, failed: a step failed once (retried) and then for good,
  with details;
- the entity ``wallet``/``w-1`` (its state a keyed value);
- ``plain-1``, started by a client without the codec but with the blob
  store (its input offloaded in the clear), waiting for signal ``go``;
- ``bare-1``, started by a client with neither, waiting for ``go``.

It writes the database as SQL text (``store.sql``, its schema version in
the first line) and copies the blob files into ``blobs/``.
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import trio
import trio.testing

import trio_durable as td

WALL_START = 1_700_000_000.0
K1 = bytes(range(16))
RING1 = td.Keyring.single(K1, "k1")
THRESHOLD = 64

CARD = "SECRET-4111-1111"
NOTE = "a note long enough to go to the blob store " * 3
APPROVER = {"by": "SECRET-approver", "why": "the card is good " * 5}
SECOND = {"value": "SECRET-second " * 8}

app = td.App("legacy")
_failures: list[int] = []


@app.step()
async def charge(order: dict[str, str]) -> str:
    return f"charged {order['card']} for {order['note']}"


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def refuse(card: str) -> None:
    _failures.append(1)
    if len(_failures) == 1:
        raise ValueError(f"card {card} timed out " + "." * 80)
    raise td.FatalError(
        f"card {card} declined", code="declined", details={"card": card, "pad": "." * 80}
    )


@app.workflow()
async def checkout(ctx: td.Context, order: dict[str, str]) -> dict[str, Any]:
    receipt = await ctx.step(charge, order)
    approval = await ctx.wait_signal("approved")
    return {"receipt": receipt, "approval": approval}


@app.workflow()
async def two_signals(ctx: td.Context, label: str) -> dict[str, Any]:
    first = await ctx.wait_signal("first")
    second = await ctx.wait_signal("second")
    return {"label": label, "first": first, "second": second}


@app.workflow()
async def declined(ctx: td.Context, card: str) -> None:
    await ctx.step(refuse, card)


@app.workflow()
async def plain(ctx: td.Context, text: str) -> str:
    go = await ctx.wait_signal("go")
    return f"{text[:10]} {go}"


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


def wall() -> float:
    return WALL_START + trio.current_time()


async def record(url: str, blobs: Path) -> None:
    async with td.open_engine(
        app,
        store=url,
        seed=0,
        wall_clock=wall,
        codec=td.AesGcmCodec(RING1),
        blobs=blobs,
        blob_threshold=THRESHOLD,
    ) as engine:
        await engine.start(checkout, {"card": CARD, "note": NOTE}, run_id="done-1")
        await engine.signal("done-1", "approved", APPROVER)
        await engine.result("done-1")
        await engine.start(two_signals, NOTE, run_id="waiting-1")
        await engine.signal("waiting-1", "second", SECOND)
        with contextlib.suppress(td.RunFailed):
            await engine.result((await engine.start(declined, CARD, run_id="failed-1")).id)
        await engine.entity("wallet", "w-1").add(CARD + "-" + NOTE)
        await engine.drain()
    async with td.open_client(url, blobs=blobs, blob_threshold=THRESHOLD, wall_clock=wall) as c:
        await c.start("plain", NOTE + "plain", run_id="plain-1")
    async with td.open_client(url, wall_clock=wall) as client:
        await client.start("plain", "bare", run_id="bare-1")


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "store.db"
        blobs = Path(scratch) / "blobs"
        clock = trio.testing.MockClock(autojump_threshold=0)
        trio.run(record, f"sqlite:///{path}", blobs, clock=clock)
        connection = sqlite3.connect(path)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            dump = "\n".join(connection.iterdump())
        finally:
            connection.close()
        out.mkdir(parents=True, exist_ok=True)
        (out / "store.sql").write_text(f"-- schema version {version}\n{dump}\n")
        shutil.rmtree(out / "blobs", ignore_errors=True)
        shutil.copytree(blobs, out / "blobs")


if __name__ == "__main__":
    main()
