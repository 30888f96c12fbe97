"""Queries, updates and published values over a real RabbitMQ and NATS: a
run whose steps run on a separate worker is queried, updated and read from
a client of the engine's SQLite file (docs/queries-and-updates.md)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
import trio

import trio_durable as td

EVENTUALLY: Final = 60.0

app = td.App("queries-brokers")


@app.step(group="pricing")
async def price(sku: str) -> int:
    return 10 * len(sku)


def known_sku(sku: str) -> None:
    if not sku.isalpha():
        raise td.FatalError(f"no such sku: {sku!r}", code="unknown_sku")


@app.workflow()
async def basket(ctx: td.Context, owner: str) -> int:
    skus: list[str] = []

    @ctx.query("skus")
    def listed() -> list[str]:
        return skus

    @ctx.update("add", validator=known_sku)
    def add(sku: str) -> int:
        skus.append(sku)
        return len(skus)

    await ctx.step(price, owner)  # a remote step before the first wait
    ctx.set_event("stage", "open")
    await ctx.wait_signal("checkout", timeout=3600)
    prices = await ctx.all(price, list(skus))
    ctx.set_event("total", sum(prices))
    return sum(prices)


@pytest.mark.parametrize("server", ["rabbitmq", "nats"])
async def test_a_client_queries_and_updates_a_run_with_remote_steps(
    real_server: Callable[[str], str], server: str, tmp_path: Path
) -> None:
    url = real_server(server)
    namespace = f"q{secrets.token_hex(4)}"
    store = f"sqlite:///{tmp_path / 'basket.db'}"
    with trio.fail_after(EVENTUALLY):
        async with (
            td.open_engine(app, store=store, broker=url, seed=3) as engine,
            td.open_worker(app, broker=url, groups=[f"pricing@{namespace}"]),
            td.open_client(store, app=app) as client,
        ):
            run = await client.start(basket, "ann", run_id=f"{namespace}.b", namespace=namespace)
            assert await client.get_event(run.id, "stage") == "open"
            assert await client.update(run.id, "add", "apple") == 1
            assert await client.update(run.id, "add", "fig", update_id=f"{run.id}.fig") == 2
            assert await client.update(run.id, "add", "fig", update_id=f"{run.id}.fig") == 2
            with pytest.raises(td.UpdateRejected) as rejected:
                await client.update(run.id, "add", "p34r")
            assert rejected.value.code == "unknown_sku"
            assert await client.query(run.id, "skus") == ["apple", "fig"]
            assert await engine.query(run.id, "skus") == ["apple", "fig"]
            await client.signal(run.id, "checkout")
            assert await client.get_event(run.id, "total", timeout=EVENTUALLY) == 80
            assert await client.result(run.id) == 80
            assert await client.query(run.id, "skus") == ["apple", "fig"]
            with pytest.raises(td.InvalidRunStateError):
                await client.update(run.id, "add", "kiwi")
