"""A fan of remote steps with ``concurrency=``: rows read and wall time.

One run fans N remote steps (10,000 by default), ``concurrency`` at a time
(50), each sleeping a time drawn at random between 1 and 100 ms (seeded,
so every run of the bench draws the same times), on the memory broker and
the memory store, with the worker inside the engine. It prints, through
`_figures`, the fan's wall time and the checkpoint rows its run read.

Run it against another checkout's code (main's, to compare with the waves
that fans ran in before sliding windows) by putting that code first on the
path: ``PYTHONPATH=<checkout>/src python bench/bench_fan_window.py``. The
JSON lines say whose code ran (``code``: the short commit of the package
imported).

The floor of the wall time is the sum of the members' times over the
window: N * 50.5 ms / concurrency (10.1 s by default); waves of
``concurrency`` wait for each wave's slowest member instead (about
N / concurrency * 98 ms: 19.6 s). Usage:
``python bench/bench_fan_window.py [--members N] [--concurrency C] [--seed S] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td
from trio_durable._brokers._memory import MemoryBroker

BENCH = "bench_fan_window"

app = td.App("bench-fan-window")


@app.step(group="work")
async def nap(ms: int) -> int:
    await trio.sleep(ms / 1000)
    return ms


@app.workflow()
async def fan(ctx: td.Context, times: list[int], concurrency: int) -> int:
    return sum(await ctx.all(nap, times, concurrency=concurrency))


def code_commit() -> str:
    """The short commit of the trio_durable package imported."""
    where = Path(td.__file__).parent
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=where,
            timeout=60,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


async def main(args: argparse.Namespace) -> None:
    rng = random.Random(args.seed)
    times = [rng.randint(1, 100) for _ in range(args.members)]
    n, c = args.members, args.concurrency
    code = code_commit()
    print(
        f"trio-durable fan window benchmark, Python {sys.version.split()[0]}, "
        f"trio {trio.__version__}, code {code} ({Path(td.__file__).parent})"
    )
    print(
        f"{n} remote steps of 1-100 ms (seed {args.seed}), concurrency {c}; "
        f"floor {sum(times) / c / 1000:.2f} s"
    )
    async with td.open_engine(
        app, broker=MemoryBroker(), serve=["work"], worker_concurrency=2 * c, seed=1
    ) as engine:
        stats = engine.store.statistics()
        before = stats.checkpoint_rows_read
        start = time.perf_counter()
        run = await engine.start(fan, times, c, run_id="fan")
        assert await engine.result(run.id) == sum(times)
        elapsed = time.perf_counter() - start
        rows = stats.checkpoint_rows_read - before
        turns = engine.statistics().turns
    case = f"window.fan_{n}_c{c}"
    figure(BENCH, f"{case}.wall", elapsed, "s", better="lower", code=code, turns=turns)
    figure(BENCH, f"{case}.rows_read", rows, "rows", better="lower", code=code, turns=turns)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seed", type=int, default=19)
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
