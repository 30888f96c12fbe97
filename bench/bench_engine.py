"""Engine throughput on the memory and SQLite stores.

Prints, for each store:
- three-local-step workflows per second, run one after another;
- the same with 1,000 started at once;
- store reads and writes per step (checkpoint rows read, operations written,
  transactions committed);
- the wall time of a fan of 1,000 child workflows joined by its parent.

It prints figures and never passes or fails. Usage:
``python bench/bench_engine.py [--sequential N] [--concurrent N] [--fan N]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import trio_durable as td

app = td.App("bench")


@app.step()
async def one(x: int) -> int:
    return x + 1


@app.step()
async def two(x: int) -> int:
    return x * 2


@app.step()
async def three(x: int) -> int:
    return x - 3


@app.workflow()
async def three_steps(ctx: td.Context, x: int) -> int:
    a = await ctx.step(one, x)
    b = await ctx.step(two, a)
    return await ctx.step(three, b)


@app.workflow()
async def member(ctx: td.Context, x: int) -> int:
    return x


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    values = await ctx.all(member, list(range(n)))
    return sum(values)


def _store_counts(engine: td.Engine) -> tuple[int, int, int]:
    stats = engine.store.statistics()
    return stats.checkpoint_rows_read, stats.ops, stats.transactions


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def bench_store(url: str, label: str, sequential: int, concurrent: int, fan_size: int) -> None:
    async with td.open_engine(app, store=url, seed=1) as engine:
        synchronous = getattr(engine.store, "synchronous", None)
        setting = f" (synchronous={synchronous})" if synchronous else ""
        print(f"\n{label}{setting}")

        async def one_after_another() -> None:
            for i in range(sequential):
                run = await engine.start(three_steps, i, run_id=f"seq-{i}")
                assert await engine.result(run.id) == (i + 1) * 2 - 3

        before = _store_counts(engine)
        elapsed = await _timed(one_after_another)
        after = _store_counts(engine)
        steps = 3 * sequential
        print(f"  one after another: {sequential / elapsed:8.0f} workflows/s ({sequential} in {elapsed:.2f} s)")
        print(
            "    per step: "
            f"{(after[0] - before[0]) / steps:.2f} checkpoint rows read, "
            f"{(after[1] - before[1]) / steps:.2f} ops written, "
            f"{(after[2] - before[2]) / steps:.2f} transactions"
        )

        async def all_at_once() -> None:
            async def one_run(i: int) -> None:
                run = await engine.start(three_steps, i, run_id=f"con-{i}")
                assert await engine.result(run.id) == (i + 1) * 2 - 3

            async with trio.open_nursery() as nursery:
                for i in range(concurrent):
                    nursery.start_soon(one_run, i)

        before = _store_counts(engine)
        elapsed = await _timed(all_at_once)
        after = _store_counts(engine)
        steps = 3 * concurrent
        print(f"  {concurrent} at once:     {concurrent / elapsed:8.0f} workflows/s ({elapsed:.2f} s)")
        print(
            "    per step: "
            f"{(after[0] - before[0]) / steps:.2f} checkpoint rows read, "
            f"{(after[1] - before[1]) / steps:.2f} ops written, "
            f"{(after[2] - before[2]) / steps:.3f} transactions"
        )

        async def fan_join() -> None:
            run = await engine.start(fan, fan_size, run_id="fan")
            assert await engine.result(run.id) == fan_size * (fan_size - 1) // 2

        before = _store_counts(engine)
        elapsed = await _timed(fan_join)
        after = _store_counts(engine)
        print(f"  fan of {fan_size} children joined: {elapsed:.2f} s")
        print(
            f"    per child: {(after[0] - before[0]) / fan_size:.2f} checkpoint rows read, "
            f"{(after[1] - before[1]) / fan_size:.2f} ops written"
        )
        await engine.drain()


async def main(args: argparse.Namespace) -> None:
    print(f"trio-durable engine benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}")
    await bench_store("memory://", "memory store", args.sequential, args.concurrent, args.fan)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        await bench_store(f"sqlite:///{db}", "SQLite store", args.sequential, args.concurrent, args.fan)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--fan", type=int, default=1000)
    trio.run(main, parser.parse_args())
