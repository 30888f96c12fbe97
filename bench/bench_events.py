"""Events through two engines sharing one store (``python
bench/bench_events.py STORE_URL``; a SQLite file by default): 50 events for
one debounce key sent one after the other and all at once (each a
compare-and-swap on the window, retried when another send won), then 200
events of a plain subscriber sent at once, until their runs are done.
Prints one line per figure (cases ``<store>.events.*``), and with ``--json
PATH`` writes them as JSON lines.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td

BENCH = "bench_events"
BURST = 50
PLAIN = 200

app = td.App("bench-events")


@app.workflow(events=["typed"], debounce=2.0, debounce_collect="all")
async def collect(ctx: td.Context, texts: list[str]) -> int:
    return len(texts)


@app.workflow(events=["placed"])
async def placed(ctx: td.Context, n: int) -> int:
    return n


def _store(url: str) -> str:
    return url.partition(":")[0].replace("postgresql", "postgres")


async def burst(engines: list[td.Engine], key: str, at_once: bool, store: str) -> None:
    receipts: list[td.EventReceipt] = []

    async def send(engine: td.Engine, index: int) -> None:
        receipts.append(await engine.send_event("typed", f"t{index}", key=key))

    started = time.perf_counter()
    if at_once:
        async with trio.open_nursery() as nursery:
            for index in range(BURST):
                nursery.start_soon(send, engines[index % 2], index)
    else:
        for index in range(BURST):
            await send(engines[index % 2], index)
    elapsed = time.perf_counter() - started
    collected = await engines[0].result(receipts[0].run_ids[0])
    shape = "at_once" if at_once else "one_by_one"
    figure(
        BENCH,
        f"{store}.events.debounce_{shape}",
        elapsed / BURST * 1000,
        "ms/send",
        better="lower",
        label=(
            f"debounce burst {shape.replace('_', ' ')}: {BURST} events in {elapsed:.3f} s,"
            f" {len({r.run_ids for r in receipts})} run(s), {collected} collected"
        ),
    )


async def plain(engines: list[td.Engine], store: str) -> None:
    receipts: list[td.EventReceipt] = []

    async def send(engine: td.Engine, index: int) -> None:
        receipts.append(await engine.send_event("placed", index))

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(PLAIN):
            nursery.start_soon(send, engines[index % 2], index)
    for receipt in receipts:
        await engines[0].result(receipt.run_ids[0])
    elapsed = time.perf_counter() - started
    figure(
        BENCH,
        f"{store}.events.plain_at_once",
        PLAIN / elapsed,
        "events/s",
        label=f"{PLAIN} plain events at once, until their runs are done ({elapsed:.3f} s)",
    )


async def main(url: str) -> None:
    store = _store(url)
    async with (
        td.open_engine(app, store=url, engine_id="one") as one,
        td.open_engine(app, store=url, engine_id="two") as two,
    ):
        engines = [one, two]
        await burst(engines, "one-by-one", at_once=False, store=store)
        await burst(engines, "at-once", at_once=True, store=store)
        await plain(engines, store)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=None, help="a store URL (default: a SQLite file)")
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    if args.url:
        trio.run(main, args.url)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, f"sqlite:///{Path(tmp) / 'events.db'}")
