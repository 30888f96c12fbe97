"""Deploys of one app for the replay tests (tests/test_history_replay.py,
tests/test_history_export.py), importable as ``replay_app:<deploy>`` from
the tests folder.

- ``app``, the deploy the runs start on: ``order(order_id)`` charges,
  waits for the signal ``packed`` and ships; ``failing(reason)`` charges
  and fails with the code ``declined``; ``priced(sku)`` prices an item
  under the argument check;
- ``changed``: ``order`` checks for fraud after the charge, unpatched
  (which breaks every run past the charge);
- ``patched``: the same change behind ``ctx.patched("fraud-check")``;
- ``returns_more``: ``order`` returns one more line at its end;
- ``reprices``: ``priced`` passes the step another SKU.

`FRAUD_LINE` is the line of ``changed``'s body that asks for the new step.
"""

from __future__ import annotations

import inspect

import trio_durable as td


def deploy(variant: str) -> td.App:
    """The app as the deploy ``variant`` writes it."""
    app = td.App("shop")

    @app.step()
    async def charge(order: str) -> str:
        return f"charged {order}"

    @app.step()
    async def check_fraud(order: str) -> str:
        return f"checked {order}"

    @app.step()
    async def ship(order: str) -> str:
        return f"shipped {order}"

    @app.step()
    async def price(sku: str) -> int:
        return len(sku)

    @app.workflow(name="order")
    async def order(ctx: td.Context, order_id: str) -> list[str]:
        done = [await ctx.step(charge, order_id)]
        if variant == "changed":
            done.append(await ctx.step(check_fraud, order_id))  # the fraud line
        if variant == "patched" and ctx.patched("fraud-check"):
            done.append(await ctx.step(check_fraud, order_id))
        await ctx.wait_signal("packed")
        done.append(await ctx.step(ship, order_id))
        if variant == "returns_more":
            done.append("thanked")
        return done

    @app.workflow(name="failing")
    async def failing(ctx: td.Context, reason: str) -> None:
        await ctx.step(charge, reason)
        raise td.FatalError(f"declined: {reason}", code="declined")

    @app.workflow(name="priced", check_arguments=True)
    async def priced(ctx: td.Context, sku: str) -> int:
        return await ctx.step(price, sku + "-2" if variant == "reprices" else sku)

    return app


app = deploy("a")
changed = deploy("changed")
patched = deploy("patched")
returns_more = deploy("returns_more")
reprices = deploy("reprices")

FRAUD_LINE = (
    next(
        number
        for number, line in enumerate(inspect.getsource(deploy).splitlines(), 1)
        if line.endswith("# the fraud line")
    )
    + inspect.getsourcelines(deploy)[1]
    - 1
)
