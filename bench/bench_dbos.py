"""DBOS Transact beside trio-durable: the same workflow shapes on DBOS 3.4.

DBOS is not a dependency of trio-durable. Install it into a venv of your
own to run this bench: ``pip install dbos==3.4.0`` (without it the bench
prints why and exits 0, writing no figure). The shapes are bench_engine's
and bench_postgres's: a workflow of three steps (x + 1, x * 2, x - 3), and

- ``dbos.sqlite.sequential``: ``--sequential`` (500) runs one after another,
  each awaited before the next starts;
- ``dbos.sqlite.one_by_one``: ``--one-by-one`` (2,000) started one by one
  with ``DBOS.start_workflow``, then every result awaited (DBOS's own
  benchmark shape);
- ``dbos.sqlite.concurrent``: ``--concurrent`` (1,000) started at once
  (asyncio workflows, ``start_workflow_async`` under one ``gather``);
- ``dbos.sqlite.fan_children``: a workflow starting ``--fan`` (1,000) child
  workflows, then joining them (wall time, lower is better);
- ``dbos.postgres.concurrent``: ``--concurrent`` started at once on
  PostgreSQL (``--postgres-url``, default ``$POSTGRES_URL``; a fresh schema,
  dropped at the end; skipped with ``--stores sqlite``).

The SQLite file is in a temporary folder. Usage: ``python bench/bench_dbos.py
[--stores sqlite,postgres] [--sequential 500] [--one-by-one 2000]
[--concurrent 1000] [--fan 1000] [--json PATH]``. It prints figures (with
``--json``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import importlib.metadata
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _figures import add_json_option, add_names_option, figure, use_args

BENCH = "bench_dbos"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/trio_durable"
VERSION = "3.4.0"

dbos: Any = None
"""The dbos module, once imported (it is optional: see the docstring)."""


def _one(x: int) -> int:
    return x + 1


def _two(x: int) -> int:
    return x * 2


def _three(x: int) -> int:
    return x - 3


async def _aone(x: int) -> int:
    return x + 1


async def _atwo(x: int) -> int:
    return x * 2


async def _athree(x: int) -> int:
    return x - 3


async def _athree_steps(x: int) -> int:
    return int(await athree(await atwo(await aone(x))))


def _member(x: int) -> int:
    return x


def _fan(n: int) -> int:
    handles = [dbos.DBOS.start_workflow(member, i) for i in range(n)]
    return sum(int(h.get_result()) for h in handles)


one: Any
two: Any
three: Any
three_steps: Any
aone: Any
atwo: Any
athree: Any
athree_steps: Any
member: Any
fan: Any


def register() -> None:
    """Import dbos and register the steps and workflows with it."""
    global dbos, one, two, three, three_steps, aone, atwo, athree, athree_steps, member, fan
    dbos = importlib.import_module("dbos")
    step, workflow = dbos.DBOS.step, dbos.DBOS.workflow
    one, two, three = step()(_one), step()(_two), step()(_three)

    def body(x: int) -> int:
        return int(three(two(one(x))))

    three_steps = workflow(name="three_steps")(body)
    aone, atwo, athree = step()(_aone), step()(_atwo), step()(_athree)
    athree_steps = workflow(name="athree_steps")(_athree_steps)
    member = workflow(name="member")(_member)
    fan = workflow(name="fan")(_fan)


def launch(url: str, schema: str | None = None) -> None:
    config: dict[str, Any] = {
        "name": "bench-dbos",
        "system_database_url": url,
        "log_level": "WARNING",
    }
    if schema is not None:
        config["dbos_system_schema"] = schema
    dbos.DBOS(config=config)
    dbos.DBOS.launch()


def timed(case: str, n: int, label: str, call: Any) -> None:
    cpu = time.process_time()
    start = time.perf_counter()
    call()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu
    figure(BENCH, case, n / elapsed, "workflows/s", label=f"{label} ({elapsed:.2f} s)")
    # Every thread of this process (DBOS runs workflows on threads): less
    # sensitive than throughput to other processes sharing the machine.
    figure(BENCH, f"{case}.cpu", 1000 * cpu / n, "ms/workflow", better="lower", label="  CPU")


async def _at_once(n: int, prefix: str) -> None:
    async def run(i: int) -> None:
        with dbos.SetWorkflowID(f"{prefix}-{i}"):
            handle = await dbos.DBOS.start_workflow_async(athree_steps, i)
        assert await handle.get_result() == (i + 1) * 2 - 3

    await asyncio.gather(*(run(i) for i in range(n)))


def bench_sqlite(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as folder:
        launch(f"sqlite:///{Path(folder) / 'dbos.sqlite'}")
        try:
            print("\nDBOS on SQLite")

            def sequential() -> None:
                for i in range(args.sequential):
                    assert three_steps(i) == (i + 1) * 2 - 3

            timed(
                "dbos.sqlite.sequential",
                args.sequential,
                f"one after another ({args.sequential})",
                sequential,
            )

            def one_by_one() -> None:
                handles = [dbos.DBOS.start_workflow(three_steps, i) for i in range(args.one_by_one)]
                for i, handle in enumerate(handles):
                    assert handle.get_result() == (i + 1) * 2 - 3

            timed(
                "dbos.sqlite.one_by_one",
                args.one_by_one,
                f"{args.one_by_one} started one by one, then awaited",
                one_by_one,
            )
            timed(
                "dbos.sqlite.concurrent",
                args.concurrent,
                f"{args.concurrent} at once",
                lambda: asyncio.run(_at_once(args.concurrent, "sqlite")),
            )
            cpu = time.process_time()
            start = time.perf_counter()
            assert fan(args.fan) == args.fan * (args.fan - 1) // 2
            figure(
                BENCH,
                "dbos.sqlite.fan_children",
                time.perf_counter() - start,
                "s",
                better="lower",
                label=f"fan of {args.fan} children joined",
                children=args.fan,
            )
            figure(
                BENCH,
                "dbos.sqlite.fan_children.cpu",
                1000 * (time.process_time() - cpu),
                "ms",
                better="lower",
                label="  CPU (the whole fan)",
            )
        finally:
            dbos.DBOS.destroy()


def bench_postgres(args: argparse.Namespace) -> None:
    import psycopg
    from psycopg import sql

    schema = f"dbos_bench_{secrets.token_hex(4)}"
    launch(args.postgres_url, schema)
    try:
        print(f"\nDBOS on PostgreSQL ({args.postgres_url}, schema {schema})")
        timed(
            "dbos.postgres.concurrent",
            args.concurrent,
            f"{args.concurrent} at once",
            lambda: asyncio.run(_at_once(args.concurrent, "postgres")),
        )
    finally:
        dbos.DBOS.destroy()
        with psycopg.connect(args.postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_names_option(parser, "--stores", ("sqlite", "postgres"))
    parser.add_argument("--sequential", type=int, default=500)
    parser.add_argument("--one-by-one", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--fan", type=int, default=1000)
    parser.add_argument(
        "--postgres-url", default=os.environ.get("POSTGRES_URL", DEFAULT_URL).partition("?")[0]
    )
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    try:
        version = importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        print(
            f"skipped: DBOS is not installed here (pip install dbos=={VERSION} into a venv of your own)"
        )
        return
    if version != VERSION:
        print(f"note: DBOS {version} installed; the figures of record are DBOS {VERSION}")
    register()
    print(f"DBOS {version} benchmark, Python {sys.version.split()[0]}")
    stores = args.stores
    if "sqlite" in stores:
        bench_sqlite(args)
    if "postgres" in stores:
        bench_postgres(args)


if __name__ == "__main__":
    main()
