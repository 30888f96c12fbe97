"""Cross-process wake-up latency: from a signal sent by a client in another
OS process to the run's wake on the engine serving it.

An engine in this process starts ``--signals`` runs (300) that each wait for
a signal, and drains (every run suspended, its lease given back). A client
in a second process (this script with ``--client``) then signals them one
after another, ``--gap`` seconds apart (0.02), each with the wall-clock time
just before its write as the payload. The run's next turn records, in a
local step, the time it resumed minus that stamp: the latency covers the
client's write and commit, the announcement reaching the engine's watch,
the wake, the turn's lease and read, and the replay up to the step.

It measures SQLite (a file in a temporary folder; ``--watch-interval``,
default the store's 0.01 s) and PostgreSQL (a fresh schema of ``--url``,
default ``$POSTGRES_URL``, dropped at the end), and prints p50, p99 and the
maximum per store (cases ``<store>.signal_latency.p50``, ``.p99``,
``.max``; with ``--json PATH``, also as JSON lines). Usage: ``python
bench/bench_signal_latency.py [--stores sqlite,postgres] [--signals 300]
[--gap 0.02]``. It prints figures and never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import trio
from _figures import add_json_option, add_names_option, figure, use_args

import trio_durable as td

BENCH = "bench_signal_latency"

app = td.App("bench-latency")

latencies: list[float] = []
enough = trio.Event()
wanted = 0


@app.step()
async def mark(sent: float) -> None:
    latencies.append(time.time() - sent)
    if len(latencies) >= wanted:
        enough.set()


@app.workflow()
async def wait_mark(ctx: td.Context) -> None:
    sent = await ctx.wait_signal("go", type=float)
    await ctx.step(mark, sent)


async def send(url: str, count: int, gap: float) -> None:
    """The client process: signal every run, ``gap`` seconds apart."""
    async with td.open_client(url) as client:
        for i in range(count):
            await client.signal(f"lat-{i}", "go", time.time())
            await trio.sleep(gap)


async def measure(url: str, count: int, gap: float) -> list[float]:
    global enough, wanted
    latencies.clear()
    enough = trio.Event()
    wanted = count
    async with td.open_engine(app, store=url, engine_id="bench") as engine:
        for i in range(count):
            await engine.start(wait_mark, run_id=f"lat-{i}")
        await engine.drain()
        with trio.fail_after(120 + count * gap):
            await trio.run_process(
                [sys.executable, __file__, "--client", url, str(count), str(gap)],
                stdout=subprocess.DEVNULL,
            )
        with trio.fail_after(60):
            await enough.wait()
    return sorted(latencies)


async def postgres_url(stack: AsyncExitStack, base: str) -> str:
    """A fresh schema of ``base``, dropped when ``stack`` closes."""
    import psycopg
    from psycopg import sql

    schema = f"bench_{secrets.token_hex(4)}"

    def drop() -> None:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    async def dropped() -> None:
        await trio.to_thread.run_sync(drop)

    stack.push_async_callback(dropped)
    return f"{base}{'&' if '?' in base else '?'}schema={schema}"


def percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


async def main(args: argparse.Namespace) -> None:
    print(
        f"signal latency, another process to the run's wake ({args.signals} signals,"
        f" {args.gap * 1000:.0f} ms apart)"
    )
    for store in args.stores:
        async with AsyncExitStack() as stack:
            if store == "sqlite":
                folder = stack.enter_context(tempfile.TemporaryDirectory())
                url = f"sqlite:///{Path(folder) / 'latency.db'}"
                if args.watch_interval is not None:
                    url += f"?watch_interval={args.watch_interval}"
            elif store == "postgres":
                url = await postgres_url(stack, args.url)
            else:
                raise SystemExit(f"unknown store {store!r} (sqlite or postgres)")
            values = await measure(url, args.signals, args.gap)
        for name, value in (
            ("p50", statistics.median(values)),
            ("p99", percentile(values, 0.99)),
            ("max", values[-1]),
        ):
            figure(
                BENCH,
                f"{store}.signal_latency.{name}",
                value * 1000,
                "ms",
                better="lower",
                label=f"{store:8} {name}",
                signals=len(values),
            )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        trio.run(send, sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
        sys.exit()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_names_option(parser, "--stores", ("sqlite", "postgres"))
    parser.add_argument("--signals", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--watch-interval", type=float, default=None)
    parser.add_argument(
        "--url",
        default=os.environ.get("POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(partial(main, args))
