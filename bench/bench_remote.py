"""Remote steps over the memory broker and the memory store.

Prints:
- remote steps per second for 1,000 concurrent runs of one remote step each;
- for a single fan of N remote steps (N = 1,000, 10,000, 100,000 by
  default), its wall time, steps per second, and checkpoint rows read and
  store operations written per step.

The worker runs inside the engine (``serve=``), so the figures measure the
engine, the worker and the broker protocol together, on one Trio thread.
Cases: ``memory.remote_one_step`` and ``memory.remote_fan_<N>``. It prints
figures (with ``--json PATH``, also as JSON lines) and never passes or
fails. Usage: ``python bench/bench_remote.py [--runs N]
[--fans 1000,10000,100000] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import trio
from _figures import add_gc_option, add_json_option, figure, use_args

import trio_durable as td
from trio_durable._brokers._memory import MemoryBroker

BENCH = "bench_remote"

app = td.App("bench-remote")


@app.step(group="work")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def one_step(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@app.workflow()
async def fan(ctx: td.Context, n: int) -> int:
    values = await ctx.all(square, list(range(n)))
    return sum(values)


async def bench_runs(runs: int) -> None:
    async with td.open_engine(
        app, broker=MemoryBroker(), serve=["work"], worker_concurrency=256, seed=1
    ) as engine:

        async def one(i: int) -> None:
            run = await engine.start(one_step, i, run_id=f"r-{i}")
            assert await engine.result(run.id) == i * i

        cpu = time.process_time()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(runs):
                nursery.start_soon(one, i)
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu
        figure(
            BENCH,
            "memory.remote_one_step",
            runs / elapsed,
            "steps/s",
            label=f"{runs} runs of one remote step, at once ({elapsed:.2f} s)",
        )
        figure(
            BENCH,
            "memory.remote_one_step.cpu",
            1000 * cpu / runs,
            "ms/run",
            better="lower",
            label="  CPU (engine, worker and broker)",
        )


async def bench_fan(n: int) -> tuple[float, float]:
    async with td.open_engine(
        app, broker=MemoryBroker(), serve=["work"], worker_concurrency=256, seed=1
    ) as engine:
        stats = engine.store.statistics()
        start = time.perf_counter()
        run = await engine.start(fan, n, run_id=f"fan-{n}")
        assert await engine.result(run.id) == sum(i * i for i in range(n))
        elapsed = time.perf_counter() - start
        rows = stats.checkpoint_rows_read / n
        case = f"memory.remote_fan_{n}"
        figure(
            BENCH,
            case,
            n / elapsed,
            "steps/s",
            label=f"fan of {n} ({elapsed:.2f} s, {engine.statistics().turns} parent+member turns)",
        )
        figure(
            BENCH,
            f"{case}.checkpoint_rows_read_per_step",
            rows,
            "per step",
            better="lower",
            label="  checkpoint rows read",
        )
        figure(
            BENCH,
            f"{case}.ops_per_step",
            stats.ops / n,
            "per step",
            better="lower",
            label="  ops written",
        )
        return elapsed, rows


async def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable remote-step benchmark, Python {sys.version.split()[0]}, trio {trio.__version__}"
    )
    print("memory broker, memory store, embedded worker (concurrency 256)")
    await bench_runs(args.runs)
    figures = []
    for n in (int(x) for x in args.fans.split(",") if x):
        figures.append((n, *await bench_fan(n)))
    if len(figures) > 1:
        first, last = figures[0], figures[-1]
        figure(
            BENCH,
            "memory.remote_fan.rows_read_growth",
            last[2] / first[2],
            "x",
            better="lower",
            label=f"rows read per step, N={last[0]} vs N={first[0]} (flat is 1.00x)",
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--fans", default="1000,10000,100000", help="empty: no fan")
    add_json_option(parser)
    add_gc_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
