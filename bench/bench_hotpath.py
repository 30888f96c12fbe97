"""What one run of one remote step costs the engine: memory store, memory
broker, embedded worker, many runs at once.

Prints, for ``--runs`` runs started at once (best of ``--repeat``):

- runs per second (wall time, so noisy on a busy machine);
- CPU time per run (the process's own, so steadier than wall time);
- store transactions and operations per run, and turns per run.

The same script runs against another checkout's code when started with
that checkout's interpreter (its ``trio_durable``), which is how two commits
are compared side by side. It prints figures and never passes or fails.
Usage: ``python bench/bench_hotpath.py [--runs 1000] [--repeat 3] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._stores._memory import MemoryStore

BENCH = "bench_hotpath"

app = td.App("bench-hotpath")


@app.step(group="work")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def one_step(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


async def one_round(runs: int) -> tuple[float, float, float, float, float]:
    """Runs/s, CPU seconds per run, transactions, operations and turns per
    run, for ``runs`` one-step runs started at once."""
    store = MemoryStore()
    async with td.open_engine(
        app, store=store, broker=MemoryBroker(), serve=["work"], worker_concurrency=256, seed=1
    ) as engine:
        stats = store.statistics()
        before = (stats.transactions, stats.ops, engine.statistics().turns)

        async def one(i: int) -> None:
            run = await engine.start(one_step, i, run_id=f"r-{i}")
            assert await engine.result(run.id) == i * i

        wall, cpu = time.perf_counter(), time.process_time()
        async with trio.open_nursery() as nursery:
            for i in range(runs):
                nursery.start_soon(one, i)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        await engine.drain()
        return (
            runs / wall,
            cpu / runs,
            (stats.transactions - before[0]) / runs,
            (stats.ops - before[1]) / runs,
            (engine.statistics().turns - before[2]) / runs,
        )


def main(args: argparse.Namespace) -> None:
    print(
        f"trio-durable one-remote-step runs, Python {sys.version.split()[0]}, trio {trio.__version__}"
    )
    print(f"memory broker, memory store, embedded worker; {args.runs} runs at once")
    rounds = [trio.run(one_round, args.runs) for _ in range(args.repeat)]
    rate = max(r[0] for r in rounds)
    cpu = min(r[1] for r in rounds)
    transactions, ops, turns = rounds[-1][2:]
    figure(BENCH, "memory.one_step_runs", rate, "runs/s", label="runs at once")
    figure(BENCH, "memory.one_step_cpu", cpu * 1e6, "us/run", better="lower", label="CPU per run")
    figure(
        BENCH,
        "memory.one_step_transactions",
        transactions,
        "tx/run",
        better="lower",
        label="store transactions per run",
    )
    figure(
        BENCH,
        "memory.one_step_ops",
        ops,
        "ops/run",
        better="lower",
        label="store operations per run",
    )
    figure(
        BENCH, "memory.one_step_turns", turns, "turns/run", better="lower", label="turns per run"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    parsed = parser.parse_args()
    use_args(parsed)
    main(parsed)
