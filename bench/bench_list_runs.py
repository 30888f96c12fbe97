"""`list_runs` on a store holding 1,000,000 ended runs: SQLite and PostgreSQL.

Fills each store with ``--runs`` (1,000,000) terminal runs, then times pages
of 100 through `trio_durable._front._queries.list_runs` (what `Engine.list_runs`
and a client call: the store's group commit, its thread, the decoding of
each run), ``--repeat`` (200) times each, and prints p50 and p99 in
milliseconds for:

- ``first``: the first page, no filter;
- ``deep``: pages from a cursor halfway down (500,000 runs in), no filter;
- ``status``: the first page of ``status="failed"`` (15% of runs);
- ``status_deep``: failed runs from the halfway cursor;
- ``statuses``: ``status=["cancelled", "dead"]`` (5%), merged per status;
- ``tag``: the first page of runs tagged ``vip`` (1%);
- ``tag_deep``: ``vip`` from the halfway cursor;
- ``workflow_ns``: ``workflow="w3", namespace="blue"``;
- ``facets``: the first page with ``facets=True`` (counts every run).

The fill writes rows directly, through the store's own schema (its tables,
indexes and tag triggers, made by opening the store first), in one
statement per table: SQLite with a recursive CTE, PostgreSQL with
``generate_series``, then ``ANALYZE`` (and ``VACUUM`` on PostgreSQL). It
takes about a minute per store. The SQLite file is in a temporary folder;
the PostgreSQL store lives in a fresh schema, dropped at the end.

Usage: ``python bench/bench_list_runs.py [--runs 1000000] [--repeat 200]
[--url postgresql://...] [--only sqlite|postgres]``; the URL defaults to
``$POSTGRES_URL``. Run it under the servers' lock (``flock
/tmp/td-servers.lock ...``) when others share the server. It prints
figures (cases ``<store>.list_runs_1m.<query>.p50``/``.p99``; with ``--json
PATH``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import trio
from _figures import add_json_option, figure, use_args
from psycopg import sql

from trio_durable._base._records import Run
from trio_durable._front._queries import encode_cursor, list_runs
from trio_durable._stores import open_store
from trio_durable._stores._base import Store

BENCH = "bench_list_runs"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/trio_durable"

# One shape of data for both stores: run i is created at i / 100 seconds,
# 80% completed, 15% failed, 4% cancelled, 1% dead; 1% tagged vip; ten
# workflows, two namespaces.
_STATUS = (
    "CASE WHEN i % 100 < 80 THEN 'completed' WHEN i % 100 < 95 THEN 'failed'"
    " WHEN i % 100 < 99 THEN 'cancelled' ELSE 'dead' END"
)
_TAGS = "CASE WHEN i % 100 = 7 THEN '[\"vip\",\"eu\"]' ELSE '[]' END"
_COLUMNS = (
    "id, workflow, version, namespace, status, tags, compensate, recoveries, created_at, updated_at"
)
_VALUES = (
    f"'run-' || i, 'w' || (i % 10), '1', CASE WHEN i % 2 = 0 THEN 'default' ELSE 'blue' END,"
    f" {_STATUS}, {_TAGS}, {{false}}, 0, 1700000000 + i / 100.0, 1700000000 + i / 100.0 + 1"
)


def fill_sqlite(path: Path, runs: int) -> None:
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("BEGIN")
        conn.execute(
            f"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {runs})"
            f" INSERT INTO runs ({_COLUMNS}) SELECT {_VALUES.format(false=0)} FROM n"
        )
        conn.execute("INSERT INTO run_inputs (run_id, input) SELECT id, '[]' FROM runs")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    conn.close()


def fill_postgres(base: str, schema: str, runs: int) -> None:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        conn.execute(
            f"INSERT INTO runs ({_COLUMNS}, input)"
            f" SELECT {_VALUES.format(false='false')}, '[]' FROM generate_series(1, {runs}) AS i"
        )
        conn.execute("VACUUM ANALYZE runs")
        conn.execute("VACUUM ANALYZE run_tags")


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


async def measure(store_name: str, store: Store, runs: int, repeat: int) -> None:
    middle = Run(id=f"run-{runs // 2}", workflow="w", created_at=1700000000 + runs / 200)
    halfway = encode_cursor(middle)
    cases: dict[str, Callable[[], Awaitable[Any]]] = {
        "first": lambda: list_runs(store),
        "deep": lambda: list_runs(store, cursor=halfway),
        "status": lambda: list_runs(store, status="failed"),
        "status_deep": lambda: list_runs(store, status="failed", cursor=halfway),
        "statuses": lambda: list_runs(store, status=["cancelled", "dead"]),
        "tag": lambda: list_runs(store, tags=["vip"]),
        "tag_deep": lambda: list_runs(store, tags=["vip"], cursor=halfway),
        "workflow_ns": lambda: list_runs(store, workflow="w3", namespace="blue"),
        "facets": lambda: list_runs(store, facets=True),
    }
    # Following cursors page after page stays as fast as the first page.
    page = await list_runs(store)
    for _ in range(50):
        assert page.next_cursor is not None
        page = await list_runs(store, cursor=page.next_cursor)
    for name, call in cases.items():
        page = await call()
        assert len(page.runs) == 100, (name, len(page.runs))
        samples = []
        for _ in range(repeat if name != "facets" else max(repeat // 10, 20)):
            start = time.perf_counter()
            await call()
            samples.append(time.perf_counter() - start)
        p50, p99 = _ms(samples)
        for q, value in (("p50", p50), ("p99", p99)):
            figure(
                BENCH,
                f"{store_name}.list_runs_1m.{name}.{q}",
                value,
                "ms",
                better="lower",
                label=f"{store_name:9} {name:12} {q} (n={len(samples)})",
                runs=runs,
                page=100,
            )


async def bench_sqlite(runs: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        url = f"sqlite:///{path}"
        async with open_store(url):
            pass
        start = time.perf_counter()
        await trio.to_thread.run_sync(fill_sqlite, path, runs)
        print(f"sqlite    filled {runs:,} runs in {time.perf_counter() - start:.1f} s")
        async with open_store(url) as store:
            await measure("sqlite", store, runs, repeat)


async def bench_postgres(url: str, runs: int, repeat: int) -> None:
    base = url.partition("?")[0]
    schema = f"bench_list_{secrets.token_hex(4)}"
    store_url = f"{base}?schema={schema}"
    try:
        async with open_store(store_url):
            pass
        start = time.perf_counter()
        await trio.to_thread.run_sync(fill_postgres, base, schema, runs)
        print(f"postgres  filled {runs:,} runs in {time.perf_counter() - start:.1f} s")
        async with open_store(store_url) as store:
            await measure("postgres", store, runs, repeat)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--url", default=os.environ.get("POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--only", choices=["sqlite", "postgres"])
    add_json_option(parser)
    args = parser.parse_args()
    if args.runs < 20_000:
        # Each case reads a full page of 100 from halfway down, of its
        # filter too (1% of runs are tagged vip).
        parser.error("--runs must be at least 20,000 (a full page of each case from halfway)")
    use_args(args)
    if args.only != "postgres":
        await bench_sqlite(args.runs, args.repeat)
    if args.only != "sqlite":
        await bench_postgres(args.url, args.runs, args.repeat)


if __name__ == "__main__":
    trio.run(main)
