"""Run controls across two engines sharing one PostgreSQL database: a chain
continued as new followed from the other engine, a deadline fired by the
other engine after the first stopped, and a signal key delivered once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema

app = td.App("controls_pg")

undone: list[str] = []


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    undone.clear()
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


@app.step()
async def undo(item: str) -> None:
    undone.append(item)


@app.step()
async def book(item: str) -> str:
    return item


@app.workflow()
async def rounds(ctx: td.Context, round: int) -> list[Any]:
    got = await ctx.wait_signal("next")
    if round < 3:
        ctx.continue_as_new(round + 1)
    return [round, got]


@app.workflow()
async def stay(ctx: td.Context) -> str:
    await ctx.step(book, "room", compensate=undo)
    await ctx.sleep(3600)
    return "stayed"


@app.workflow()
async def inbox(ctx: td.Context) -> list[Any]:
    got: list[Any] = [await ctx.wait_signal("note")]
    try:
        got.append(await ctx.wait_signal("note", timeout=1.0))
    except td.SignalTimeout:
        got.append("timed out")
    return got


@app.workflow()
async def send_once(ctx: td.Context, target: str, payload: str) -> str:
    await ctx.signal(target, "note", payload, idempotency_key="the-key")
    return "sent"


async def _status(engine: td.Engine, run_id: str) -> str:
    try:
        return (await engine.get(run_id)).status
    except td.RunNotFoundError:
        return "missing"


async def test_a_chain_is_followed_from_the_other_engine(url: str) -> None:
    with trio.fail_after(60):
        async with (
            td.open_engine(app, store=url, seed=1) as first,
            td.open_engine(app, store=url, seed=2) as second,
        ):
            await first.start(rounds, 1, run_id="c")
            for n, payload in enumerate(("a", "b", "c"), start=1):
                run_id = "c" if n == 1 else f"c.gen.{n}"
                while await _status(second, run_id) != "suspended":  # noqa: ASYNC110
                    await trio.sleep(0.05)
                await (first if n % 2 else second).signal("c", "next", payload)
            assert await second.result("c") == [3, "c"]
            assert await first.result("c.gen.2") == [3, "c"]


async def test_a_deadline_fires_on_the_other_engine_after_the_first_stopped(url: str) -> None:
    with trio.fail_after(60):
        async with td.open_engine(app, store=url, seed=1) as first:
            await first.start(stay, run_id="s", timeout=1.5)
            while await _status(first, "s") != "suspended":  # noqa: ASYNC110
                await trio.sleep(0.05)
        async with td.open_engine(app, store=url, seed=2) as second:
            with pytest.raises(td.RunCancelled) as info:
                await second.result("s")
            assert info.value.code == "timeout"
            assert undone == ["room"]


async def test_one_key_is_delivered_once_across_engines(url: str) -> None:
    with trio.fail_after(60):
        async with (
            td.open_engine(app, store=url, seed=1) as first,
            td.open_engine(app, store=url, seed=2) as second,
        ):
            await first.start(inbox, run_id="i")
            await first.start(send_once, "i", "from first", run_id="a")
            await second.start(send_once, "i", "from second", run_id="b")
            assert await first.result("a") == "sent"
            assert await second.result("b") == "sent"
            got = await second.result("i")
            assert got[0] in ("from first", "from second")
            assert got[1] == "timed out"
            keys = await first.store.list_values("signal-key")
            assert [value.key for value in keys] == ["the-key"]
