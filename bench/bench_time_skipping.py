"""Time-skipping: real time for a long `ctx.sleep` under
``trio.testing.MockClock(autojump_threshold=0)``.

A workflow runs a step, sleeps ``days`` virtual days and runs a step again;
an engine with default options starts it and waits for its result. Each
case runs in a fresh process (this script with ``--case STORE DAYS``), so
a case that takes too long is stopped after ``--limit`` seconds (60) and
reported as such, instead of holding up the rest.

It prints the real milliseconds per store (``memory``, ``sqlite``: a file
in a temporary folder) and per virtual length (0.1, 1, 3, 30 and 365 days
by default): the whole case, opening and closing the engine and its store
included (cases ``<store>.sleep_<days>d``), and from the start to the
result alone (``<store>.sleep_<days>d.wait``); with ``--json PATH`` also as
JSON lines. Usage: ``python bench/bench_time_skipping.py [--stores
memory,sqlite] [--days 0.1,1,3,30,365] [--limit 60]``. It prints figures
and never passes or fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
import trio.testing
from _figures import add_json_option, add_names_option, figure, use_args

import trio_durable as td

BENCH = "bench_time_skipping"

app = td.App("bench-time-skipping")


@app.step()
async def stamp(label: str) -> str:
    return label


@app.workflow()
async def sleeper(ctx: td.Context, seconds: float) -> float:
    await ctx.step(stamp, "before")
    await ctx.sleep(seconds)
    await ctx.step(stamp, "after")
    return trio.current_time()


async def _one(store: str, days: float) -> tuple[float, float]:
    async with td.open_engine(app, store=store, seed=0) as engine:
        t0 = trio.current_time()
        began = time.perf_counter()
        run = await engine.start(sleeper, days * 86_400.0)
        ended_at: float = await engine.result(run.id)
        waited = time.perf_counter() - began
    # The run ends at its due time, to the virtual second.
    assert ended_at == t0 + days * 86_400.0, (ended_at, t0)
    return ended_at, waited


def case(store: str, days: float) -> None:
    """Run one case in this process; print its real seconds: the whole
    (opening and closing the engine and the store too), and from the start
    to the result."""
    with tempfile.TemporaryDirectory() as folder:
        url = "memory://" if store == "memory" else f"sqlite:///{Path(folder) / 'runs.db'}"
        clock = trio.testing.MockClock(autojump_threshold=0)
        began = time.perf_counter()
        _, waited = trio.run(_one, url, days, clock=clock)
        took = time.perf_counter() - began
    print(took, waited)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_names_option(parser, "--stores", ("memory", "sqlite"))
    parser.add_argument("--days", default="0.1,1,3,30,365")
    parser.add_argument("--limit", type=float, default=60.0)
    parser.add_argument("--case", nargs=2, metavar=("STORE", "DAYS"), help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.case:
        case(args.case[0], float(args.case[1]))
        return
    use_args(args)
    for store in args.stores:
        print(f"{store}:")
        for text in args.days.split(","):
            days = float(text)
            label = f"{store}.sleep_{text}d"
            try:
                done = subprocess.run(
                    [sys.executable, __file__, "--case", store, text],
                    capture_output=True,
                    text=True,
                    check=True,
                    timeout=args.limit,
                )
            except subprocess.TimeoutExpired:
                print(f"  {label}: more than {args.limit:,.0f} s (stopped)", flush=True)
                continue
            except subprocess.CalledProcessError as exc:
                print(f"  {label}: failed\n{exc.stderr}", flush=True)
                continue
            took, waited = map(float, done.stdout.strip().splitlines()[-1].split())
            figure(BENCH, label, took * 1000.0, "ms", better="lower", days=days)
            figure(BENCH, f"{label}.wait", waited * 1000.0, "ms", better="lower", days=days)


if __name__ == "__main__":
    main()
