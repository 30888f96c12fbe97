"""The code of docs/remote-workflows.md runs as the page says: its blocks are
this module's code (a test checks that each block is found here, or is the
example's file as it is), and the tests below run them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import trio

import trio_durable as td

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "remote-workflows.md"
EXAMPLES = ROOT / "examples"

# -- the worker side ("Declaring: on the workers") ------------------------------------

app = td.App("shop")


@app.step(group="payments")
async def charge(order: str) -> str:
    return f"charged-{order}"


@app.step()  # a local step: runs on the worker, during a decision
async def reserve(order: str) -> str:
    return f"reserved-{order}"


@app.workflow(group="orders")  # decided by the workers of "orders"
async def checkout(ctx: td.Context, order: str) -> dict[str, str]:
    reserved = await ctx.step(reserve, order)
    charged = await ctx.step(charge, order)
    return {"reserved": reserved, "charged": charged}


@app.workflow()  # no group: decided by the workers of the group "ship"
async def ship(ctx: td.Context, order: str) -> str:
    return f"shipped-{order}"


assert checkout.group == "orders"
assert ship.group is None


async def serve_shop(broker: td.Broker, *, task_status: trio.TaskStatus[None]) -> None:
    async with td.open_worker(app, broker=broker, groups=["orders", "payments", "ship"]):
        task_status.started()
        await trio.sleep_forever()


# -- the engine side ("Declaring: on the engine") -------------------------------------

service = td.App("service")
checkout_by_name = service.remote_workflow("checkout", group="orders")


async def run_checkout(broker: td.Broker, store: str) -> Any:
    async with td.open_engine(service, store=store, broker=broker) as engine:
        handle = await engine.start(checkout_by_name, "o-1")  # or engine.start("checkout", "o-1")
        return await handle.result()


async def run_by_convention(broker: td.Broker, store: str) -> Any:
    async with td.open_engine(td.App("bare"), store=store, broker=broker) as engine:
        handle = await engine.start("ship", "o-1")  # declared nowhere: live workers announce it
        return await handle.result()


# -- the tests -------------------------------------------------------------------------


async def test_a_workflow_declared_by_name_runs(autojump_clock: trio.testing.MockClock) -> None:
    broker = td.MemoryBroker()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_shop, broker)
        assert await run_checkout(broker, "memory://") == {
            "reserved": "reserved-o-1",
            "charged": "charged-o-1",
        }
        nursery.cancel_scope.cancel()


async def test_a_workflow_declared_nowhere_is_served_by_convention(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_shop, broker)
        assert await run_by_convention(broker, "memory://") == "shipped-o-1"
        nursery.cancel_scope.cancel()


async def test_one_app_for_both_roles_runs_its_workflow_remotely(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, serve=["orders", "payments"]) as engine:
        handle = await engine.start(checkout, "o-2")
        assert await handle.result() == {"reserved": "reserved-o-2", "charged": "charged-o-2"}
        # Its local step ran in a decision: recorded at seq 1, as a local step.
        [reserved, charged] = await engine.store.get_checkpoints(handle.id)
        assert (reserved.name, charged.name, charged.kind) == ("reserve", "charge", "remote")


def _code(text: str) -> str:
    """``text`` without its import lines and blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    page = PAGE.read_text(encoding="utf-8")
    included = re.findall(r"<!-- (examples/\S+)(?:: [^>]*)? -->\n```python\n(.*?)```", page, re.S)
    assert [name for name, _ in included] == [
        "examples/shop_workers.py",
        "examples/remote_workflows_demo.py",
    ]
    for name, block in included:
        assert block in (ROOT / name).read_text(encoding="utf-8"), name
    blocks = re.findall(r"(?<!-->\n)```python\n(.*?)```", page, re.S)
    assert blocks
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block


async def test_a_client_start_of_a_workflow_served_by_convention_runs_at_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    # "client.start starts any name": the engine takes the run as soon as
    # the client's write is announced (here through SQLite's watch), as it
    # does for its own workflows.
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    broker = td.MemoryBroker()
    async with trio.open_nursery() as nursery:
        await nursery.start(serve_shop, broker)
        async with (
            td.open_engine(td.App("bare"), store=store, broker=broker),
            td.open_client(store) as client,
        ):
            started = trio.current_time()
            await client.start("ship", "o-3", run_id="o-3")
            assert await client.result("o-3") == "shipped-o-3"
            assert trio.current_time() - started < 5.0
        nursery.cancel_scope.cancel()
