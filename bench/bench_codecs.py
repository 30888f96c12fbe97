"""What encrypting payloads at rest costs (``python bench/bench_codecs.py
STORE_URL``; a SQLite file by default): `AesGcmCodec` alone on payloads of
1 KB and 1 MB, then runs of a workflow of 100 local steps (each with a
1 KB argument and result) on the store, with and without a codec, and one
more turn of a run whose history is 1,000 steps, on the engine that wrote
it and on another one. Prints one line per figure,
and the same as JSON lines.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import trio

import trio_durable as td

STEPS = 100
RUNS = 10
LONG = 1000
PAYLOAD = "x" * 1000

app = td.App("bench-codecs")


@app.step()
async def echo(text: str) -> str:
    return text


@app.workflow()
async def chain(ctx: td.Context, steps: int) -> int:
    for _ in range(steps):
        await ctx.step(echo, PAYLOAD)
    return steps


@app.workflow()
async def long_then_wait(ctx: td.Context, steps: int) -> str:
    for _ in range(steps):
        await ctx.step(echo, PAYLOAD)
    return str(await ctx.wait_signal("go"))


def codec_figures() -> list[dict[str, object]]:
    codec = td.AesGcmCodec(td.Keyring.single(os.urandom(32)))
    figures: list[dict[str, object]] = []
    for size, count in ((1000, 20_000), (1_000_000, 50)):
        text = "y" * size
        started = time.perf_counter()
        sealed = [codec.encode(text) for _ in range(count)]
        encoded = time.perf_counter() - started
        started = time.perf_counter()
        for item in sealed:
            codec.decode(item)
        decoded = time.perf_counter() - started
        figures.append(
            {
                "figure": f"AesGcmCodec on {size} bytes",
                "encode_us": round(encoded / count * 1e6, 1),
                "decode_us": round(decoded / count * 1e6, 1),
                "stored_bytes": len(sealed[0]),
            }
        )
    return figures


async def run_figures(url: str, codec: td.PayloadCodec | None) -> list[dict[str, object]]:
    label = "with AesGcmCodec" if codec else "without codec"
    async with td.open_engine(app, store=url, codec=codec) as engine:
        started = time.perf_counter()
        for _ in range(RUNS):
            run = await engine.start(chain, STEPS)
            await run.result()
        elapsed = time.perf_counter() - started
        waiting = await engine.start(long_then_wait, LONG)
        await engine.drain()
        started = time.perf_counter()
        await engine.signal(waiting.id, "go", "now")
        await engine.result(waiting.id)
        turn = time.perf_counter() - started
    # Another engine (another process's): it decodes the history it did not write.
    async with td.open_engine(app, store=url, codec=codec) as engine:
        cold = await engine.start(long_then_wait, LONG, run_id="cold")
        await engine.drain()
    async with td.open_engine(app, store=url, codec=codec) as engine:
        started = time.perf_counter()
        await engine.signal(cold.id, "go", "now")
        await engine.result(cold.id)
        cold_turn = time.perf_counter() - started
    return [
        {
            "figure": f"{RUNS} runs of {STEPS} local steps, {label}",
            "seconds": round(elapsed, 3),
            "ms_per_step": round(elapsed / (RUNS * STEPS) * 1000, 3),
        },
        {
            "figure": f"signal to end of a run of {LONG} steps (one turn), {label}",
            "ms": round(turn * 1000, 1),
        },
        {
            "figure": f"the same on an engine that did not write the run, {label}",
            "ms": round(cold_turn * 1000, 1),
        },
    ]


async def main(url: str | None) -> None:
    figures = codec_figures()
    codec = td.AesGcmCodec(td.Keyring.single(os.urandom(32)))
    with tempfile.TemporaryDirectory() as folder:
        for chosen in (None, codec):
            target = url or f"sqlite:///{Path(folder) / ('coded.db' if chosen else 'plain.db')}"
            figures.extend(await run_figures(target, chosen))
    for figure in figures:
        print(", ".join(f"{key}: {value}" for key, value in figure.items()))
    for figure in figures:
        print(json.dumps(figure))


if __name__ == "__main__":
    trio.run(main, sys.argv[1] if len(sys.argv) > 1 else None)
