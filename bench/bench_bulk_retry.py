"""A bulk retry by error code on SQLite, interrupted midway and resumed.

Fills a SQLite store with ``--runs`` (10,000) failed runs of error code
``declined`` (and a tenth as many of code ``other``), then runs
``trio-durable runs retry --code declined --yes`` as a process of its
own; once ``--interrupt-at`` (half) of the runs are pending in the store,
sends it SIGINT. The runs it retried then fail again at once (written as
an engine would write their failure, with the same code), so that the
filter matches them again; the same command, run again, resumes the
operation. Each run's retries are then counted (the retried histories in
the store): every ``declined`` run must have been retried exactly once,
no ``other`` run ever.

It prints (cases ``sqlite.bulk_retry.*``):

- ``seconds``: wall time of both commands, each from its start to its end
  (the time a person waits, process starts included; the failures written
  between them left out);
- ``interrupted_after``: runs retried when the first command was stopped;
- ``retried_once``, ``retried_twice``, ``retried_others``: runs retried
  exactly once, more than once, and runs of the other code retried.

Usage: ``python bench/bench_bulk_retry.py [--runs 10000] [--batch 100]
[--interrupt-at 0.5] [--json PATH]``. It never passes or fails (the test
tests/test_bulk_retry_processes.py runs it and checks the counts).
"""

from __future__ import annotations

import argparse
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _figures import add_json_option, figure, use_args

import trio_durable as td
from trio_durable._features.lifecycle._retried import retried_scope
from trio_durable.stores import CreateRun, UpdateRun

BENCH = "bench_bulk_retry"
_FILL = 500


async def fill(url: str, runs: int) -> None:
    """``runs`` failed runs of code ``declined``, a tenth as many of
    ``other``, written directly (no engine runs them)."""
    now = time.time()
    rows = [(f"d{i:06}", "declined") for i in range(runs)]
    rows += [(f"o{i:06}", "other") for i in range(max(1, runs // 10))]
    async with td.open_store(url) as store:
        for start in range(0, len(rows), _FILL):
            await store.apply(
                [
                    CreateRun(
                        td.Run(
                            id=run_id,
                            workflow="checkout",
                            version="1",
                            status="failed",
                            input="[]",
                            error=td.ErrorInfo(message="card declined", code=code),
                            created_at=now,
                            updated_at=now,
                        )
                    )
                    for run_id, code in rows[start : start + _FILL]
                ]
            )


def pending(path: Path) -> int:
    with sqlite3.connect(path, timeout=30) as db:
        [(count,)] = db.execute("SELECT COUNT(*) FROM runs WHERE status = 'pending'").fetchall()
    return int(count)


async def fail_again(url: str) -> int:
    """Fail every pending run again with code ``declined``, as an engine
    that ran it would: the filter of the bulk retry matches it again."""
    now = time.time()
    async with td.open_store(url) as store:
        ids = [
            run.id
            for run in await store.find_runs(
                td.stores.RunFilter(statuses=frozenset({"pending"})), limit=1_000_000
            )
        ]
        error = td.ErrorInfo(message="card declined again", code="declined")
        for start in range(0, len(ids), _FILL):
            await store.apply(
                [
                    UpdateRun(
                        run_id,
                        {"status": "failed", "error": error, "updated_at": now},
                        expect_status=frozenset({"pending"}),
                    )
                    for run_id in ids[start : start + _FILL]
                ]
            )
    return len(ids)


def retries(path: Path) -> dict[str, int]:
    """Each run's number of retries, from the retried histories kept."""
    prefix = retried_scope("")
    with sqlite3.connect(path, timeout=30) as db:
        rows = db.execute(
            "SELECT scope, COUNT(*) FROM durable_values WHERE scope LIKE ? GROUP BY scope",
            (prefix + "%",),
        ).fetchall()
    return {scope[len(prefix) :]: int(count) for scope, count in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000, help="failed runs of the code")
    parser.add_argument("--batch", type=int, default=100, help="runs retried per store write")
    parser.add_argument(
        "--interrupt-at",
        type=float,
        default=0.5,
        help="the share of the runs pending when the first command gets SIGINT",
    )
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bulk.db"
        url = f"sqlite:///{path}"
        trio.run(fill, url, args.runs)
        command = [
            sys.executable,
            "-m",
            "trio_durable",
            "runs",
            "retry",
            "--store",
            url,
            "--status",
            "failed",
            "--code",
            "declined",
            "--batch",
            str(args.batch),
            "--yes",
            "--json",
        ]
        began = time.monotonic()
        first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wanted = max(1, int(args.runs * args.interrupt_at))
        while first.poll() is None and pending(path) < wanted:
            time.sleep(0.005)
        first.send_signal(signal.SIGINT)
        _, first_err = first.communicate(timeout=60)
        if first.returncode != 130:
            print(first_err.decode(errors="replace"), file=sys.stderr)
        interrupted_after = pending(path)
        first_seconds = time.monotonic() - began
        trio.run(fail_again, url)
        resumed = time.monotonic()
        second = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
        seconds = first_seconds + time.monotonic() - resumed
        if second.returncode != 0:
            print(second.stdout, second.stderr, file=sys.stderr)
        counts = retries(path)
    declined = [counts.get(f"d{i:06}", 0) for i in range(args.runs)]
    others = sum(1 for run_id in counts if run_id.startswith("o"))
    print(f"bulk retry of {args.runs:,} failed runs by --code on SQLite, SIGINT midway:")
    figure(BENCH, "sqlite.bulk_retry.seconds", seconds, "s", better="lower")
    figure(BENCH, "sqlite.bulk_retry.interrupted_after", interrupted_after, "runs")
    figure(BENCH, "sqlite.bulk_retry.first_exit", first.returncode, "status")
    figure(BENCH, "sqlite.bulk_retry.second_exit", second.returncode, "status")
    figure(BENCH, "sqlite.bulk_retry.retried_once", declined.count(1), "runs")
    figure(BENCH, "sqlite.bulk_retry.retried_twice", sum(n > 1 for n in declined), "runs")
    figure(BENCH, "sqlite.bulk_retry.retried_others", others, "runs")


if __name__ == "__main__":
    main()
