"""The trio-durable demo with remote steps: an engine and two worker processes.

The checkout of ``examples/demo.py`` (a reservation, a charge with a
compensating refund, a durable timer, a signal, an awaited child run and a
fan of child runs), but its steps run on worker processes reached through a
broker (all but the refund: a compensation is a local step). Two workers serve the ``shop`` group; engine A starts the order and
is interrupted while it sleeps on its timer; engine B, opened on the same
SQLite file, finishes it. The steps record in a ledger file which worker ran
them, so you can see that none ran twice.

The broker is one configuration value, the environment variable
``TRIO_DURABLE_BROKER``::

    python examples/remote_demo.py                                   # memory://
    TRIO_DURABLE_BROKER=amqp://guest:guest@127.0.0.1:5672/ python examples/remote_demo.py
    TRIO_DURABLE_BROKER=nats://127.0.0.1:4222 python examples/remote_demo.py

A ``memory://`` broker lives inside one process, so with it the two workers
run in the demo's process (each in a task of its own) instead of in worker
processes. ``python tests/servers start rabbitmq`` (or ``nats``) starts a
local server and prints its URL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from pathlib import Path

import attrs
import trio

import trio_durable as td

BROKER_ENV = "TRIO_DURABLE_BROKER"

app = td.App("shop-remote")


_worker_name: ContextVar[str] = ContextVar("worker")
"""The worker a step runs on, for a worker inside the demo's process."""


def _ran(name: str) -> None:
    """Append ``<step> <worker>`` to the ledger the demo reads at the end."""
    worker = os.environ.get("DEMO_WORKER") or _worker_name.get()
    with open(os.environ["DEMO_LEDGER"], "a") as ledger:
        ledger.write(f"{name} {worker}\n")


@attrs.define(frozen=True)
class Order:
    id: str
    sku: str
    items: list[str]
    amount: int


@app.step(group="shop")
async def reserve(sku: str) -> str:
    _ran("reserve")
    return f"hold-{sku}"


@app.step()  # compensations run in the engine: a local step
async def refund(order: Order) -> None:
    print(f"refunding order {order.id}")


@app.step(group="shop", retry=td.Retry(attempts=3, backoff=0.05))
async def charge(order: Order) -> str:
    _ran("charge")
    return f"receipt-{order.id}-{order.amount}"


@app.step(group="shop")
async def pack(item: str) -> str:
    _ran("pack")
    return f"parcel:{item}"


@app.step(group="shop")
async def render_invoice(receipt: str) -> str:
    _ran("render_invoice")
    return f"invoice-for-{receipt}"


@app.workflow()
async def invoice(ctx: td.Context, receipt: str) -> str:
    return await ctx.step(render_invoice, receipt)


@app.workflow()
async def ship(ctx: td.Context, item: str) -> str:
    parcel = await ctx.step(pack, item)
    await ctx.sleep(0.2)
    return parcel


@app.workflow()
async def checkout(ctx: td.Context, order: Order) -> dict[str, object]:
    hold = await ctx.step(reserve, order.sku)
    receipt = await ctx.step(charge, order, compensate=refund)
    await ctx.sleep(1.0)  # the cooling-off period; engine A is interrupted here
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


# -- a worker process ------------------------------------------------------------------


async def serve(broker: str, route: str, name: str) -> None:
    """Serve ``route`` (the ``shop`` group of this demo's namespace) until
    SIGTERM, then leave cleanly."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with td.open_worker(app, broker=broker, groups=[route], instance_id=name):
            print("ready", flush=True)
            async for _ in signals:
                break


# -- the engines -----------------------------------------------------------------------


def show(event: td.Event) -> None:
    what = event.name or event.workflow
    worker = event.data.get("worker")
    extra = f" (on {worker})" if worker else ""
    if event.kind == "run.suspended" and event.data.get("wake_at") is not None:
        extra = " (timer set)"
    print(f"    {event.kind:<15} {event.run_id:<28} {what}{extra}")


async def watch(engine: td.Engine, task_status: trio.TaskStatus[None]) -> None:
    with engine.subscribe() as events:
        task_status.started()
        async for event in events:
            show(event)


async def start_worker(broker: str, route: str, name: str, ledger: Path) -> trio.Process:
    env = {**os.environ, "DEMO_LEDGER": str(ledger), "DEMO_WORKER": name}
    process = await trio.lowlevel.open_process(
        [sys.executable, __file__, "worker", broker, route, name], env=env, stdout=subprocess.PIPE
    )
    assert process.stdout is not None
    line = b""
    with trio.fail_after(30):
        while not line.endswith(b"\n"):
            chunk = await process.stdout.receive_some(1)
            if not chunk:
                raise RuntimeError(f"worker {name} exited before it was ready")
            line += chunk
    print(f"== worker {name} (pid {process.pid}) serves {route!r}")
    return process


async def serve_here(
    broker: str, route: str, name: str, task_status: trio.TaskStatus[None]
) -> None:
    """A worker inside this process (for ``memory://``); the steps it runs
    inherit its name."""
    _worker_name.set(name)
    async with td.open_worker(app, broker=broker, groups=[route], instance_id=name):
        print(f"== worker {name} (in this process) serves {route!r}")
        task_status.started()
        await trio.sleep_forever()


@asynccontextmanager
async def open_workers(broker: str, route: str, ledger: Path) -> AsyncIterator[None]:
    """Two workers for ``route``: processes, or tasks of this process when
    the broker is ``memory://``."""
    names = ("worker-1", "worker-2")
    if broker.startswith("memory:"):
        os.environ["DEMO_LEDGER"] = str(ledger)
        async with trio.open_nursery() as nursery:
            for name in names:
                await nursery.start(serve_here, broker, route, name)
            yield
            nursery.cancel_scope.cancel()
        return
    workers = [await start_worker(broker, route, name, ledger) for name in names]
    try:
        yield
    finally:
        for process in workers:
            if process.returncode is None:
                process.terminate()
        with trio.move_on_after(15) as waiting:
            waiting.shield = True
            for process in workers:
                await process.wait()
        for process in workers:
            if process.returncode is None:
                process.kill()


async def main(broker: str, workdir: Path) -> int:
    store = f"sqlite:///{workdir / 'demo.db'}"
    ledger = workdir / "ledger"
    ledger.touch()
    order = Order(id="42", sku="blue-mug", items=["mug", "saucer", "spoon"], amount=1200)
    # A namespace of its own, so its task queue (``shop@<namespace>``) holds
    # only this demo's tasks, whatever earlier runs left on a shared server.
    namespace = f"demo{os.getpid()}"
    route = f"shop@{namespace}"
    print(f"store: {store}\nbroker: {broker}")
    async with open_workers(broker, route, ledger):
        print("\n== engine A starts the checkout")
        with trio.CancelScope() as interrupt:
            async with (
                td.open_engine(app, store=store, broker=broker, engine_id="engine-A") as engine,
                trio.open_nursery() as nursery,
            ):
                await nursery.start(watch, engine)
                with engine.subscribe() as events:
                    await engine.start(checkout, order, run_id="order-42", namespace=namespace)
                    async for event in events:
                        # Suspended on its timer (a remote step suspends it too).
                        if (
                            event.kind == "run.suspended"
                            and event.run_id == "order-42"
                            and event.data.get("wake_at") is not None
                        ):
                            break
                run = await engine.get("order-42")
                print(f"\n== order-42 is {run.status}, sleeping on its timer:")
                print("== engine A is interrupted (its scope cancelled)")
                interrupt.cancel()

        print("\n== engine B opens the same file and finishes the run")
        async with (
            td.open_engine(app, store=store, broker=broker, engine_id="engine-B") as engine,
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
            with trio.fail_after(60):
                result = await engine.result("order-42")
            await engine.drain()
            nursery.cancel_scope.cancel()

    ran: dict[str, list[str]] = {}
    for line in ledger.read_text().splitlines():
        step, worker = line.split()
        ran.setdefault(step, []).append(worker)
    print(f"\n== result: {result}")
    for step, by in sorted(ran.items()):
        print(f"== {step:<15} ran {len(by)}x on {', '.join(by)}")
    expected = {
        "hold": "hold-blue-mug",
        "receipt": "receipt-42-1200",
        "approved": True,
        "invoice": "invoice-for-receipt-42-1200",
        "parcels": ["parcel:mug", "parcel:saucer", "parcel:spoon"],
    }
    once = len(ran.get("reserve", [])) == 1 and len(ran.get("charge", [])) == 1
    if result != expected or not once:
        print("!! unexpected outcome", file=sys.stderr)
        return 1
    print("== ok: the run finished on engine B, its steps ran on the workers, none twice")
    return 0


def run_demo() -> int:
    broker = os.environ.get(BROKER_ENV, "memory://")
    with tempfile.TemporaryDirectory() as tmp:
        return trio.run(main, broker, Path(tmp))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        trio.run(serve, sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(0)
    sys.exit(run_demo())
