"""Engine throughput on the PostgreSQL store.

Prints, for one engine process (this one) on a local PostgreSQL with durable
settings (``synchronous_commit = on``, ``fsync`` on), the memory broker and
local steps:

- three-step workflows per second with ``--concurrent`` (1,000) started at
  once, for each of ``--rounds`` rounds after a warm-up round;
- CPU per workflow in the engine (this process: `resource.getrusage`) and in
  the server (its postmaster and every child of it, live or reaped: utime +
  stime from ``/proc/<pid>/stat``; the server must run on this host), in
  milliseconds;
- store batches and transactions per workflow.

By default it measures, in one run, a fleet of one engine process and then
one of two engine processes sharing the store, each engine starting its
share of the ``--concurrent`` runs at the same moment (fleet figures: engine
CPU summed over the processes), and prints the ratio of their medians;
``--engines N`` measures only a fleet of N.

Then, with a broker (``--broker``, default ``$AMQP_URL``; RabbitMQ in CI),
the latency of one remote step from dispatch to settle: ``--latency`` (300)
one-remote-step workflows one after another on an engine with an embedded
worker, p50 and p99 of the checkpoint's settle time minus its dispatch time.

The store lives in a fresh schema of the server, dropped at the end. Usage:
``python bench/bench_postgres.py [--url postgresql://...] [--concurrent 1000]
[--rounds 3] [--pool-size 4] [--engines 1]``; the URL defaults to
``$POSTGRES_URL``, else a server on 127.0.0.1:5432 (``python tests/servers
start postgres`` starts one).

Cases: ``postgres.concurrent`` (one engine; each round a figure),
``postgres.two_engines``, ``postgres.two_engines_ratio`` (of the medians),
``postgres.remote_latency_p50``/``_p99``. It prints figures (with ``--json
PATH``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import trio
from _figures import add_json_option, figure, use_args
from psycopg import sql

import trio_durable as td

BENCH = "bench_postgres"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/trio_durable"

app = td.App("bench-postgres")


@app.step()
async def one(x: int) -> int:
    return x + 1


@app.step()
async def two(x: int) -> int:
    return x * 2


@app.step()
async def three(x: int) -> int:
    return x - 3


@app.step(group="bench")
async def echo(x: int) -> int:
    return x


@app.workflow()
async def one_remote(ctx: td.Context, x: int) -> int:
    return await ctx.step(echo, x)


@app.workflow()
async def three_steps(ctx: td.Context, x: int) -> int:
    a = await ctx.step(one, x)
    b = await ctx.step(two, a)
    return await ctx.step(three, b)


def engine_cpu() -> float:
    """CPU seconds this process has used (user and system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None if
    the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces; field 3 (the
    # state) is the first after it.
    return stat[stat.rindex(")") + 2 :].split()


def postmaster_pid(url: str) -> int:
    """The pid of the server at ``url`` (it must run on this host)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SHOW data_directory").fetchone()
    assert row is not None
    return int((Path(row[0]) / "postmaster.pid").read_text().split()[0])


def server_cpu(postmaster: int) -> float:
    """CPU seconds used by the server: its postmaster, the children it has
    reaped (exited backends) and its live children (backends, WAL writer,
    checkpointer, ...)."""
    ticks = os.sysconf("SC_CLK_TCK")
    fields = _stat(postmaster)
    assert fields is not None, "the server is gone"
    # utime, stime, cutime, cstime are fields 14 to 17 (11 to 14 here).
    total = sum(int(value) for value in fields[11:15])
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            child = _stat(int(entry.name))
            # ppid is field 4 (1 here).
            if child is not None and int(child[1]) == postmaster:
                total += int(child[11]) + int(child[12])
    return total / ticks


def _with_option(url: str, option: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{option}"


def _drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def run_round(engine: td.Engine, prefix: str, concurrent: int) -> float:
    """Start ``concurrent`` runs at once, wait for all; return the seconds."""

    async def one_run(i: int) -> None:
        run = await engine.start(three_steps, i, run_id=f"{prefix}-{i}")
        assert await engine.result(run.id) == (i + 1) * 2 - 3

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(concurrent):
            nursery.start_soon(one_run, i)
    return time.perf_counter() - start


def fleet_case(engines: int) -> str:
    """The case of a fleet's throughput: ``postgres.concurrent`` for one
    engine, ``postgres.two_engines`` for two, ``postgres.engines_<N>``."""
    return {1: "postgres.concurrent", 2: "postgres.two_engines"}.get(
        engines, f"postgres.engines_{engines}"
    )


def report_round(
    case: str, round_number: int, n: int, elapsed: float, engine_used: float, server_used: float
) -> None:
    """One round's figures: workflows/s, and CPU per workflow in the
    engine(s) and in the server."""
    figure(
        BENCH,
        case,
        n / elapsed,
        "workflows/s",
        label=f"round {round_number}: {n} three-step workflows at once in {elapsed:.2f} s",
    )
    figure(
        BENCH,
        f"{case}.engine_cpu",
        1000 * engine_used / n,
        "ms/workflow",
        better="lower",
        label="  CPU per workflow, engine",
    )
    if server_used >= 0:
        figure(
            BENCH,
            f"{case}.server_cpu",
            1000 * server_used / n,
            "ms/workflow",
            better="lower",
            label="  CPU per workflow, server",
        )
    else:
        # A backend counted before the round exited and was not reaped yet:
        # its time is in neither place.
        print("    CPU per workflow, server: n/a (a backend exited mid-round)")


async def engine_process(args: argparse.Namespace) -> None:
    """One engine of a fleet: warm up, say ``ready``, then for each ``go``
    line run a round and answer ``done <seconds> <cpu seconds>``."""
    engine_id = f"engine-{args.index}"
    async with td.open_engine(
        app, store=args.url, broker="memory://", engine_id=engine_id
    ) as engine:
        await run_round(engine, f"warm-{args.index}", min(args.concurrent, 200))
        print("ready", flush=True)
        for round_number in range(1, args.rounds + 1):
            await trio.to_thread.run_sync(sys.stdin.readline)
            before = engine_cpu()
            elapsed = await run_round(engine, f"r{round_number}-{args.index}", args.concurrent)
            print(f"done {elapsed} {engine_cpu() - before}", flush=True)


def run_fleet(args: argparse.Namespace, url: str, engines: int) -> list[float]:
    """Start ``engines`` engine processes on ``url`` and time them together;
    return the workflows per second of each round."""
    share = args.concurrent // engines
    rates: list[float] = []
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--engine-process",
                "--url",
                url,
                "--index",
                str(index),
                "--concurrent",
                str(share),
                "--rounds",
                str(args.rounds),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for index in range(engines)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        for round_number in range(1, args.rounds + 1):
            server_before = server_cpu(args.postmaster)
            start = time.perf_counter()
            for child in children:
                assert child.stdin is not None
                child.stdin.write("go\n")
                child.stdin.flush()
            engine_used = 0.0
            for child in children:
                assert child.stdout is not None
                _, _, cpu = child.stdout.readline().split()
                engine_used += float(cpu)
            elapsed = time.perf_counter() - start
            n = share * engines
            rates.append(n / elapsed)
            report_round(
                fleet_case(engines),
                round_number,
                n,
                elapsed,
                engine_used,
                server_cpu(args.postmaster) - server_before,
            )
    finally:
        for child in children:
            if child.stdin is not None:
                child.stdin.close()
            child.wait(timeout=60)
    return rates


async def remote_latency(url: str, broker: str, count: int) -> None:
    """One remote step at a time: p50/p99 of dispatch to settle."""
    async with td.open_engine(app, store=url, broker=broker, serve=["bench"]) as engine:
        latencies: list[float] = []
        for i in range(count + 20):
            run = await engine.start(one_remote, i, run_id=f"latency-{i}")
            assert await engine.result(run.id) == i
            [cp] = await engine.store.get_checkpoints(run.id, 1, 1)
            assert cp.started_at is not None
            assert cp.finished_at is not None
            if i >= 20:  # the first ones warm up connections and queues
                latencies.append(cp.finished_at - cp.started_at)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    what = f"one remote step, dispatch to settle, over {broker.split('@')[-1]}"
    for name, value in (("p50", p50), ("p99", p99)):
        figure(
            BENCH,
            f"postgres.remote_latency_{name}",
            1000 * value,
            "ms",
            better="lower",
            label=f"{what} ({count} one after another), {name}",
        )


async def main(args: argparse.Namespace) -> None:
    if args.engine_process:
        await engine_process(args)
        return
    base = args.url or os.environ.get("POSTGRES_URL") or DEFAULT_URL
    args.postmaster = await trio.to_thread.run_sync(postmaster_pid, base)
    schema = f"bench_{secrets.token_hex(4)}"
    url = _with_option(_with_option(base, f"schema={schema}"), f"pool_size={args.pool_size}")
    print(
        f"trio-durable PostgreSQL benchmark, Python {sys.version.split()[0]},"
        f" trio {trio.__version__}, psycopg {psycopg.__version__}, {os.cpu_count()} CPUs"
    )
    fleets = "1 and 2" if args.engines is None else str(args.engines)
    print(f"  {fleets} engine process(es) on {base} (schema {schema}, pool_size={args.pool_size})")
    try:
        # Migrate once here, so the engines' first trips do not queue on it.
        async with td.open_store(url):
            pass
        if args.engines is not None and args.engines > 1:
            await trio.to_thread.run_sync(run_fleet, args, url, args.engines)
            return
        if args.engines is None:
            medians: list[float] = []
            for engines in (1, 2):
                print(f"  {engines} engine process(es):")
                rates = await trio.to_thread.run_sync(run_fleet, args, url, engines)
                medians.append(sorted(rates)[len(rates) // 2])
            figure(
                BENCH,
                "postgres.two_engines_ratio",
                medians[1] / medians[0],
                "x",
                label=f"median workflows/s, 2 engines ({medians[1]:.0f}) / 1 engine ({medians[0]:.0f})",
            )
            broker = args.broker or os.environ.get("AMQP_URL")
            if not args.latency:
                print("  (--latency 0: remote-step latency not measured)")
            elif broker:
                await remote_latency(url, broker, args.latency)
            else:
                print("  (no --broker and no $AMQP_URL: remote-step latency not measured)")
            return
        async with td.open_engine(app, store=url, broker="memory://") as engine:
            await run_round(engine, "warm", min(args.concurrent, 200))
            for round_number in range(1, args.rounds + 1):
                stats = engine.store.statistics()
                batches, transactions = stats.batches, stats.transactions
                engine_before, server_before = engine_cpu(), server_cpu(args.postmaster)
                elapsed = await run_round(engine, f"r{round_number}", args.concurrent)
                engine_used = engine_cpu() - engine_before
                server_used = server_cpu(args.postmaster) - server_before
                n = args.concurrent
                report_round(
                    "postgres.concurrent", round_number, n, elapsed, engine_used, server_used
                )
                figure(
                    BENCH,
                    "postgres.concurrent.batches_per_workflow",
                    (stats.batches - batches) / n,
                    "per workflow",
                    better="lower",
                    label="  store batches per workflow",
                )
                figure(
                    BENCH,
                    "postgres.concurrent.transactions_per_workflow",
                    (stats.transactions - transactions) / n,
                    "per workflow",
                    better="lower",
                    label="  transactions per workflow",
                )
    finally:
        await trio.to_thread.run_sync(_drop_schema, base, schema)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--engines", type=int, default=None)
    parser.add_argument("--broker", default=None)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--engine-process", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    trio.run(main, args)
