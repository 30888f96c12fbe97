"""Keyed entities on PostgreSQL: exclusive calls on one key from two
engines, each with its own connection (as separate processes would have),
leave exactly the sum in the key's state; a client's calls run on an engine
of another connection; an engine killed before its commit leaves the
effect once. They run in real time (PostgreSQL calls go to threads, which
`MockClock`'s autojump does not wait for)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory
from servers.postgres import scratch_schema
from test_entities import app, handler_runs, thousand_calls
from trio_durable._stores._ops import Op, PutValue, ReleaseRun

CALLS = 1000


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


# 73 s on a loaded two-core machine, bounded inside at 240 s.
@pytest.mark.timeout(600)
async def test_a_thousand_exclusive_calls_from_two_engines_leave_the_sum(
    url: str, open_test_engine: EngineFactory
) -> None:
    began = time.perf_counter()
    async with td.open_store(url) as one, td.open_store(url) as other:
        with trio.fail_after(240):
            ended = await thousand_calls(open_test_engine, (one, other), CALLS)
        batches = one.statistics().batches + other.statistics().batches
    elapsed = time.perf_counter() - began
    print(
        f"{CALLS} exclusive calls on one key, two engines: {elapsed:.1f} s, "
        f"{batches} store batches, ended by {ended}"
    )


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


async def test_an_engine_killed_before_the_commit_leaves_the_effect_once(
    url: str, open_test_engine: EngineFactory
) -> None:
    handler_runs.clear()
    engine_scope = trio.CancelScope()
    killed = False
    async with td.open_store(url) as doomed_store:
        apply = doomed_store.apply

        async def dying_apply(ops: Sequence[Op]) -> list[Any]:
            # The engine dies as it writes the new state: nothing of that
            # write is applied, and a dead engine gives back no lease.
            nonlocal killed
            if killed:
                return await apply([op for op in ops if not isinstance(op, ReleaseRun)])
            if any(isinstance(op, PutValue) for op in ops):
                killed = True
                engine_scope.cancel()
                await trio.lowlevel.checkpoint()
                raise AssertionError("the killed engine went on")
            return await apply(ops)

        doomed_store.apply = dying_apply  # type: ignore[method-assign]
        with engine_scope, trio.fail_after(30):
            async with open_test_engine(
                app, store=doomed_store, engine_id="doomed", lease_ttl=2
            ) as doomed:
                await doomed.entity("cart", "killed", call_id="kill-1").add("apple")
    assert killed
    assert handler_runs == {"add": 1}
    async with (
        td.open_store(url) as store,
        open_test_engine(
            app, store=store, engine_id="survivor", lease_ttl=2, reconcile_interval=1
        ) as survivor,
    ):
        with trio.fail_after(30):
            # Taken over once the dead engine's lease lapsed: the handler
            # runs again on the state as it was.
            assert await survivor.result("kill-1") == 1
            assert await survivor.entity("cart", "killed").add("pear") == 2
        value = await store.get_value("entity:cart", "killed")
        assert value is not None
        assert (json.loads(value.value), value.version) == ({"items": ["apple", "pear"]}, 2)
    assert handler_runs == {"add": 3}
