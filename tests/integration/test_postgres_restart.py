"""Two engines, each with its own pool of connections to one PostgreSQL
server, keep every run when the server restarts with a fast shutdown in the
middle of their work: connections are cut with commits in flight (some
landed, some not), starts come in while the server is down, and every run
completes with its output, each checkpoint settled once."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path
from typing import Final

import trio

import trio_durable as td
from servers import postgres as postgres_server
from servers.fixture import installed

app = td.App("pg-restart")

RUNS: Final = 240
"""Runs started before the restart."""
LATE: Final = 60
"""Runs started while the server restarts (each start retried until it
lands: starts are idempotent by run id)."""
FIRST: Final = 4
"""Runs that end before the restart; the others' `receipt` waits for it
(a local step: a remote one would hold a worker's slot, which the first
runs' `charge` may need)."""

ran: Counter[str] = Counter()
restarting: list[trio.Event] = []
"""Set as the restart begins: the restart lands mid-run by this event, not
by how long the runs' timers take on a loaded machine."""


@app.step()
async def price(i: int) -> int:
    ran[f"price:{i}"] += 1
    return i * 10


@app.step(group="pg-restart")
async def charge(amount: int) -> int:
    ran[f"charge:{amount}"] += 1
    return amount + 1


@app.step()
async def receipt(total: int) -> str:
    ran[f"receipt:{total}"] += 1
    if total > FIRST * 10:
        await restarting[0].wait()
    return f"paid {total}"


@app.workflow()
async def order(ctx: td.Context, i: int) -> str:
    amount = await ctx.step(price, i)
    total = await ctx.step(charge, amount)
    await ctx.sleep(0.2 + (i % 7) * 0.1)
    return await ctx.step(receipt, total)


async def _start(engine: td.Engine, i: int) -> None:
    """Start run ``i``, again and again while the store is away."""
    while True:
        try:
            await engine.start(order, i, run_id=f"order-{i}")
            return
        except td.StoreError:
            await trio.sleep(0.2)


async def test_every_run_completes_across_a_fast_shutdown_restart(tmp_path: Path) -> None:
    installed("postgres")
    ran.clear()
    restarting[:] = [trio.Event()]
    workdir = tmp_path / "private"
    workdir.mkdir()
    url = await trio.to_thread.run_sync(postgres_server.start, workdir)
    pooled = f"{url}?pool_size=4"
    try:
        async with (
            td.open_engine(
                app,
                store=pooled,
                broker="memory://pg-restart",
                serve=["pg-restart"],
                engine_id="one",
                reconcile_interval=1.0,
                lease_ttl=3.0,
            ) as one,
            td.open_engine(
                app,
                store=pooled,
                broker="memory://pg-restart",
                serve=["pg-restart"],
                engine_id="two",
                reconcile_interval=1.0,
                lease_ttl=3.0,
            ) as two,
        ):
            engines = (one, two)
            async with trio.open_nursery() as nursery:
                for i in range(RUNS):
                    nursery.start_soon(_start, engines[i % 2], i)
            # Mid-run: the first runs done, the others in a turn that runs
            # `receipt`, which waits until the restart begins.
            with trio.fail_after(60):
                for i in range(FIRST):
                    await one.result(f"order-{i}")
            ended_before = sum(
                1 for run in await one.store.list_runs(limit=10_000) if run.status == "completed"
            )
            restarted_at = trio.current_time()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    trio.to_thread.run_sync, functools.partial(postgres_server.restart, workdir)
                )
                # Their receipts end, and their turns' commits land around
                # the shutdown, some cut off.
                restarting[0].set()
                for i in range(RUNS, RUNS + LATE):
                    nursery.start_soon(_start, engines[i % 2], i)
            with trio.fail_after(180):
                results = [await one.result(f"order-{i}") for i in range(RUNS + LATE)]
            all_done = trio.current_time() - restarted_at
            runs = await one.store.list_runs(limit=10_000)
            checkpoints = {
                f"order-{i}": await one.store.get_checkpoints(f"order-{i}")
                for i in range(RUNS + LATE)
            }
    finally:
        await trio.to_thread.run_sync(postgres_server.stop, workdir)
    assert ended_before == FIRST  # the restart did land mid-run
    assert results == [f"paid {i * 10 + 1}" for i in range(RUNS + LATE)]
    assert len(runs) == RUNS + LATE
    assert {run.status for run in runs} == {"completed"}
    for run_id, cps in checkpoints.items():
        body = [(cp.seq, cp.name, cp.status) for cp in cps if 0 < cp.seq < 1000]
        assert body == [
            (1, "price", "completed"),
            (2, "charge", "completed"),
            (3, "sleep", "completed"),
            (4, "receipt", "completed"),
        ], run_id
    # Every step ran; a local step may have run twice where its turn's
    # commit was cut off (at least once), never a step a commit recorded.
    assert {key.split(":")[0] for key in ran} == {"price", "charge", "receipt"}
    for i in range(RUNS + LATE):
        assert ran[f"price:{i}"] >= 1
        assert ran[f"charge:{i * 10}"] >= 1
    again = {key: n for key, n in ran.items() if n > 1}
    print(
        f"ended before the restart: {ended_before}; all {RUNS + LATE} done"
        f" {all_done:.1f} s after it; steps run more than once: {again}"
    )
