"""The console's run detail for a run with a fan of 100,000, through its
ASGI app: latency (p50/p99), rows read, and the 304 answer's latency.

Builds the run as bench_run_detail.py does (`fill`: a local step, a fan of
``--fan`` remote steps, every 7th failed, a timer and a child fan of 3),
written through the SQLite store's `apply` in batches of 5,000 puts rather
than run by an engine (a workflow fanning out 100,000 steps takes minutes
here; the rows are the same). Then it serves the store with `console_app`
over a `Client` and requests, through httpx's ASGI transport (no socket),
``--requests`` times each: ``GET /api/runs/big``, the same with the ETag in
``If-None-Match`` (304), and ``GET /api/runs/big/fans/2?offset=90000``.
Rows read are the store's `StoreStatistics` (run and checkpoint rows its
reads returned; the aggregates of `fan_counts` and `run_stamp` count as the
rows they return, not the rows they scan). It prints figures (cases
``sqlite.console.<request>.*``; with ``--json PATH``, also as JSON lines)
and never passes or fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

import trio_durable as td
from trio_durable.console import console_app

sys.path.insert(0, str(Path(__file__).parent))
from _figures import add_json_option, figure, use_args
from bench_run_detail import fill

BENCH = "bench_console"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--fan", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=25)
    add_json_option(parser)
    args = parser.parse_args()
    use_args(args)
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'console.db'}"
        async with td.open_client(url) as client:
            start = time.perf_counter()
            await fill(client.store, args.fan)
            print(f"wrote a run with a fan of {args.fan:,} in {time.perf_counter() - start:.1f} s")
            stats = client.store.statistics()
            transport = httpx.ASGITransport(app=console_app(client))
            async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
                tag = (await http.get("/api/runs/big")).headers["etag"]
                cases = {
                    "run_detail": ("/api/runs/big", {}, 200),
                    "run_detail_304": ("/api/runs/big", {"If-None-Match": tag}, 304),
                    "fan_page_offset_90000": ("/api/runs/big/fans/2?offset=90000", {}, 200),
                }
                for name, (path, headers, status) in cases.items():
                    times: list[float] = []
                    rows = (stats.run_rows_read, stats.checkpoint_rows_read)
                    for _ in range(args.requests):
                        began = time.perf_counter()
                        response = await http.get(path, headers=headers)
                        times.append((time.perf_counter() - began) * 1000)
                        assert response.status_code == status, response.text
                    runs = (stats.run_rows_read - rows[0]) / args.requests
                    checkpoints = (stats.checkpoint_rows_read - rows[1]) / args.requests
                    p50, p99 = _percentile(times, 0.5), _percentile(times, 0.99)
                    case = f"sqlite.console.{name}"
                    print(f"{name} ({len(response.content):,} bytes)")
                    for q, value in (("p50", p50), ("p99", p99)):
                        figure(BENCH, f"{case}.{q}", value, "ms", better="lower", label=f"  {q}")
                    for what, rows in (("run", runs), ("checkpoint", checkpoints)):
                        figure(
                            BENCH,
                            f"{case}.{what}_rows_read",
                            rows,
                            "rows/request",
                            better="lower",
                            label=f"  {what} rows read",
                            fan=args.fan,
                        )


if __name__ == "__main__":
    trio.run(main)
