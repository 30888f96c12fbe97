"""The shop's workflow code, deployed with its workers (docs/remote-workflows.md).

Everything in this module runs on workers, never in the engine:

- ``checkout`` is a remote workflow served by the workers of the ``orders``
  group: each of its turns is a decision task that a worker answers by
  replaying the body against the run's history;
- ``reserve`` is a local step: it runs on the orders worker, inside the
  decision, and its result goes back with the decision;
- ``charge`` is a remote step of another group (``payments``): the decision
  asks the engine for it, and a payments worker runs it;
- ``ship`` is a child workflow declared without a group: it is served
  under its own name as the group (``ship``).

The engine that runs the checkouts (examples/remote_workflows_demo.py)
never imports this module: it knows ``checkout`` by name, and ``ship``
from what the workers announce.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Final

import trio

import trio_durable as td

COOLING_OFF: Final = 1.0
"""Seconds of the checkout's durable timer (kept by the engine)."""

ORDERS_GROUPS: Final = ("orders", "ship")
"""What the orders worker serves: ``checkout``'s group, and ``ship`` by its name."""

PAYMENTS_GROUPS: Final = ("payments",)

app = td.App("shop")

_worker: ContextVar[str] = ContextVar("shop_worker")
"""The worker a step runs on, to show where each step ran."""


def _ran(what: str) -> None:
    print(f"  {what} ran on the {_worker.get()} worker", flush=True)


@app.step()
async def reserve(order: str) -> str:
    """A local step of ``checkout``: it runs on the worker that replays the
    body, during the decision."""
    _ran(f"reserve({order!r})")
    return f"hold-{order}"


@app.step(group="payments")
async def charge(order: str, amount: int) -> str:
    """A remote step: a decision asks for it, a payments worker runs it."""
    _ran(f"charge({order!r}, {amount})")
    return f"receipt-{order}-{amount}"


@app.step()
async def label(order: str) -> str:
    """A local step of ``ship``."""
    _ran(f"label({order!r})")
    return f"parcel-{order}"


@app.workflow()
async def ship(ctx: td.Context, order: str) -> str:
    """No ``group=``: served by convention under its own name, ``ship``."""
    return await ctx.step(label, order)


@app.workflow(group="orders")
async def checkout(ctx: td.Context, order: str, amount: int) -> dict[str, str]:
    """The workflow the engine runs without its code."""
    hold = await ctx.step(reserve, order)
    receipt = await ctx.step(charge, order, amount)
    await ctx.sleep(COOLING_OFF)
    parcel = await ctx.child(ship, order)
    return {"hold": hold, "receipt": receipt, "parcel": parcel}


async def serve(
    name: str,
    groups: tuple[str, ...],
    broker: td.Broker,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run one worker of this app for ``groups`` until cancelled (what
    ``trio-durable worker shop_workers:app --groups ...`` does in a process
    of its own)."""
    _worker.set(name)  # the worker's tasks, and so its steps, inherit it
    async with td.open_worker(app, broker=broker, groups=groups, instance_id=name):
        task_status.started()
        await trio.sleep_forever()
