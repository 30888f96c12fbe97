"""The shop of docs/operations.md's command-line sessions: an engine runs
``checkout`` and its local step ``reserve``; ``charge`` is a remote step of
the group ``payments``, which a worker process runs::

    trio-durable engine shop:app --store sqlite:///shop.db --broker amqp://... &
    trio-durable worker shop:app --groups payments --broker amqp://... &

examples/shop_v2.py is the next deploy of the same app.
"""

from __future__ import annotations

import trio_durable as td

app = td.App("shop")


@app.step()
async def reserve(order: str) -> str:
    """A local step: it runs in the engine."""
    return f"hold-{order}"


@app.step(group="payments")
async def charge(order: str, amount: int) -> str:
    """A remote step: a worker of the group ``payments`` runs it."""
    return f"receipt-{order}-{amount}"


@app.workflow()
async def checkout(ctx: td.Context, order: str, amount: int) -> dict[str, str]:
    """Reserve the order, then charge it."""
    hold = await ctx.step(reserve, order)
    receipt = await ctx.step(charge, order, amount)
    return {"hold": hold, "receipt": receipt}
