"""Engine throughput on the memory and SQLite stores.

Prints, for each store (cases ``memory.*`` and ``sqlite.*``):
- three-local-step workflows per second, run one after another
  (``sequential``);
- the same with 2,000 started one by one, each start awaited, then every
  result awaited (``one_by_one``: DBOS's benchmark shape);
- the same with 1,000 started at once (``concurrent``);
- store reads and writes per step (checkpoint rows read, operations written,
  transactions committed);
- the wall time of a fan of 1,000 child workflows joined by its parent
  (``fan_children``);
- and, for SQLite, the bytes written for one run with a 5 MB input and ten
  timers (see `bench_write_volume`).

It prints figures (and, with ``--json PATH``, writes them as JSON lines)
and never passes or fails. Usage: ``python bench/bench_engine.py
[--stores memory,sqlite] [--sequential N] [--one-by-one N] [--concurrent N]
[--fan N] [--input-mb MB] [--timers N] [--json PATH]``.
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
from _figures import add_gc_option, add_json_option, add_names_option, figure, use_args

import trio_durable as td

BENCH = "bench_engine"
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
    """Wall seconds of ``fn``; its CPU seconds (every thread of this process:
    the engine and the store's thread) are left in `_last_cpu`."""
    global _last_cpu
    cpu = time.process_time()
    start = time.perf_counter()
    await fn()
    _last_cpu = time.process_time() - cpu
    return time.perf_counter() - start


_last_cpu = 0.0


def _cpu_figure(case: str, n: int) -> None:
    """CPU per workflow of the last `_timed` call: less sensitive than
    throughput to other processes sharing the machine."""
    figure(BENCH, f"{case}.cpu", 1000 * _last_cpu / n, "ms/workflow", better="lower", label="  CPU")


def _per_unit(
    bench_case: str, before: tuple[int, int, int], after: tuple[int, int, int], n: int, unit: str
) -> None:
    """Store reads and writes per ``unit`` (step or child) between two counts."""
    rows, ops, transactions = (b - a for a, b in zip(before, after, strict=True))
    for name, value, what in (
        ("checkpoint_rows_read", rows, "checkpoint rows read"),
        ("ops_written", ops, "ops written"),
        ("transactions", transactions, "transactions"),
    ):
        figure(
            BENCH,
            f"{bench_case}.{name}_per_{unit}",
            value / n,
            f"per {unit}",
            better="lower",
            label=f"  {what}",
        )


async def bench_store(
    url: str,
    store: str,
    label: str,
    sequential: int,
    one_by_one: int,
    concurrent: int,
    fan_size: int,
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
        figure(
            BENCH,
            f"{store}.sequential",
            sequential / elapsed,
            "workflows/s",
            label=f"one after another ({sequential} in {elapsed:.2f} s)",
        )
        _cpu_figure(f"{store}.sequential", sequential)
        _per_unit(f"{store}.sequential", before, _store_counts(engine), 3 * sequential, "step")

        async def started_one_by_one() -> None:
            # DBOS's benchmark shape: each start awaited (written) before the
            # next, then every result awaited.
            runs = [
                await engine.start(three_steps, i, run_id=f"obo-{i}") for i in range(one_by_one)
            ]
            for i, run in enumerate(runs):
                assert await run.result() == (i + 1) * 2 - 3

        if one_by_one:
            before = _store_counts(engine)
            elapsed = await _timed(started_one_by_one)
            figure(
                BENCH,
                f"{store}.one_by_one",
                one_by_one / elapsed,
                "workflows/s",
                label=f"{one_by_one} started one by one, then awaited ({elapsed:.2f} s)",
            )
            _cpu_figure(f"{store}.one_by_one", one_by_one)
            _per_unit(f"{store}.one_by_one", before, _store_counts(engine), 3 * one_by_one, "step")

        async def all_at_once() -> None:
            async def one_run(i: int) -> None:
                run = await engine.start(three_steps, i, run_id=f"con-{i}")
                assert await engine.result(run.id) == (i + 1) * 2 - 3

            async with trio.open_nursery() as nursery:
                for i in range(concurrent):
                    nursery.start_soon(one_run, i)

        before = _store_counts(engine)
        elapsed = await _timed(all_at_once)
        figure(
            BENCH,
            f"{store}.concurrent",
            concurrent / elapsed,
            "workflows/s",
            label=f"{concurrent} at once ({elapsed:.2f} s)",
        )
        _cpu_figure(f"{store}.concurrent", concurrent)
        _per_unit(f"{store}.concurrent", before, _store_counts(engine), 3 * concurrent, "step")

        async def fan_join() -> None:
            run = await engine.start(fan, fan_size, run_id="fan")
            assert await engine.result(run.id) == fan_size * (fan_size - 1) // 2

        before = _store_counts(engine)
        elapsed = await _timed(fan_join)
        figure(
            BENCH,
            f"{store}.fan_children",
            elapsed,
            "s",
            better="lower",
            label=f"fan of {fan_size} children joined",
            children=fan_size,
        )
        figure(
            BENCH,
            f"{store}.fan_children.cpu",
            1000 * _last_cpu,
            "ms",
            better="lower",
            label="  CPU (the whole fan)",
        )
        _per_unit(f"{store}.fan_children", before, _store_counts(engine), fan_size, "child")
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
        figure(
            BENCH,
            "sqlite.write_volume.logged",
            logged / 1e6,
            "MB/run",
            better="lower",
            label=f"logged (WAL), {logged / size:.2f}x the input",
        )

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
            figure(
                BENCH,
                "sqlite.write_volume.all",
                written / 1e6,
                "MB/run",
                better="lower",
                label=f"in all (WAL and checkpoints), {written / size:.2f}x the input",
            )


async def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable engine benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}"
    )
    stores = args.stores
    sizes = (args.sequential, args.one_by_one, args.concurrent, args.fan)
    if "memory" in stores:
        await bench_store("memory://", "memory", "memory store", *sizes)
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "bench.db"
            await bench_store(f"sqlite:///{db}", "sqlite", "SQLite store", *sizes)
    if args.input_mb > 0:
        await bench_write_volume(args.input_mb, args.timers)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_names_option(parser, "--stores", ("memory", "sqlite"))
    parser.add_argument("--sequential", type=int, default=2000)
    parser.add_argument("--one-by-one", type=int, default=2000, help="0 skips this case")
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--fan", type=int, default=1000)
    parser.add_argument("--input-mb", type=float, default=5.0, help="0 skips the write volume")
    parser.add_argument("--timers", type=int, default=10)
    add_json_option(parser)
    add_gc_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
