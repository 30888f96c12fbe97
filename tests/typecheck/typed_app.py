"""A typed app that ``mypy --strict`` must accept, with the types it infers.

`tests/test_typing.py` checks it; it is also part of the project's own
``mypy --strict`` run. `typing.assert_type` fails the check when an inferred
type differs, and does nothing at run time.
"""

from __future__ import annotations

from typing import Any, assert_type

import attrs

import trio_durable as td

app = td.App("typed")


@attrs.define(frozen=True)
class Order:
    sku: str
    qty: int


@attrs.define(frozen=True)
class Receipt:
    order: Order
    amount: int


@app.step
async def reserve(sku: str) -> bool:
    return bool(sku)


@app.step(group="payments", retry=td.Retry(attempts=5))
async def charge(order: Order, cents: int) -> Receipt:
    info = assert_type(td.current_step(), td.StepInfo)
    assert_type(info.attempt, int)
    return Receipt(order=order, amount=cents)


@app.step()
async def refund(order: Order, cents: int) -> None: ...


@app.step(group="shipping")
async def ship(order: Order) -> str:
    return order.sku


@app.step
async def six(a: int, b: int, c: int, d: int, e: int, f: str) -> str:
    return f * (a + b + c + d + e)


@app.step
async def nothing() -> None: ...


@app.workflow
async def invoice(ctx: td.Context, receipt: Receipt) -> int:
    return receipt.amount


@app.workflow(version="2", on_error=[td.OnError(workflow="invoice")])
async def checkout(ctx: td.Context, order: Order, cents: int = 100) -> Receipt:
    assert_type(await ctx.step(reserve, order.sku), bool)
    receipt = await ctx.step(charge, order, cents, compensate=refund)
    assert_type(receipt, Receipt)
    assert_type(await ctx.step(charge, order, cents, queue=None, priority=3), Receipt)
    assert_type(await ctx.step(six, 1, 2, 3, 4, 5, "x"), str)
    assert_type(await ctx.step(nothing), None)
    assert_type(await ctx.child(invoice, receipt), int)
    assert_type(await ctx.child("invoice", receipt), Any)
    assert_type(await ctx.start_child(invoice, receipt), str)
    assert_type(await ctx.all(invoice, [receipt, receipt], concurrency=2), list[int])
    assert_type(await ctx.all(ship, [order], mode="wait_all"), list[str])
    assert_type(await ctx.all_settled(ship, [order]), list[dict[str, Any]])
    return receipt


async def main() -> None:
    async with td.open_engine(app, serve=["payments", "shipping"]) as engine:
        run = await engine.start(checkout, Order("sku", 1), run_id="order-1")
        assert_type(run, td.RunHandle[Receipt])
        assert isinstance(run, td.Run)
        assert_type(run.id, str)
        assert_type(await run.result(), Receipt)
        assert_type(await engine.start(checkout, Order("sku", 1), 250), td.RunHandle[Receipt])
        assert_type(await engine.start("checkout", Order("sku", 1)), td.RunHandle[Any])
        assert_type(await engine.result(run.id), Any)
    async with td.open_client("memory://typed", app=app) as client:
        started = await client.start(checkout, Order("sku", 1), run_id="order-2")
        assert_type(started, td.RunHandle[Receipt])
        assert_type(await started.result(), Receipt)
        assert_type(await client.start("checkout", Order("sku", 1)), td.RunHandle[Any])
