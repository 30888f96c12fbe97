"""``trio-durable replay`` over a folder of exported histories.

Runs ``--runs`` (1,000) runs of a workflow of ``--steps`` (20) local steps
to their end on a SQLite store, exports their histories with
``trio-durable runs export --workflow twenty --out DIR`` (one file each),
then times ``trio-durable replay bench_replay:app DIR``, the command CI
runs, as a process of its own (its start, the app's import and reading
every file included), ``--repeat`` (3) times, and prints the best and the
median in seconds, and the histories replayed per second. It checks that
every history replays cleanly (exit status 0).

Usage: ``python bench/bench_replay.py [--runs 1000] [--steps 20]
[--repeat 3]``. It prints figures (cases ``sqlite.replay.<runs>x<steps>``;
with ``--json PATH``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td

BENCH = "bench_replay"
STEPS = int(os.environ.get("BENCH_REPLAY_STEPS", "20"))
"""The workflow's steps (the command imports this module: the environment
carries ``--steps`` to it)."""

app = td.App("bench-replay")


@app.step()
async def add(total: int, n: int) -> int:
    return total + n


@app.workflow(name="twenty")
async def twenty(ctx: td.Context, start: int) -> int:
    total = start
    for n in range(STEPS):
        total = await ctx.step(add, total, n)
    return total


async def fill(url: str, runs: int) -> None:
    """``runs`` runs of ``twenty``, each to its end."""
    async with td.open_engine(app, store=url) as engine:
        for i in range(runs):
            await engine.start(twenty, i, run_id=f"run-{i:05d}")
        await engine.drain()
        page = await engine.list_runs(workflow="twenty", status="completed", limit=1, facets=True)
        assert page.facets is not None
        assert page.facets.get("completed") == runs, page.facets


def command(*args: str, env: dict[str, str]) -> float:
    """Run ``trio-durable ARGS`` (exit status 0 expected); its seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "trio_durable", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(
            f"trio-durable {args[0]} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    global STEPS
    STEPS = args.steps
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'runs.db'}"
        start = time.perf_counter()
        trio.run(fill, url, args.runs)
        print(
            f"ran {args.runs:,} runs of {args.steps} steps in {time.perf_counter() - start:.1f} s"
        )
        env = {
            **os.environ,
            "TRIO_DURABLE_STORE": url,
            "PYTHONPATH": os.pathsep.join(
                [str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]
            ),
            "BENCH_REPLAY_STEPS": str(args.steps),
        }
        out = Path(folder) / "histories"
        took = command("runs", "export", "--workflow", "twenty", "--out", str(out), env=env)
        files = len(list(out.glob("*.json")))
        assert files == args.runs, files
        print(f"exported {files:,} histories in {took:.1f} s")
        samples = [
            command("replay", "bench_replay:app", str(out), env=env) for _ in range(args.repeat)
        ]
    case = f"sqlite.replay.{args.runs}x{args.steps}"
    best, median = min(samples), statistics.median(samples)
    figure(BENCH, f"{case}.best", best, "s", better="lower", label=f"replay {case} best")
    figure(BENCH, f"{case}.median", median, "s", better="lower", label=f"replay {case} median")
    figure(
        BENCH,
        f"{case}.rate",
        args.runs / best,
        "histories/s",
        label=f"replay {case} histories per second",
    )


if __name__ == "__main__":
    main()
