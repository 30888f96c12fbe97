"""Finding and reading runs, and pruning the old ones: docs/queries.md.

Starts a few orders on a SQLite store, one of which fans out to 60 shipments
(every 7th fails), then lists runs with filters, facets and a cursor, reads
one run's history, the fanned run's detail and a page of its failed
members, and finally prunes what ended more than an hour ago.

Run it with ``python examples/queries_demo.py [path/to/queries.db]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

import trio_durable as td

app = td.App("shop")


@app.step()
async def reserve(sku: str) -> str:
    return f"hold-{sku}"


@app.step()
async def ship(parcel: int) -> str:
    if parcel % 7 == 3:
        raise td.FatalError(f"parcel {parcel} refused", code="refused")
    return f"shipped-{parcel}"


@app.workflow()
async def shipment(ctx: td.Context, parcel: int) -> str:
    return await ctx.step(ship, parcel)


@app.workflow()
async def order(ctx: td.Context, sku: str, parcels: int) -> int:
    await ctx.step(reserve, sku)
    outcomes = await ctx.all_settled(shipment, list(range(parcels)))
    return sum(1 for outcome in outcomes if outcome["status"] == "fulfilled")


# Durable time is the wall clock: to show retention without waiting an
# hour, this demo's clock starts two hours ago and the pruning engine's now.
TWO_HOURS_AGO = 1_700_000_000.0
NOW = TWO_HOURS_AGO + 2 * 3600


async def main(path: Path) -> None:
    store = f"sqlite:///{path}"
    async with td.open_engine(app, store=store, wall_clock=lambda: TWO_HOURS_AGO) as engine:
        for i, sku in enumerate(["mug", "tea", "pot", "cup"]):
            run = await engine.start(
                order, sku, 60 if sku == "pot" else 2, run_id=f"order-{i}", tags=[sku, "web"]
            )
            await run.result()
        await engine.start(order, "jam", 1, run_id="order-blue", namespace="blue")
        await engine.drain()

        # -- finding runs: newest first, a page at a time --------------------------
        page = await engine.list_runs(workflow="order", limit=2, facets=True)
        print("orders:", [run.id for run in page.runs], "facets:", dict(page.facets or {}))
        more = await engine.list_runs(workflow="order", limit=2, cursor=page.next_cursor)
        print("next page:", [run.id for run in more.runs])
        tagged = await engine.list_runs(tags=["web", "pot"])
        print("tagged web and pot:", [run.id for run in tagged.runs])
        blue = await engine.list_runs(namespace="blue", status=["completed", "failed"])
        print("blue:", [(run.id, run.status) for run in blue.runs])
        children = await engine.list_runs(parent_id="order-2", status="failed", limit=500)
        print("failed shipments of order-2:", len(children.runs))

        # -- one run's history ----------------------------------------------------
        history = await engine.history("order-0")
        for entry in history.entries:
            print(f"  seq {entry.seq}: {entry.kind} {entry.name} {entry.status}")
        print("children of order-0:", list(history.children))

        # -- a run with a wide fan: its detail and a page of failures -------------
        detail = await engine.run_detail("order-2")
        [fan] = detail.fans
        print(
            f"order-2 fan at seq {fan.first_seq}: {fan.size} members, {dict(fan.counts)},"
            f" first failure {fan.first_failures[0].child_id}"
        )
        print("timeline:", [type(item).__name__ for item in detail.timeline])
        failures = await engine.fan_page("order-2", fan.first_seq, failed=True, limit=3)
        print(
            f"failed members ({failures.total} in all), first page:",
            [(m.seq, m.error.code if m.error else None) for m in failures.members],
        )

    # -- retention: an engine that prunes runs ended more than an hour ago --------
    retention = td.Retention(completed=3600, failed=3600, batch=100, interval=60)
    async with td.open_engine(app, store=store, wall_clock=lambda: NOW) as engine:
        pruned = await engine.prune(retention)
        left = await engine.list_runs()
        print(f"pruned {pruned} runs; {len(left.runs)} left")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            trio.run(main, Path(folder) / "queries.db")
