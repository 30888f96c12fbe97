"""Rows read by `run_detail` and `fan_page` for a run with a fan of 100,000.

Writes one run into each store: a local step at seq 1, a fan of
``--fan`` (100,000) remote steps at seqs 2 and on (every 7th failed, after
two attempts), a timer after it, and a child fan of 3. Then reads it as
`Engine.run_detail` and `Engine.fan_page` do (`trio_durable._front._queries`) and
prints, per call, the run and checkpoint rows the store returned (its
`StoreStatistics`) and the time taken; `history`, which lists every
checkpoint, is shown for contrast.

The run is written through the store's `apply` in batches of 5,000 puts.
Stores: memory, SQLite (a temporary file) and, unless ``--no-postgres``,
PostgreSQL (a fresh schema of ``--url``, default ``$POSTGRES_URL``, dropped
at the end; run it under ``flock /tmp/td-servers.lock`` when others share
the server). It prints figures (cases ``<store>.run_detail_fan.<call>.*``; with ``--json
PATH``, also as JSON lines) and never passes or fails.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import trio
from _figures import add_json_option, figure, use_args
from psycopg import sql

from trio_durable._base._records import Checkpoint, ErrorInfo, Run
from trio_durable._front._queries import fan_page, history, run_detail
from trio_durable._stores import open_store
from trio_durable._stores._base import Store
from trio_durable._stores._ops import PutCheckpoint

BENCH = "bench_run_detail"
DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/trio_durable"
BOOM = ErrorInfo(message="boom", code="refused")


def _member(seq: int, fan: int, index: int, width: int) -> Checkpoint:
    failed = index % 7 == 3
    return Checkpoint(
        run_id="big",
        seq=seq,
        name="ship",
        kind="remote",
        status="failed" if failed else "completed",
        attempts=2 if failed else 1,
        error=BOOM if failed else None,
        errors=(BOOM,) if failed else (),
        group="ships",
        parallel_group=fan,
        parallel_size=width,
        enqueued_at=1000.0,
        started_at=1000.5,
        finished_at=1001.0 + index / 1000,
        output=None if failed else '"ok"',
    )


async def fill(store: Store, width: int) -> None:
    await store.create_run(Run(id="big", workflow="shipping", status="suspended"))
    await store.save_checkpoint(
        Checkpoint(run_id="big", seq=1, name="reserve", kind="local", status="completed")
    )
    batch: list[PutCheckpoint] = []
    for index in range(width):
        batch.append(PutCheckpoint(_member(2 + index, 2, index, width)))
        if len(batch) == 5000:
            await store.apply(batch)
            batch = []
    if batch:
        await store.apply(batch)
    after = 2 + width
    await store.save_checkpoint(
        Checkpoint(run_id="big", seq=after, name="sleep", kind="timer", status="completed")
    )
    for i in range(3):
        await store.save_checkpoint(
            Checkpoint(
                run_id="big",
                seq=after + 1 + i,
                name="audit",
                kind="child",
                child_id=f"big.all.{after + 1}.{i}",
                parallel_group=after + 1,
                parallel_size=3,
            )
        )


async def measure(name: str, store: Store, width: int) -> None:
    start = time.perf_counter()
    await fill(store, width)
    print(f"{name:9} wrote a run with a fan of {width:,} in {time.perf_counter() - start:.1f} s")
    stats = store.statistics()
    calls: dict[str, tuple[str, Callable[[], Awaitable[Any]]]] = {
        "run_detail": ("run_detail", lambda: run_detail(store, "big")),
        "fan_page(offset=50000, limit=100)": (
            "fan_page_offset_50000",
            lambda: fan_page(store, "big", 2, offset=50_000, limit=100),
        ),
        "fan_page(failed, offset=1000, limit=100)": (
            "fan_page_failed_offset_1000",
            lambda: fan_page(store, "big", 2, failed=True, offset=1000, limit=100),
        ),
        "history (every checkpoint)": ("history", lambda: history(store, "big")),
    }
    for call_name, (case, call) in calls.items():
        runs, checkpoints = stats.run_rows_read, stats.checkpoint_rows_read
        start = time.perf_counter()
        result = await call()
        took = (time.perf_counter() - start) * 1000
        runs, checkpoints = stats.run_rows_read - runs, stats.checkpoint_rows_read - checkpoints
        case = f"{name}.run_detail_fan.{case}"
        print(f"{name:9} {call_name}")
        figure(
            BENCH, f"{case}.run_rows_read", runs, "rows", better="lower", label="  run rows read"
        )
        figure(
            BENCH,
            f"{case}.checkpoint_rows_read",
            checkpoints,
            "rows",
            better="lower",
            label="  checkpoint rows read",
            fan=width,
        )
        figure(BENCH, f"{case}.ms", took, "ms", better="lower", label="  time")
        if call_name == "run_detail":
            wide = result.fans[0]
            print(
                f"{'':9} fan at {wide.first_seq}: size {wide.size:,},"
                f" counts {dict(wide.counts)}, {len(wide.first_failures)} first failures;"
                f" timeline of {len(result.timeline)} entries"
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--fan", type=int, default=100_000)
    parser.add_argument("--url", default=os.environ.get("POSTGRES_URL", DEFAULT_URL))
    parser.add_argument("--no-postgres", action="store_true")
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    async with open_store("memory://") as store:
        await measure("memory", store, args.fan)
    with tempfile.TemporaryDirectory() as folder:
        async with open_store(f"sqlite:///{Path(folder) / 'detail.db'}") as store:
            await measure("sqlite", store, args.fan)
    if args.no_postgres:
        return
    base = args.url.partition("?")[0]
    schema = f"bench_detail_{secrets.token_hex(4)}"
    try:
        async with open_store(f"{base}?schema={schema}") as store:
            await measure("postgres", store, args.fan)
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    trio.run(main)
