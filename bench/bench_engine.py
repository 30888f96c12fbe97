"""Engine throughput on the memory and SQLite stores.

Prints, for each store:
- three-local-step workflows per second, run one after another;
- the same with 1,000 started at once;
- store reads and writes per step (checkpoint rows read, operations written,
  transactions committed);
- the wall time of a fan of 1,000 child workflows joined by its parent;
- and, for SQLite, the bytes written for one run with a 5 MB input and ten
  timers (see `bench_write_volume`).

It prints figures and never passes or fails. Usage:
``python bench/bench_engine.py [--sequential N] [--concurrent N] [--fan N]
[--input-mb MB] [--timers N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import string
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


@app.workflow()
async def timers(ctx: td.Context, payload: str, n: int) -> int:
    for _ in range(n):
        await ctx.sleep(0.01)
    return len(payload)


def _store_counts(engine: td.Engine) -> tuple[int, int, int]:
    stats = engine.store.statistics()
    return stats.checkpoint_rows_read, stats.ops, stats.transactions


async def _timed(fn: Callable[[], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


async def bench_store(
    url: str, label: str, sequential: int, concurrent: int, fan_size: int
) -> None:
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
        print(
            f"  one after another: {sequential / elapsed:8.0f} workflows/s ({sequential} in {elapsed:.2f} s)"
        )
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
        print(
            f"  {concurrent} at once:     {concurrent / elapsed:8.0f} workflows/s ({elapsed:.2f} s)"
        )
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


def _bytes_written() -> int | None:
    """Bytes this process has passed to write() so far (Linux only)."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _wal_size(path: Path) -> int:
    return os.path.getsize(f"{path}-wal")


async def _run_timers(path: Path, payload: str, n: int) -> None:
    async with td.open_engine(app, store=f"sqlite:///{path}", seed=1) as engine:
        run = await engine.start(timers, payload, n, run_id="big")
        assert await engine.result(run.id) == len(payload)


async def bench_write_volume(input_mb: float, n: int) -> None:
    """Bytes the SQLite store writes for one run with a large input and ``n``
    timers, each turn rewriting the run's row. Two measures, each on a new
    file whose schema is written before measuring:

    - logged: the growth of the write-ahead log while a second connection
      holds a read transaction open on an emptied WAL. SQLite can then copy
      no frame into the database file, so it never reuses the WAL from its
      start, and the WAL's size is every page the run's commits wrote.
    - in all: the bytes the process passed to write() during the run
      (``wchar`` in /proc/self/io, Linux only), checkpoints running as
      usual: the WAL's frames plus the checkpoints' copies of them into the
      database file. WAL mode writes each page twice, so at least 2x.
    """
    size = int(input_mb * 1_000_000)
    # Random letters: no page holds them in fewer bytes.
    payload = "".join(random.Random(0).choices(string.ascii_letters, k=size))
    print(f"\nSQLite writes for one run with a {size / 1e6:.1f} MB input and {n} timers")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logged.db"
        async with td.open_store(f"sqlite:///{path}"):
            pass
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM runs").fetchone()
            await _run_timers(path, payload, n)
            logged = _wal_size(path)
            reader.execute("COMMIT")
        finally:
            reader.close()
        print(f"  logged (WAL):  {logged / 1e6:8.2f} MB per run ({logged / size:.2f}x the input)")

        path = Path(tmp) / "all.db"
        async with td.open_store(f"sqlite:///{path}"):
            pass
        before = _bytes_written()
        await _run_timers(path, payload, n)
        after = _bytes_written()
        if before is None or after is None:
            print("  in all: needs Linux's /proc/self/io")
        else:
            written = after - before
            print(
                f"  in all (WAL and checkpoints): {written / 1e6:8.2f} MB per run"
                f" ({written / size:.2f}x the input)"
            )


async def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable engine benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}"
    )
    await bench_store("memory://", "memory store", args.sequential, args.concurrent, args.fan)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        await bench_store(
            f"sqlite:///{db}", "SQLite store", args.sequential, args.concurrent, args.fan
        )
    await bench_write_volume(args.input_mb, args.timers)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--fan", type=int, default=1000)
    parser.add_argument("--input-mb", type=float, default=5.0)
    parser.add_argument("--timers", type=int, default=10)
    trio.run(main, parser.parse_args())
