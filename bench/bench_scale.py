"""Scale: the cost of a run beside a large store, and the memory of a
suspended run.

Prints:

- ``scale.sqlite_empty`` and ``scale.sqlite_1m_terminal``: workflows/s for
  ``--concurrent`` (1,000) three-step workflows started at once, on an empty
  SQLite store and on one that already holds ``--runs`` (1,000,000) terminal
  runs (each with ``--steps`` (3) completed step checkpoints and its input),
  alternately, ``--repeat`` (2) rounds each; then ``scale.sqlite_1m_terminal.ratio``,
  the median on the full store over the median on the empty one (1.00x:
  the cost per run does not grow with the store);
- ``memory.bytes_per_suspended_run`` and ``sqlite.bytes_per_suspended_run``:
  the engine's memory per run suspended on a timer, with ``--suspended``
  (10,000) runs each sleeping an hour, on the memory store (whose rows are
  in this process's memory too) and on SQLite: the growth of the Python
  heap (tracemalloc, after a garbage collection) from the open engine with
  no run to the engine with every run suspended and drained, divided by the
  runs; also the growth of the process's resident set (``.rss``, coarser:
  the allocator keeps freed memory).

The full store is built fast: the store's own migration writes the schema,
then rows go in with ``sqlite3`` ``executemany`` in one transaction. The
built file is cached in ``--cache`` (``/tmp/trio-durable-bench-scale``),
named by the schema version and sizes, and copied before each round so
every round starts from the same rows; a rerun skips the build.

Usage: ``python bench/bench_scale.py [--runs 1000000] [--concurrent 1000]
[--suspended 10000] [--repeat 2] [--only throughput|memory] [--json PATH]``.
It prints figures (with ``--json``, also as JSON lines) and never passes or
fails.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td
from trio_durable._stores._sqlite_schema import SCHEMA_VERSION

BENCH = "bench_scale"
CHUNK = 50_000

app = td.App("bench-scale")


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
async def sleeper(ctx: td.Context, x: int) -> int:
    await ctx.sleep(3600)
    return x


# -- building the full store --------------------------------------------------------------


def _run_rows(runs: int) -> Iterator[tuple[object, ...]]:
    # Run i was created i / 100 s after the epoch below and ended a second
    # later; 90% completed, 10% failed, as a store's history would hold.
    for i in range(runs):
        at = 1_700_000_000 + i / 100
        failed = i % 10 == 9
        yield (
            f"old-{i:07d}",
            "three_steps",
            "1",
            "default",
            "failed" if failed else "completed",
            None if failed else str(i),
            '{"message": "boom", "code": "refused"}' if failed else None,
            "[]",
            0,
            0,
            at,
            at + 1,
        )


def _input_rows(runs: int) -> Iterator[tuple[object, ...]]:
    for i in range(runs):
        yield f"old-{i:07d}", f"[{i}]"


def _checkpoint_rows(runs: int, steps: int) -> Iterator[tuple[object, ...]]:
    for i in range(runs):
        at = 1_700_000_000 + i / 100
        for seq in range(1, steps + 1):
            yield (
                f"old-{i:07d}",
                seq,
                f"step{seq}",
                "local",
                "completed",
                f"[{i}]",
                str(i + seq),
                1,
                at,
                at + seq / 10,
            )


def _chunks(rows: Iterator[tuple[object, ...]]) -> Iterator[list[tuple[object, ...]]]:
    chunk: list[tuple[object, ...]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def fill(path: Path, runs: int, steps: int) -> None:
    """Insert ``runs`` terminal runs into the store at ``path`` (its schema
    already written by the store)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = OFF")  # a bench fixture, rebuilt if lost
        conn.execute("BEGIN")
        for chunk in _chunks(_run_rows(runs)):
            conn.executemany(
                "INSERT INTO runs (id, workflow, version, namespace, status, output, error,"
                " tags, compensate, recoveries, created_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunk,
            )
        for chunk in _chunks(_input_rows(runs)):
            conn.executemany("INSERT INTO run_inputs (run_id, input) VALUES (?, ?)", chunk)
        for chunk in _chunks(_checkpoint_rows(runs, steps)):
            conn.executemany(
                "INSERT INTO checkpoints (run_id, seq, name, kind, status, input, output,"
                " attempts, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunk,
            )
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _cached(cache: Path, runs: int, steps: int) -> tuple[Path, bool]:
    """The cache's file for these sizes, and whether it is built; clears a
    build left half done."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"terminal-v{SCHEMA_VERSION}-{runs}-{steps}.db"
    for leftover in cache.glob(f"{path.stem}.building*"):
        leftover.unlink()
    return path, path.exists()


def _publish(building: Path, path: Path) -> float:
    """Move a finished build into place; its size in MB."""
    for suffix in ("-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    building.rename(path)
    return path.stat().st_size / 1e6


async def full_store(cache: Path, runs: int, steps: int) -> Path:
    """The cached file holding ``runs`` terminal runs, built if missing."""
    path, built = await trio.to_thread.run_sync(_cached, cache, runs, steps)
    if built:
        print(f"  using the cached store {path}")
        return path
    building = path.with_suffix(".building")
    start = time.perf_counter()
    async with td.open_store(f"sqlite:///{building}"):
        pass
    await trio.to_thread.run_sync(fill, building, runs, steps)
    size = await trio.to_thread.run_sync(_publish, building, path)
    print(f"  built {path} ({runs:,} runs, {size:,.0f} MB) in {time.perf_counter() - start:.1f} s")
    return path


# -- throughput ---------------------------------------------------------------------------


async def one_round(url: str, concurrent: int, prefix: str) -> float:
    """Workflows/s of ``concurrent`` three-step workflows started at once."""
    async with td.open_engine(app, store=url, seed=1) as engine:

        async def one_run(i: int) -> None:
            run = await engine.start(three_steps, i, run_id=f"{prefix}-{i}")
            assert await engine.result(run.id) == (i + 1) * 2 - 3

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(concurrent):
                nursery.start_soon(one_run, i)
        return concurrent / (time.perf_counter() - start)


async def throughput(args: argparse.Namespace) -> None:
    label = f"{args.runs:,} terminal runs"
    print(f"\n{args.concurrent} three-step workflows at once, SQLite, empty vs {label}")
    full = await full_store(Path(args.cache), args.runs, args.steps)
    rates: dict[str, list[float]] = {"empty": [], "full": []}
    with tempfile.TemporaryDirectory() as folder:
        for round_number in range(1, args.repeat + 1):
            for name in ("empty", "full"):
                db = Path(folder) / f"{name}-{round_number}.db"
                if name == "full":
                    await trio.to_thread.run_sync(shutil.copyfile, full, db)
                rate = await one_round(f"sqlite:///{db}", args.concurrent, f"r{round_number}")
                rates[name].append(rate)
                case = "scale.sqlite_empty" if name == "empty" else "scale.sqlite_1m_terminal"
                what = "empty store" if name == "empty" else f"store holding {label}"
                figure(BENCH, case, rate, "workflows/s", label=f"round {round_number}, {what}")
                db.unlink()
    figure(
        BENCH,
        "scale.sqlite_1m_terminal.ratio",
        statistics.median(rates["full"]) / statistics.median(rates["empty"]),
        "x",
        label=f"median with {label} / median on an empty store (flat is 1.00x)",
        runs=args.runs,
    )


# -- memory per suspended run -------------------------------------------------------------


def _rss() -> int:
    """This process's resident set, in bytes (Linux's /proc)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def suspended_memory(url: str, store: str, n: int) -> None:
    async with td.open_engine(app, store=url, seed=1) as engine:
        await engine.drain()
        gc.collect()
        heap_before, rss_before = tracemalloc.get_traced_memory()[0], _rss()

        async def start_some(first: int, count: int) -> None:
            for i in range(first, first + count):
                await engine.start(sleeper, i, run_id=f"sleep-{i}")

        # Ten starters at a time: the runs' first turns overlap as in a
        # service, without one task per run.
        async with trio.open_nursery() as nursery:
            share = -(-n // 10)
            for first in range(0, n, share):
                nursery.start_soon(start_some, first, min(share, n - first))
        await engine.drain()
        gc.collect()
        heap, rss = tracemalloc.get_traced_memory()[0] - heap_before, _rss() - rss_before
        page = await engine.list_runs(limit=1, facets=True)
        assert page.facets is not None
        assert page.facets.get("suspended") == n, page.facets
        figure(
            BENCH,
            f"{store}.bytes_per_suspended_run",
            heap / n,
            "bytes/run",
            better="lower",
            label=f"{store} store, {n:,} runs on a timer: Python heap per run",
        )
        figure(
            BENCH,
            f"{store}.bytes_per_suspended_run.rss",
            rss / n,
            "bytes/run",
            better="lower",
            label=f"{store} store: resident set per run",
        )


async def memory(args: argparse.Namespace) -> None:
    print(f"\nmemory per suspended run ({args.suspended:,} runs sleeping an hour)")
    tracemalloc.start()
    try:
        await suspended_memory("memory://", "memory", args.suspended)
        with tempfile.TemporaryDirectory() as folder:
            await suspended_memory(
                f"sqlite:///{Path(folder) / 'sleep.db'}", "sqlite", args.suspended
            )
    finally:
        tracemalloc.stop()


async def main(args: argparse.Namespace) -> None:
    print(f"trio-durable scale benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}")
    if args.only != "memory":
        await throughput(args)
    if args.only != "throughput":
        await memory(args)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=1_000_000, help="terminal runs in the full store"
    )
    parser.add_argument("--steps", type=int, default=3, help="checkpoints per terminal run")
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--suspended", type=int, default=10_000)
    parser.add_argument(
        "--cache", default=os.path.join(tempfile.gettempdir(), "trio-durable-bench-scale")
    )
    parser.add_argument("--only", choices=["throughput", "memory"])
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
