"""Remote workflows: an engine that holds no workflow code (docs/remote-workflows.md).

Two sides, in one process here to keep the demo short:

- the **engine side** (this module): an app that holds no workflow body and
  no step, only ``checkout`` declared by name, and an engine on a SQLite
  file. It starts ``checkout`` and runs it although it never imports the
  code: it sends each turn to the workers as a decision task. Its child
  ``ship`` is not even declared: live workers announce it, and the engine
  serves it by convention;
- the **worker side** (examples/shop_workers.py, imported only by
  `serve_workers`): the workflow code, with two workers of its app, one for
  the ``orders`` and ``ship`` groups (the workflows' decisions and their
  local steps) and one for ``payments`` (a remote step).

Engine and workers share a `td.MemoryBroker`; in production they are
separate processes on a real broker (``trio-durable engine service:app`` on
one side, ``trio-durable worker shop_workers:app --groups orders,ship`` on
the other). The checkout reserves (a local step, run on the orders worker),
charges (a remote step of the payments group), sleeps on a durable timer (the
engine keeps it) and waits for a child workflow (``ship``); the demo prints
where each step ran, the result and the run's checkpoints, and checks them.

Run it with ``python examples/remote_workflows_demo.py [path/to/remote-workflows.db]``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

import trio_durable as td

engine_app = td.App("service")
"""The engine's app: no workflow body, no step."""
checkout = engine_app.remote_workflow("checkout", group="orders")
"""Declared by name: its body lives on the workers of ``orders``."""


async def serve_workers(broker: td.Broker, *, task_status: trio.TaskStatus[None]) -> None:
    """The worker side: the one place that imports the workflow code."""
    import shop_workers

    async with trio.open_nursery() as nursery:
        await nursery.start(shop_workers.serve, "orders", shop_workers.ORDERS_GROUPS, broker)
        await nursery.start(shop_workers.serve, "payments", shop_workers.PAYMENTS_GROUPS, broker)
        task_status.started()


async def main(path: str) -> int:
    bodies = [wf.name for wf in engine_app.workflows if not wf.remote]
    print(f"engine app {engine_app.name!r}: workflow bodies {bodies}, steps {engine_app.steps}")
    broker = td.MemoryBroker()
    async with trio.open_nursery() as workers:
        await workers.start(serve_workers, broker)
        async with td.open_engine(engine_app, store=f"sqlite:///{path}", broker=broker) as engine:
            handle = await engine.start(checkout, "o-1", 1200, run_id="o-1")
            print(f"started {handle.id!r}: workflow {handle.workflow!r}, remote: {checkout.remote}")
            with trio.fail_after(30):
                result = await handle.result()
            print(f"o-1 -> {result}")
            checkpoints = await engine.store.get_checkpoints("o-1")
            shown = [f"{cp.seq} {cp.kind} {cp.name}" for cp in checkpoints]
            print(f"o-1's checkpoints: {', '.join(shown)}")
            # The run's decision record counts the decision tasks it took.
            [decision] = [r for r in await engine.store.get_records("o-1") if r.kind == "decision"]
            print(f"o-1 took {decision.attempts} decision tasks, sent to {decision.group!r}")
            [child] = [cp.child_id for cp in checkpoints if cp.kind == "child"]
            assert child is not None
            [decided] = [r for r in await engine.store.get_records(child) if r.kind == "decision"]
            print(f"its child {child!r} (ship, declared nowhere) was decided on {decided.group!r}")
            run = await engine.get("o-1")
        workers.cancel_scope.cancel()
    expected = {"hold": "hold-o-1", "receipt": "receipt-o-1-1200", "parcel": "parcel-o-1"}
    if run.status != "completed" or result != expected:
        print(f"!! unexpected outcome: {run.status}, {result}", file=sys.stderr)
        return 1
    print("ok: the engine ran checkout without its code; the workers decided every turn")
    return 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        db = sys.argv[1] if sys.argv[1:] else str(Path(folder) / "remote-workflows.db")
        sys.exit(trio.run(main, db))
