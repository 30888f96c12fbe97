"""The code of docs/queries-and-updates.md runs as the page says: each of
its blocks is this module's code (a test checks it), and the tests below
run them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "queries-and-updates.md"

# -- the workflow ------------------------------------------------------------------------

app = td.App("orders")


@app.step()
async def charge(order_id: str, total: int) -> str:
    return f"receipt-{order_id}-{total}"


def check_quantity(sku: str, quantity: int) -> None:
    if quantity <= 0:
        raise td.FatalError("quantity must be positive", code="bad_quantity")


@app.workflow()
async def order(ctx: td.Context, order_id: str) -> dict[str, Any]:
    lines: dict[str, int] = {}
    status = {"stage": "open"}

    @ctx.query("lines")
    def get_lines() -> dict[str, int]:
        return lines

    @ctx.query("stage")
    def get_stage() -> str:
        return status["stage"]

    @ctx.update("add_line", validator=check_quantity)
    def add_line(sku: str, quantity: int) -> int:
        lines[sku] = lines.get(sku, 0) + quantity
        return sum(lines.values())

    ctx.set_event("stage", "open")
    await ctx.wait_signal("submit", timeout=86_400)
    status["stage"] = "submitted"
    ctx.set_event("stage", "submitted")
    receipt = await ctx.step(charge, order_id, sum(lines.values()))
    ctx.set_event("receipt", receipt)
    return {"lines": lines, "receipt": receipt}


# -- asking and changing it -----------------------------------------------------------


async def shop(engine: td.Engine) -> dict[str, Any]:
    await engine.start(order, "o-1", run_id="order-o-1")
    assert await engine.get_event("order-o-1", "stage") == "open"
    assert await engine.update("order-o-1", "add_line", "apple", 3) == 3
    assert await engine.update("order-o-1", "add_line", "pear", 2) == 5
    assert await engine.query("order-o-1", "lines") == {"apple": 3, "pear": 2}
    try:
        await engine.update("order-o-1", "add_line", "plum", 0)
    except td.UpdateRejected as exc:
        print("rejected:", exc.code)  # "bad_quantity"; nothing was stored
    await engine.signal("order-o-1", "submit")
    receipt = await engine.get_event("order-o-1", "receipt", timeout=60)
    assert receipt == "receipt-o-1-5"
    result: dict[str, Any] = await engine.result("order-o-1")
    return result


# -- from another process ----------------------------------------------------------------


async def from_a_client(store_url: str) -> int:
    async with td.open_client(store_url, app=app) as client:
        total: int = await client.update("order-o-2", "add_line", "fig", 4)
        assert await client.query("order-o-2", "stage") == "open"
        return total


async def stage_without_the_app(store_url: str) -> Any:
    async with td.open_client(store_url) as client:  # no app: get_event only
        return await client.get_event("order-o-2", "stage", timeout=5)


# -- the tests -----------------------------------------------------------------------------


async def test_the_shop_runs(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(app, wall_clock=fixed_wall) as engine:
        assert await shop(engine) == {
            "lines": {"apple": 3, "pear": 2},
            "receipt": "receipt-o-1-5",
        }


async def test_a_client_updates_a_run_an_engine_holds(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'orders.db'}"
    async with td.open_engine(app, store=url, wall_clock=fixed_wall) as engine:
        await engine.start(order, "o-2", run_id="order-o-2")
        await engine.drain()
        assert await from_a_client(url) == 4
        assert await stage_without_the_app(url) == "open"
        assert await engine.query("order-o-2", "lines") == {"fig": 4}


async def test_get_event_times_out_with_none(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(app, wall_clock=fixed_wall) as engine:
        await engine.start(order, "o-3", run_id="order-o-3")
        start = trio.current_time()
        assert await engine.get_event("order-o-3", "receipt", timeout=60) is None
        assert trio.current_time() == start + 60


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
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 3
    source = _code(Path(__file__).read_text(encoding="utf-8"))
    for block in blocks:
        assert _code(block) in source, block


@pytest.mark.parametrize("name", ["guide.md"])
def test_the_page_is_linked(name: str) -> None:
    assert "queries-and-updates.md" in (ROOT / "docs" / name).read_text(encoding="utf-8")
