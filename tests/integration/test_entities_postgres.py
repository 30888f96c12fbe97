"""Keyed entities on PostgreSQL: exclusive calls on one key from two
engines, each with its own connection (as separate processes would have),
leave exactly the sum in the key's state; a client's calls run on an engine
of another connection; an engine killed before its commit leaves the
effect once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory
from servers.postgres import scratch_schema
from test_entities import app, thousand_calls

CALLS = 1000


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_a_thousand_exclusive_calls_from_two_engines_leave_the_sum(
    url: str, open_test_engine: EngineFactory
) -> None:
    began = time.perf_counter()
    async with td.open_store(url) as one, td.open_store(url) as other:
        with trio.fail_after(240):
            # Calls waiting in the key's line look at it again every
            # ``blocked_recheck`` seconds in case their wake was lost; a
            # thousand of them looking every 5 s of real time swamp the
            # database, while each is let in by a release's wake anyway.
            ended = await thousand_calls(
                open_test_engine, (one, other), CALLS, blocked_recheck=300.0
            )
    elapsed = time.perf_counter() - began
    print(f"{CALLS} exclusive calls on one key, two engines: {elapsed:.1f} s, ended by {ended}")


async def test_a_client_calls_an_entity_that_an_engine_runs(
    url: str, open_test_engine: EngineFactory
) -> None:
    async with (
        td.open_store(url) as engine_store,
        open_test_engine(app, store=engine_store),
        td.open_client(url, app=app) as client,
    ):
        cart = client.entity("cart", "pg")
        with trio.fail_after(30):
            assert await cart.add("fig") == 1
            assert await cart.add("date") == 2
        assert await cart.items_now() == ["fig", "date"]
        with pytest.raises(td.EntityKeyError):
            client.entity("cart", 1)
