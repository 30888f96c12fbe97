"""The next deploy of examples/shop.py (docs/operations.md, ``trio-durable
workers``): version 2 of the app, whose ``charge`` runs only on workers that
offer the capability ``pci``, and whose ``checkout`` sends its failures to
the handler workflow ``refund_order``, which lives in
another deploy. Run beside workers of the first
deploy, it shows as a rollout in progress, with the disagreements between
the two."""

from __future__ import annotations

import trio_durable as td

app = td.App("shop", version="2")


@app.step()
async def reserve(order: str) -> str:
    """A local step: it runs in the engine."""
    return f"hold-{order}"


@app.step(group="payments", requires=["pci"])
async def charge(order: str, amount: int) -> str:
    """A remote step for the workers of ``payments`` that offer ``pci``."""
    return f"receipt-{order}-{amount}"


@app.workflow(on_error=[td.OnError(workflow="refund_order")])
async def checkout(ctx: td.Context, order: str, amount: int) -> dict[str, str]:
    """Reserve the order, then charge it."""
    hold = await ctx.step(reserve, order)
    receipt = await ctx.step(charge, order, amount)
    return {"hold": hold, "receipt": receipt}
