"""The trio-durable demo: a checkout that survives its engine.

An order runs through local steps (one with a compensating undo), a durable
timer, a signal, an awaited child run and a fan of child runs. Midway, while
the order sleeps on its timer, the first engine is interrupted by cancelling
its scope, as a deploy or a crash would. A second engine opened on the same
SQLite file picks the run up from its checkpoints and finishes it; the steps
that already ran are not run again.

Run it with ``python examples/demo.py [path/to/demo.db]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import attrs
import trio

import trio_durable as td

app = td.App("shop")

# How often each step's code really ran, across both engines.
ran: dict[str, int] = {}


def _ran(name: str) -> None:
    ran[name] = ran.get(name, 0) + 1


@attrs.define(frozen=True)
class Order:
    id: str
    sku: str
    items: list[str]
    amount: int


@app.step()
async def reserve(sku: str) -> str:
    _ran("reserve")
    return f"hold-{sku}"


@app.step()
async def refund(order: Order) -> None:
    _ran("refund")


@app.step(retry=td.Retry(attempts=3, backoff=0.05))
async def charge(order: Order) -> str:
    _ran("charge")
    return f"receipt-{order.id}-{order.amount}"


@app.step()
async def pack(item: str) -> str:
    _ran("pack")
    return f"parcel:{item}"


@app.workflow()
async def invoice(ctx: td.Context, receipt: str) -> str:
    return await ctx.step(render_invoice, receipt)


@app.step()
async def render_invoice(receipt: str) -> str:
    _ran("render_invoice")
    return f"invoice-for-{receipt}"


@app.workflow()
async def ship(ctx: td.Context, item: str) -> str:
    parcel = await ctx.step(pack, item)
    await ctx.sleep(0.2)
    return parcel


@app.workflow()
async def checkout(ctx: td.Context, order: Order) -> dict[str, object]:
    hold = await ctx.step(reserve, order.sku)
    receipt = await ctx.step(charge, order, compensate=refund)
    await ctx.sleep(1.0)  # the cooling-off period; the first engine dies here
    approved = await ctx.wait_signal("approved", timeout=60)
    invoice_id = await ctx.child(invoice, receipt)
    parcels = await ctx.all(ship, order.items, concurrency=2)
    return {
        "hold": hold,
        "receipt": receipt,
        "approved": approved,
        "invoice": invoice_id,
        "parcels": parcels,
    }


def show(event: td.Event) -> None:
    what = event.name or event.workflow
    extra = ""
    if event.kind == "run.suspended" and event.data.get("wake_at") is not None:
        extra = " (timer set)"
    print(f"    {event.kind:<15} {event.run_id:<28} {what}{extra}")


async def watch(engine: td.Engine, task_status: trio.TaskStatus[None]) -> None:
    with engine.subscribe() as events:
        task_status.started()
        async for event in events:
            show(event)


async def main(db: Path) -> int:
    url = f"sqlite:///{db}"
    order = Order(id="42", sku="blue-mug", items=["mug", "saucer", "spoon"], amount=1200)
    print(f"store: {url}")

    print("\n== engine A starts the checkout")
    with trio.CancelScope() as interrupt:
        async with (
            td.open_engine(app, store=url, engine_id="engine-A") as engine,
            trio.open_nursery() as nursery,
        ):
            await nursery.start(watch, engine)
            with engine.subscribe() as events:
                await engine.start(checkout, order, run_id="order-42")
                async for event in events:
                    if event.kind == "run.suspended" and event.run_id == "order-42":
                        break
            run = await engine.get("order-42")
            print(f"\n== order-42 is {run.status}, sleeping on its timer:")
            print("== engine A is interrupted (its scope cancelled)")
            interrupt.cancel()
    steps_before = dict(ran)

    print("\n== engine B opens the same file and finishes the run")
    async with (
        td.open_engine(app, store=url, engine_id="engine-B") as engine,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(watch, engine)
        with engine.subscribe() as events:
            async for event in events:
                if event.kind == "run.suspended" and event.run_id == "order-42":
                    checkpoints = await engine.store.get_checkpoints("order-42")
                    if any(cp.kind == "signal" for cp in checkpoints):
                        break  # past the timer, now waiting for the signal
        print("\n== sending the 'approved' signal")
        await engine.signal("order-42", "approved", True)
        result = await engine.result("order-42")
        await engine.drain()
        nursery.cancel_scope.cancel()

    print(f"\n== result: {result}")
    print(f"== steps run by engine A: {steps_before}")
    print(f"== steps run in all:      {ran}")
    expected = {
        "hold": "hold-blue-mug",
        "receipt": "receipt-42-1200",
        "approved": True,
        "invoice": "invoice-for-receipt-42-1200",
        "parcels": ["parcel:mug", "parcel:saucer", "parcel:spoon"],
    }
    once = ran.get("reserve") == 1 and ran.get("charge") == 1
    if result != expected or not once:
        print("!! unexpected outcome", file=sys.stderr)
        return 1
    print("== ok: the run finished on engine B, and no step ran twice")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1:
        path = Path(sys.argv[1])
        path.unlink(missing_ok=True)
        sys.exit(trio.run(main, path))
    with tempfile.TemporaryDirectory() as tmp:
        sys.exit(trio.run(main, Path(tmp) / "demo.db"))
