"""Queries and updates on a store (``python bench/bench_queries.py
STORE_URL``; a SQLite file by default): a query of a run whose history
holds 0, 100 and 1,000 local steps (the caller replays it), 100 updates one
after the other from the engine and from a client (each validated by a
replay, stored, applied by a turn and answered), and 100 reads of a
published value. Prints one line per figure (cases ``<store>.query_<N>_steps``,
``<store>.update_engine``, ...), and with ``--json PATH`` writes them as
JSON lines.
Its runs stay in the store: give a PostgreSQL URL a scratch schema
(``?schema=bench_queries``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td

BENCH = "bench_queries"
UPDATES = 100
QUERIES = 20

app = td.App("bench-queries")


@app.step()
async def tick(i: int) -> int:
    return i


@app.workflow()
async def holder(ctx: td.Context, steps: int) -> int:
    count = [0]

    @ctx.query("count")
    def read() -> int:
        return count[0]

    @ctx.update("bump")
    def bump(by: int) -> int:
        count[0] += by
        return count[0]

    for i in range(steps):
        await ctx.step(tick, i)
    ctx.set_event("ready", steps)
    await ctx.wait_signal("stop")
    return count[0]


async def timed(case: str, label: str, times: int, call: Any) -> None:
    started = time.perf_counter()
    for _ in range(times):
        await call()
    elapsed = time.perf_counter() - started
    figure(BENCH, case, elapsed / times * 1000, "ms/call", better="lower", label=label)


async def main(url: str) -> None:
    store = url.partition(":")[0].replace("postgresql", "postgres")
    async with (
        td.open_engine(app, store=url) as engine,
        td.open_client(url, app=app) as client,
    ):
        for steps in (0, 100, 1000):
            run = await engine.start(holder, steps)
            await engine.get_event(run.id, "ready")
            await timed(
                f"{store}.query_{steps}_steps",
                f"query, {steps} steps of history",
                QUERIES,
                lambda run=run: engine.query(run.id, "count"),
            )
        run = await engine.start(holder, 0)
        await engine.get_event(run.id, "ready")
        await timed(
            f"{store}.update_engine",
            "update from the engine",
            UPDATES,
            lambda: engine.update(run.id, "bump", 1),
        )
        await timed(
            f"{store}.update_client",
            "update from a client",
            UPDATES,
            lambda: client.update(run.id, "bump", 1),
        )
        await timed(
            f"{store}.get_event",
            "get_event of a published value",
            UPDATES,
            lambda: client.get_event(run.id, "ready"),
        )
        assert await engine.query(run.id, "count") == 2 * UPDATES
        for found in (await engine.list_runs(status="suspended")).runs:
            await engine.signal(found.id, "stop")
        await engine.drain()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=None, help="a store URL (default: a SQLite file)")
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    with tempfile.TemporaryDirectory() as tmp:
        trio.run(main, args.url or f"sqlite:///{Path(tmp) / 'bench.db'}")
