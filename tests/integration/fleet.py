"""A fleet of engine and worker processes for the crash tests.

``python tests/integration/fleet.py engine|worker --store URL --broker URL
--ledger PATH --id NAME --namespace NS [--runs N] [--fan N]`` runs one process of the
fleet until it is killed: an engine starts every run of the workload (each
start is idempotent by run id, so engines that start the same runs create
each once) and then executes whatever it leases; a worker serves the remote
steps.

Every step records its effect in the ledger, a SQLite file shared by the
processes (a row per execution), so the test can check that each effect
ran at least once whatever was killed when. `expected_outputs` is what each
run must end with.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from pathlib import Path
from typing import Final

import trio

import trio_durable as td

GROUP: Final = "crash"
LEASE_TTL: Final = 4.0
LEDGER_SCHEMA: Final = "CREATE TABLE IF NOT EXISTS ledger (effect TEXT NOT NULL, pid INTEGER)"

app = td.App("crash-fleet")

_ledger_path: list[str] = []


def _record(effect: str) -> None:
    connection = sqlite3.connect(_ledger_path[0], timeout=30.0, isolation_level=None)
    try:
        connection.execute("INSERT INTO ledger VALUES (?, ?)", (effect, os.getpid()))
    finally:
        connection.close()


async def record(effect: str) -> None:
    """Append one execution of ``effect`` to the ledger (durably: the step
    returns only after the row is committed)."""
    await trio.to_thread.run_sync(_record, effect)


def open_ledger(path: Path) -> None:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(LEDGER_SCHEMA)
    finally:
        connection.close()


def ledger_counts(path: Path) -> dict[str, int]:
    """How many times each effect ran."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute("SELECT effect, COUNT(*) FROM ledger GROUP BY effect").fetchall()
    finally:
        connection.close()
    return {effect: count for effect, count in rows}


def ledger_rows(path: Path, like: str) -> list[tuple[str, int]]:
    """The executions of the effects matching ``like``: ``(effect, pid)``."""
    connection = sqlite3.connect(path)
    try:
        rows = connection.execute(
            "SELECT effect, pid FROM ledger WHERE effect LIKE ? ORDER BY rowid", (like,)
        ).fetchall()
    finally:
        connection.close()
    return [(effect, pid) for effect, pid in rows]


# -- the workload ---------------------------------------------------------------


@app.step()
async def prepare(key: str, x: int) -> int:
    await record(f"{key}:prepare")
    return x + 1


@app.step(group=GROUP, retry=td.Retry(attempts=5, backoff=0.5, max_backoff=2.0))
async def compute(key: str, x: int) -> int:
    # Long enough that kills land while tasks are in flight.
    await trio.sleep(0.02)
    await record(f"{key}:compute")
    return x * x


@app.step()
async def finish(key: str, x: int) -> int:
    await record(f"{key}:finish")
    return x + 1000


@app.workflow()
async def three_steps(ctx: td.Context, key: str, x: int) -> int:
    a = await ctx.step(prepare, key, x)
    b = await ctx.step(compute, key, a)
    return await ctx.step(finish, key, b)


@app.workflow()
async def timed(ctx: td.Context, key: str, x: int) -> int:
    a = await ctx.step(prepare, key, x)
    # Spread over the first seconds, while the kills happen.
    await ctx.sleep(1.0 + (x % 7))
    return await ctx.step(compute, key, a)


@app.workflow()
async def parent(ctx: td.Context, key: str, x: int) -> int:
    child = await ctx.child(three_steps, f"{key}.kid", x)
    return await ctx.step(finish, key, child)


@app.step(group=GROUP)
async def fan_member(member: str) -> int:
    # One argument per input: "<key>:<index>".
    await trio.sleep(0.01)
    await record(member)
    return int(member.rsplit(":", 1)[1]) * 2


@app.workflow()
async def fan(ctx: td.Context, key: str, size: int) -> int:
    values = await ctx.all(fan_member, [f"{key}:{i}" for i in range(size)])
    return sum(values)


def workload(
    runs: int, fan_size: int
) -> list[tuple[str, td.Workflow[..., int], tuple[object, ...]]]:
    """The runs to start: ``(run_id, workflow, args)``; one fan and a mix of
    the others, ``runs`` in all."""
    jobs: list[tuple[str, td.Workflow[..., int], tuple[object, ...]]] = [
        ("fan", fan, ("fan", fan_size))
    ]
    for i in range(runs - 1):
        kind = (three_steps, timed, parent)[i % 3]
        key = f"r{i}"
        jobs.append((key, kind, (key, i)))
    return jobs


def expected_outputs(runs: int, fan_size: int) -> dict[str, int]:
    out: dict[str, int] = {"fan": sum(2 * i for i in range(fan_size))}
    for i in range(runs - 1):
        key = f"r{i}"
        if i % 3 == 0:
            out[key] = (i + 1) ** 2 + 1000
        elif i % 3 == 1:
            out[key] = (i + 1) ** 2
        else:
            out[key] = (i + 1) ** 2 + 1000 + 1000
    return out


def expected_effects(runs: int, fan_size: int) -> set[str]:
    effects = {f"fan:{i}" for i in range(fan_size)}
    for i in range(runs - 1):
        key = f"r{i}"
        if i % 3 == 0:
            effects |= {f"{key}:prepare", f"{key}:compute", f"{key}:finish"}
        elif i % 3 == 1:
            effects |= {f"{key}:prepare", f"{key}:compute"}
        else:
            kid = f"{key}.kid"
            effects |= {f"{kid}:prepare", f"{kid}:compute", f"{kid}:finish", f"{key}:finish"}
    return effects


# -- the processes --------------------------------------------------------------


async def run_engine(args: argparse.Namespace) -> None:
    async with td.open_engine(
        app,
        store=args.store,
        broker=args.broker,
        engine_id=args.id,
        lease_ttl=LEASE_TTL,
        reconcile_interval=3.0,
        result_poll_interval=0.5,
        max_recoveries=50,
        remote_redispatch=(15.0, 20),
    ) as engine:
        for run_id, workflow, run_args in workload(args.runs, args.fan):
            await engine.start(workflow, *run_args, run_id=run_id, namespace=args.namespace)
        print("started", flush=True)
        await trio.sleep_forever()


async def run_worker(args: argparse.Namespace) -> None:
    async with td.open_worker(
        app,
        broker=args.broker,
        groups=[f"{GROUP}@{args.namespace}"],
        concurrency=32,
        instance_id=args.id,
    ):
        print("serving", flush=True)
        await trio.sleep_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["engine", "worker"])
    parser.add_argument("--store", required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--id", required=True)
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--fan", type=int, default=200)
    parser.add_argument("--namespace", required=True, help="isolates this fleet's task queues")
    args = parser.parse_args()
    _ledger_path.append(args.ledger)
    trio.run(run_engine if args.role == "engine" else run_worker, args)


if __name__ == "__main__":
    main()
