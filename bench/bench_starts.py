"""Start paths on SQLite: three-local-step workflows, started three ways.

Cases (each on a new SQLite file, ``synchronous=FULL``):

- ``sqlite.sequential``: start one run, wait for its result, then the next;
- ``sqlite.one_by_one``: start 2,000 runs one after another (each
  ``await engine.start(...)`` in a loop), then wait for all of them (DBOS's
  benchmark shape);
- ``sqlite.concurrent``: 1,000 runs at once, each started and awaited in a
  task of its own (as bench_engine does);
- ``sqlite.start_many`` (only where `Engine.start_many` exists): the same
  1,000 started by one `Engine.start_many`, then awaited.

The cases can run on other source trees beside this one's (``--tree
LABEL=PATH``, e.g. ``--tree main=/work/wt/starts-base``): each repetition
runs every tree's case in a fresh process, one tree after the other, so
that the trees share the machine's noise, and the figures are the medians
over ``--repeat`` repetitions, with their ratio to the first tree. Store
operations and transactions per run come with each figure.

It prints figures and never passes or fails. Usage:
``python bench/bench_starts.py [--tree LABEL=PATH ...] [--repeat N]
[--sequential N] [--one-by-one N] [--concurrent N] [--profile CASE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _figures import add_json_option, add_names_option, figure, use_args  # noqa: E402

BENCH = "bench_starts"
CASES = ("sequential", "one_by_one", "concurrent", "start_many")


def _workload(case: str, n: int, path: str) -> dict[str, Any]:
    """Run one case in this process (its trio_durable is whichever
    ``sys.path`` finds first) and return its figures."""
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

    def expected(i: int) -> int:
        return (i + 1) * 2 - 3

    async def main() -> dict[str, Any]:
        async with td.open_engine(app, store=f"sqlite:///{path}", seed=1) as engine:
            stats = engine.store.statistics()
            # The schema and the engine's own first writes are not the case's.
            await engine.drain()
            ops, transactions = stats.ops, stats.transactions
            start = time.perf_counter()
            if case == "sequential":
                for i in range(n):
                    run = await engine.start(three_steps, i)
                    assert await engine.result(run.id) == expected(i)
            elif case == "one_by_one":
                handles = [await engine.start(three_steps, i) for i in range(n)]
                for i, handle in enumerate(handles):
                    assert await handle.result() == expected(i)
            elif case == "concurrent":

                async def one_run(i: int) -> None:
                    run = await engine.start(three_steps, i)
                    assert await engine.result(run.id) == expected(i)

                async with trio.open_nursery() as nursery:
                    for i in range(n):
                        nursery.start_soon(one_run, i)
            elif case == "start_many":
                handles = await engine.start_many(three_steps, [(i,) for i in range(n)])
                for i, handle in enumerate(handles):
                    assert await handle.result() == expected(i)
            else:
                raise SystemExit(f"unknown case {case!r}")
            elapsed = time.perf_counter() - start
            return {
                "runs_per_s": n / elapsed,
                "ops_per_run": (stats.ops - ops) / n,
                "transactions_per_run": (stats.transactions - transactions) / n,
            }

    return trio.run(main)


def _worker(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            result = profiler.runcall(_workload, args.case, args.n, path)
            out = pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative")
            out.print_stats(60)
            out.sort_stats("tottime").print_stats(40)
        else:
            result = _workload(args.case, args.n, path)
    print(json.dumps(result))


def _run_case(tree: Path, case: str, n: int) -> dict[str, Any] | None:
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    env.pop("TRIO_DURABLE_BENCH_JSON", None)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import trio_durable as td; print(hasattr(td.Engine, 'start_many'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    if case == "start_many" and probe.stdout.strip() != "True":
        return None
    done = subprocess.run(
        [sys.executable, __file__, "--worker", case, "--n", str(n)],
        env=env,
        capture_output=True,
        text=True,
        # A hung case fails the bench instead of blocking it forever.
        timeout=3600,
    )
    if done.returncode != 0:
        print(done.stderr, file=sys.stderr)
        raise SystemExit(f"case {case} failed on {tree}")
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="another source tree to measure beside this one (first: the baseline)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sequential", type=int, default=1000)
    parser.add_argument("--one-by-one", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=1000)
    add_names_option(parser, "--cases", CASES)
    parser.add_argument("--worker", metavar="CASE", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile", action="store_true", help="with --worker: print a cProfile of the case"
    )
    add_json_option(parser)
    args = parser.parse_args()
    if args.worker:
        args.case = args.worker
        _worker(args)
        return
    use_args(args)
    trees = [tuple(spec.split("=", 1)) for spec in args.tree]
    trees.append(("this", str(HERE.parent)))
    sizes = {
        "sequential": args.sequential,
        "one_by_one": args.one_by_one,
        "concurrent": args.concurrent,
        "start_many": args.concurrent,
    }
    print(f"trio-durable start paths on SQLite, {args.repeat} repetitions, medians")
    for case in args.cases:
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in trees}
        for _ in range(args.repeat):
            for label, tree in trees:
                result = _run_case(Path(tree), case, sizes[case])
                if result is not None:
                    results[label].append(result)
        print(f"\nsqlite.{case} ({sizes[case]} runs)")
        baseline: float | None = None
        for label, _ in trees:
            if not results[label]:
                print(f"  {label}: (not available)")
                continue
            rate = statistics.median(r["runs_per_s"] for r in results[label])
            ops = statistics.median(r["ops_per_run"] for r in results[label])
            transactions = statistics.median(r["transactions_per_run"] for r in results[label])
            if baseline is None:
                baseline = rate
            figure(
                BENCH,
                f"sqlite.{case}",
                rate,
                "runs/s",
                label=f"{label}: runs/s ({rate / baseline:.2f}x the first;"
                f" {ops:.2f} ops, {transactions:.3f} transactions per run)",
                tree=label,
                ops_per_run=ops,
                transactions_per_run=transactions,
                repeat=args.repeat,
            )


if __name__ == "__main__":
    main()
