"""The PostgreSQL path and the child fan, of two checkouts side by side.

Measures, for a base checkout (``--base``, default: a worktree of main at
``/work/wt/pgpath-base``) and this one, alternating them ``--reps`` times in
one run so that both see the same load:

- ``postgres.concurrent``: one engine process, ``--concurrent`` (1,000)
  three-step workflows started at once on PostgreSQL (the median of
  ``--rounds`` rounds after a warm-up, as `bench_postgres` runs them);
- ``postgres.two_engines_ratio``: two engine processes on one database,
  each with its own connections, each starting half of them, over one;
- ``sqlite.fan_children``: a fan of ``--fan`` (1,000) child workflows
  joined by its parent on SQLite (``bench_engine``'s fan), in seconds, with
  the process's CPU seconds (steadier under load) and the transactions it
  committed.

Each measurement runs in a fresh process whose ``PYTHONPATH`` points at the
checkout's ``src``; the PostgreSQL ones in a fresh schema of the server at
``--url`` (default ``$POSTGRES_URL``), dropped after. Prints each figure of
both, the medians and the ratios (this checkout over the base); it never
passes or fails. Usage: ``python bench/bench_pg_path.py [--base PATH]
[--reps 3] [--concurrent 1000] [--fan 1000] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import trio
from _figures import add_json_option, figure, use_args

BENCH = "bench_pg_path"
HERE = Path(__file__).resolve().parent
DEFAULT_BASE = "/work/wt/pgpath-base"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/trio_durable"


# -- measurements, each in a process of its own --------------------------------------


def measure_postgres(args: argparse.Namespace) -> dict[str, Any]:
    """One and two engine processes on a fresh schema (`bench_postgres`'s
    fleets); the median workflows/s of each."""
    import bench_postgres
    import psycopg
    from psycopg import sql

    import trio_durable as td

    base = args.url
    schema = f"bench_{secrets.token_hex(4)}"
    url = f"{base}?schema={schema}&pool_size={args.pool_size}"
    fleet = argparse.Namespace(
        concurrent=args.concurrent,
        rounds=args.rounds,
        postmaster=bench_postgres.postmaster_pid(base),
    )

    async def migrate() -> None:
        async with td.open_store(url):
            pass

    try:
        trio.run(migrate)
        one = bench_postgres.run_fleet(fleet, url, 1)
        two = bench_postgres.run_fleet(fleet, url, 2)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return {"one": statistics.median(one), "two": statistics.median(two)}


def measure_fan(args: argparse.Namespace) -> dict[str, Any]:
    """A fan of child workflows joined by its parent on a fresh SQLite file
    (after a small warm-up fan)."""
    import bench_engine

    import trio_durable as td

    async def main() -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'fan.db'}"
            async with td.open_engine(bench_engine.app, store=url, seed=1) as engine:
                warm = await engine.start(bench_engine.fan, 50, run_id="warm")
                await engine.result(warm.id)
                stats = engine.store.statistics()
                transactions, ops = stats.transactions, stats.ops
                start, cpu = time.perf_counter(), time.process_time()
                run = await engine.start(bench_engine.fan, args.fan, run_id="fan")
                assert await engine.result(run.id) == args.fan * (args.fan - 1) // 2
                elapsed = time.perf_counter() - start
                return {
                    "seconds": elapsed,
                    # CPU of the process (its threads too): steadier than the
                    # wall time on a loaded machine.
                    "cpu": time.process_time() - cpu,
                    "transactions": stats.transactions - transactions,
                    "ops": stats.ops - ops,
                }

    return trio.run(main)


def _measure(checkout: Path, what: str, args: argparse.Namespace) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": f"{checkout / 'src'}:{HERE}"}
    argv = [
        sys.executable,
        __file__,
        "--measure",
        what,
        "--url",
        args.url,
        "--concurrent",
        str(args.concurrent),
        "--rounds",
        str(args.rounds),
        "--pool-size",
        str(args.pool_size),
        "--fan",
        str(args.fan),
    ]
    # A hung side fails the comparison instead of blocking it forever.
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{what} on {checkout} failed:\n{done.stdout}{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the side-by-side run ------------------------------------------------------------


def _report(
    case: str, unit: str, better: Literal["higher", "lower"], base: list[float], new: list[float]
) -> None:
    old, now = statistics.median(base), statistics.median(new)
    print(f"  {case}: main {[round(v, 2) for v in base]}, this {[round(v, 2) for v in new]}")
    higher = better == "higher"
    figure(BENCH, f"{case}.main", old, unit, better=better, label=f"{case} (main, median)")
    figure(BENCH, case, now, unit, better=better, label=f"{case} (this, median)")
    ratio = now / old if higher else old / now
    figure(BENCH, f"{case}.vs_main", ratio, "x", label=f"{case}: this over main (higher is better)")


def side_by_side(args: argparse.Namespace) -> None:
    base, this = Path(args.base), HERE.parent
    print(
        f"PostgreSQL path and child fan: main at {base} vs this checkout ({this}),"
        f" {args.reps} repetitions, {os.cpu_count()} CPUs"
    )
    found: dict[str, dict[str, list[float]]] = {}

    def add(variant: str, key: str, value: float) -> None:
        found.setdefault(key, {}).setdefault(variant, []).append(value)

    for rep in range(1, args.reps + 1):
        for variant, checkout in (("main", base), ("this", this)):
            if not args.skip_postgres:
                pg = _measure(checkout, "postgres", args)
                add(variant, "one", pg["one"])
                add(variant, "two", pg["two"])
                add(variant, "ratio", pg["two"] / pg["one"])
            fan = _measure(checkout, "fan", args)
            add(variant, "fan", fan["seconds"])
            add(variant, "fan_cpu", fan["cpu"])
            add(variant, "fan_transactions", fan["transactions"])
            print(
                f"  repetition {rep}, {variant}: {json.dumps(pg if not args.skip_postgres else {})} fan {fan}",
                flush=True,
            )
    if not args.skip_postgres:
        _report(
            "postgres.concurrent", "runs/s", "higher", found["one"]["main"], found["one"]["this"]
        )
        _report(
            "postgres.two_engines", "runs/s", "higher", found["two"]["main"], found["two"]["this"]
        )
        _report(
            "postgres.two_engines_ratio",
            "x",
            "higher",
            found["ratio"]["main"],
            found["ratio"]["this"],
        )
    _report("sqlite.fan_children", "s", "lower", found["fan"]["main"], found["fan"]["this"])
    _report(
        "sqlite.fan_children.cpu", "s", "lower", found["fan_cpu"]["main"], found["fan_cpu"]["this"]
    )
    _report(
        "sqlite.fan_children.transactions",
        "transactions",
        "lower",
        found["fan_transactions"]["main"],
        found["fan_transactions"]["this"],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=DEFAULT_BASE)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--url", default=os.environ.get("POSTGRES_URL") or DEFAULT_URL)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--fan", type=int, default=1000)
    parser.add_argument("--skip-postgres", action="store_true")
    parser.add_argument("--measure", choices=["postgres", "fan"], help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.measure == "postgres":
        print(json.dumps(measure_postgres(args)))
    elif args.measure == "fan":
        print(json.dumps(measure_fan(args)))
    else:
        use_args(args)
        side_by_side(args)
