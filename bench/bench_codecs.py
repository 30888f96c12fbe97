"""What encrypting payloads at rest costs (``python bench/bench_codecs.py
STORE_URL``; a SQLite file by default): `AesGcmCodec` alone on payloads of
1 KB and 1 MB, then runs of a workflow of 100 local steps (each with a
1 KB argument and result) on the store, with and without a codec, and one
more turn of a run whose history is 1,000 steps, on the engine that wrote
it and on another one. Prints one line per figure (cases ``codec.*`` and
``<store>.*``), and with ``--json PATH`` writes them as JSON lines.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td

BENCH = "bench_codecs"
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


def codec_figures() -> None:
    codec = td.AesGcmCodec(td.Keyring.single(os.urandom(32)))
    for size, count, name in ((1000, 20_000, "1kb"), (1_000_000, 50, "1mb")):
        text = "y" * size
        started = time.perf_counter()
        sealed = [codec.encode(text) for _ in range(count)]
        encoded = time.perf_counter() - started
        started = time.perf_counter()
        for item in sealed:
            codec.decode(item)
        decoded = time.perf_counter() - started
        what = f"AesGcmCodec on {size} bytes"
        for op, seconds in (("encode", encoded), ("decode", decoded)):
            figure(
                BENCH,
                f"codec.aes_gcm_{name}.{op}",
                seconds / count * 1e6,
                "us",
                better="lower",
                label=f"{what}, {op}",
            )
        figure(
            BENCH,
            f"codec.aes_gcm_{name}.stored_bytes",
            len(sealed[0]),
            "bytes",
            better="lower",
            label=f"{what}, stored",
        )


async def run_figures(url: str, codec: td.PayloadCodec | None) -> None:
    label = "with AesGcmCodec" if codec else "without codec"
    store = url.partition(":")[0].replace("postgresql", "postgres")
    suffix = ".aes_gcm" if codec else ""
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
    figure(
        BENCH,
        f"{store}.chain_{STEPS}_steps{suffix}",
        elapsed / (RUNS * STEPS) * 1000,
        "ms/step",
        better="lower",
        label=f"{RUNS} runs of {STEPS} local steps, {label} ({elapsed:.3f} s)",
    )
    figure(
        BENCH,
        f"{store}.turn_after_{LONG}_steps{suffix}",
        turn * 1000,
        "ms",
        better="lower",
        label=f"signal to end of a run of {LONG} steps (one turn), {label}",
    )
    figure(
        BENCH,
        f"{store}.cold_turn_after_{LONG}_steps{suffix}",
        cold_turn * 1000,
        "ms",
        better="lower",
        label=f"the same on an engine that did not write the run, {label}",
    )


async def main(url: str | None) -> None:
    codec_figures()
    codec = td.AesGcmCodec(td.Keyring.single(os.urandom(32)))
    with tempfile.TemporaryDirectory() as folder:
        for chosen in (None, codec):
            target = url or f"sqlite:///{Path(folder) / ('coded.db' if chosen else 'plain.db')}"
            await run_figures(target, chosen)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=None, help="a store URL (default: a SQLite file)")
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args.url)
