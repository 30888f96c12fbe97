"""Record a SQLite store as the release before keyed values went with runs
(schema version 8) wrote it, for `test_values_store_upgrade`.

Run it with that release's code first on the path (its source tree, from
``git archive`` or a worktree)::

    PYTHONPATH=<old source>/src python tests/record_values_store.py tests/data/values_before_runs

The store holds a keyed value of every family that release wrote, none of
which named a run then:

- ``done-t``, completed: its published value, stream value and update
  record; the signal that ended it came from ``done-s`` with an
  idempotency key (a ``signal-key`` claim);
- ``done-single`` and ``done-dedup``, completed: a singleton's and a dedup
  key's claims;
- ``done-pay``, completed: a step's dedup claim in a flow-control queue;
- ``done-fan``, cancelled mid-fan (with its waiting children): its fan
  window;
- an event's record and its run, and a debounced event's window and run;
- in flight: ``live-t``, waiting for signal ``go`` with its published
  value, stream value and update record, and ``live-single`` and
  ``live-dedup``, waiting for signal ``done`` and holding their claims.

It writes the database as SQL text (``store.sql``, its schema version in
the first line).
"""

from __future__ import annotations

import contextlib
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Final

import trio
import trio.testing

import trio_durable as td

WALL_START: Final = 1_700_000_000.0
REMOTE: Final = "values-remote"

app = td.App("values-upgrade")
app.queue("pay-q", concurrency=1)


@app.step(group=REMOTE)
async def charge(n: int) -> int:
    return n + 1


@app.workflow()
async def target(ctx: td.Context, label: str) -> int:
    bumped = [0]

    @ctx.update("bump")
    def bump(by: int) -> int:
        bumped[0] += by
        return bumped[0]

    ctx.set_event("ready", label)
    ctx.emit(label)
    got: int = await ctx.wait_signal("go")
    return got + bumped[0]


@app.workflow()
async def sender(ctx: td.Context, to: str) -> None:
    await ctx.signal(to, "go", 1, idempotency_key=f"key-{to}")


@app.workflow(concurrency_key=lambda n: f"k{n}", singleton=True)
async def single(ctx: td.Context, n: int) -> int:
    await ctx.wait_signal("done")
    return n


@app.workflow(dedup_key=lambda n: f"d{n}")
async def deduped(ctx: td.Context, n: int) -> int:
    await ctx.wait_signal("done")
    return n


@app.workflow()
async def paying(ctx: td.Context, n: int) -> int:
    return await ctx.step(charge, n, queue="pay-q", dedup_key=f"p{n}")


@app.workflow()
async def waiting_kid(ctx: td.Context, n: int) -> None:
    await ctx.wait_signal("never")


@app.workflow()
async def stuck_fan(ctx: td.Context, n: int) -> None:
    ctx.set_event("fanning", n)
    await ctx.all(waiting_kid, [n, n + 1, n + 2], concurrency=1)


@app.workflow(events=["order"])
async def on_order(ctx: td.Context, n: int) -> int:
    return n


@app.workflow(events=["burst"], debounce=5.0)
async def on_burst(ctx: td.Context, n: int) -> int:
    return n


def wall() -> float:
    return WALL_START + trio.current_time()


async def record(url: str) -> None:
    async with (
        td.open_engine(app, store=url, seed=0, wall_clock=wall) as engine,
        td.open_worker(app, groups=[REMOTE]),
    ):
        await engine.start(target, "done", run_id="done-t")
        assert await engine.get_event("done-t", "ready") == "done"
        assert await engine.update("done-t", "bump", 2) == 2
        await engine.start(sender, "done-t", run_id="done-s")
        await engine.result("done-s")
        assert await engine.result("done-t") == 3
        for workflow, name in ((single, "done-single"), (deduped, "done-dedup")):
            await engine.start(workflow, 1, run_id=name)
            await engine.signal(name, "done")
            assert await engine.result(name) == 1
        await engine.start(paying, 1, run_id="done-pay")
        assert await engine.result("done-pay") == 2
        await engine.start(stuck_fan, 1, run_id="done-fan")
        assert await engine.get_event("done-fan", "fanning") == 1
        await engine.cancel("done-fan")
        with contextlib.suppress(td.RunCancelled):
            await engine.result("done-fan")
        for event, options in (("order", {"event_id": "e-1"}), ("burst", {"key": "b"})):
            receipt = await engine.send_event(event, 1, **options)
            assert await engine.result(receipt.run_ids[0]) == 1
        # In flight.
        await engine.start(target, "live", run_id="live-t")
        assert await engine.get_event("live-t", "ready") == "live"
        assert await engine.update("live-t", "bump", 2) == 2
        await engine.start(single, 2, run_id="live-single")
        await engine.start(deduped, 2, run_id="live-dedup")


def main() -> None:
    out = Path(sys.argv[1])
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "store.db"
        clock = trio.testing.MockClock(autojump_threshold=0)
        trio.run(record, f"sqlite:///{path}", clock=clock)
        connection = sqlite3.connect(path)
        try:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            dump = "\n".join(connection.iterdump())
        finally:
            connection.close()
        out.mkdir(parents=True, exist_ok=True)
        (out / "store.sql").write_text(f"-- schema version {version}\n{dump}\n")


if __name__ == "__main__":
    main()
