"""An app and its workload for `trio-durable simulate` (docs/simulation.md):

    trio-durable simulate examples/simulated_orders.py:app \\
        --workload examples/simulated_orders.py:workload --seeds 1..20

Orders reserve stock (undone if the order is cancelled), wait up to two
hours for a confirmation, charge on a worker of group ``payments`` and
ship a day later. The workload starts ten orders, confirms the even ones
and cancels one more; the steps record their effects on the simulation,
which checks that each happened exactly as often as in the run without
faults.
"""

from __future__ import annotations

import trio_durable as td
from trio_durable.testing import Simulation

app = td.App("orders")
sims: list[Simulation] = []  # the simulation the steps record into


@app.step(retry=td.Retry(attempts=5, backoff=1.0))
async def reserve(order_id: str, qty: int) -> str:
    sims[-1].record(f"reserve:{order_id}")
    return f"r-{order_id}-{qty}"


@app.step()
async def unreserve(order_id: str, qty: int) -> None:
    sims[-1].record(f"unreserve:{order_id}")


@app.step(group="payments", retry=td.Retry(attempts=5, backoff=2.0))
async def charge(order_id: str, qty: int) -> int:
    sims[-1].record(f"charge:{order_id}")
    return qty * 100


@app.workflow()
async def order(ctx: td.Context, order_id: str, qty: int) -> dict[str, object]:
    hold = await ctx.step(reserve, order_id, qty, compensate=unreserve)
    try:
        await ctx.wait_signal("confirm", timeout=7200)
    except td.SignalTimeout:
        raise td.FatalError("not confirmed", code="unconfirmed") from None
    cents = await ctx.step(charge, order_id, qty)
    await ctx.sleep(3600)  # ship tomorrow
    return {"hold": hold, "cents": cents}


async def workload(sim: Simulation) -> None:
    sims[:] = [sim]
    for i in range(10):
        await sim.start(order, f"o{i}", i + 1, run_id=f"order-{i}")
        await sim.sleep(sim.rng.uniform(0, 60))
    for i in range(0, 10, 2):  # odd orders are never confirmed
        await sim.signal(f"order-{i}", "confirm")
    await sim.start(order, "waiting", 1, run_id="cancel-me")
    await sim.cancel("cancel-me", compensate=True)
