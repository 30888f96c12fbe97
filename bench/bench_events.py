"""Events through two engines sharing one store (``python
bench/bench_events.py STORE_URL``; a SQLite file by default): 50 events for
one debounce key sent one after the other and all at once (each a
compare-and-swap on the window, retried when another send won), then 200
events of a plain subscriber sent at once, until their runs are done.
Prints one line per figure, and the same as JSON lines.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import trio

import trio_durable as td

BURST = 50
PLAIN = 200

app = td.App("bench-events")


@app.workflow(events=["typed"], debounce=2.0, debounce_collect="all")
async def collect(ctx: td.Context, texts: list[str]) -> int:
    return len(texts)


@app.workflow(events=["placed"])
async def placed(ctx: td.Context, n: int) -> int:
    return n


async def burst(engines: list[td.Engine], key: str, at_once: bool) -> dict[str, object]:
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
    return {
        "figure": f"debounce burst {'at once' if at_once else 'one by one'}",
        "events": BURST,
        "seconds": round(elapsed, 3),
        "ms_per_send": round(elapsed / BURST * 1000, 2),
        "runs": len({r.run_ids for r in receipts}),
        "collected": collected,
    }


async def plain(engines: list[td.Engine]) -> dict[str, object]:
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
    return {
        "figure": "plain events at once, until their runs are done",
        "events": PLAIN,
        "seconds": round(elapsed, 3),
        "events_per_second": round(PLAIN / elapsed),
    }


async def main(url: str) -> None:
    async with (
        td.open_engine(app, store=url, engine_id="one") as one,
        td.open_engine(app, store=url, engine_id="two") as two,
    ):
        engines = [one, two]
        figures = [
            await burst(engines, "one-by-one", at_once=False),
            await burst(engines, "at-once", at_once=True),
            await plain(engines),
        ]
    scheme = url.split(":", 1)[0]
    for figure in figures:
        print(scheme, ", ".join(f"{k}={v}" for k, v in figure.items()))
    for figure in figures:
        print(json.dumps({"store": scheme, **figure}))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            trio.run(main, f"sqlite:///{Path(tmp) / 'events.db'}")
