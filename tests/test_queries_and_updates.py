"""Queries, updates and published values (docs/queries-and-updates.md):
a query answers from the run's replayed state and writes nothing, an update
is validated, stored, applied in the run's next turn, replayed identically
and answered, and ``get_event`` waits for what ``ctx.set_event`` published.
On the memory store and on SQLite (two engines on one file, and a client)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

app = td.App("handlers")

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@app.step()
async def record(note: str) -> str:
    ran.append(note)
    return note


def positive(amount: int) -> None:
    if amount <= 0:
        raise td.FatalError("the amount must be positive", code="not_positive")


@app.workflow()
async def cart(ctx: td.Context, owner: str) -> dict[str, Any]:
    items: list[int] = []
    state = {"stage": "open"}

    @ctx.query("total")
    def total() -> int:
        return sum(items)

    @ctx.query("stage")
    def stage() -> str:
        return state["stage"]

    @ctx.query("items_over")
    def items_over(limit: int) -> list[int]:
        return [item for item in items if item > limit]

    @ctx.update("add", validator=positive)
    def add(amount: int) -> int:
        items.append(amount)
        return sum(items)

    @ctx.update("explode")
    def explode() -> None:
        items.append(1000)
        raise ValueError("boom")

    await ctx.step(record, f"opened by {owner}")
    ctx.set_event("stage", "open")
    await ctx.wait_signal("checkout")
    state["stage"] = "checked out"
    await ctx.set_event("stage", "checked out")
    await ctx.step(record, f"charged {sum(items)}")
    await ctx.sleep(60)
    return {"items": items, "total": sum(items)}


def stores(tmp_path: Path) -> list[str]:
    return ["memory://", f"sqlite:///{tmp_path / 'handlers.db'}"]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'handlers.db'}"


@asynccontextmanager
async def engine_on(url: str, seed: int = 0, **kwargs: Any) -> AsyncIterator[td.Engine]:
    async with td.open_engine(app, store=url, seed=seed, wall_clock=fixed_wall, **kwargs) as e:
        yield e


async def test_query_update_and_events(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    async with engine_on(store_url) as engine:
        await engine.start(cart, "ann", run_id="c")
        await engine.drain()
        assert await engine.query("c", "total") == 0
        assert await engine.get_event("c", "stage") == "open"
        assert await engine.update("c", "add", 5) == 5
        assert await engine.update("c", "add", 7) == 12
        assert await engine.query("c", "total") == 12
        assert await engine.query("c", "items_over", 6) == [7]
        # A query writes nothing, and runs no step.
        assert ran == ["opened by ann"]
        await engine.signal("c", "checkout")
        await engine.drain()
        assert await engine.get_event("c", "stage") == "checked out"
        assert await engine.query("c", "stage") == "checked out"
        assert await engine.result("c") == {"items": [5, 7], "total": 12}
        assert ran == ["opened by ann", "charged 12"]
