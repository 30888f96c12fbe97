"""Updates accepted while no engine runs (docs/queries-and-updates.md):
accepting an update makes its run due in the store, so an engine that
opens later applies it at once, and a caller asking again under the same
id gets its answer. An update accepted while the run waits is applied in
the run's next turn before the operation it waits in returns, whether a
signal settled that operation before or after the update was accepted.
On a memory store and on a SQLite file, under virtual time."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from trio_durable._stores._ops import PutValue

app = td.App("inbox")

_ANSWER_WITHIN = 30.0
"""Virtual seconds an answer may take: less than the reconcile pass's interval
(60 s), the safety net that wakes a run nothing woke."""


@app.workflow()
async def tally(ctx: td.Context) -> int:
    total = [0]

    @ctx.update("add")
    def add(amount: int) -> int:
        total[0] += amount
        return total[0]

    @ctx.query("total")
    def current() -> int:
        return total[0]

    await ctx.wait_signal("go")
    return total[0]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> td.Store | str:
    """A memory store object several engines and clients share, or the URL of
    a SQLite file each of them opens for itself (as separate processes do)."""
    if request.param == "memory":
        return td.MemoryStore()
    return f"sqlite:///{tmp_path / 'inbox.db'}"


@asynccontextmanager
async def engine_on(store: td.Store | str) -> AsyncIterator[td.Engine]:
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        yield engine


@asynccontextmanager
async def client_on(store: td.Store | str) -> AsyncIterator[td.Client]:
    async with td.open_client(store, app=app, wall_clock=fixed_wall) as client:
        yield client


async def waiting_run(store: td.Store | str) -> None:
    """Start a run of ``tally`` and leave it waiting for its signal, with no
    engine left running."""
    async with engine_on(store) as engine:
        await engine.start(tally, run_id="t")
        await engine.drain()
        assert (await engine.get("t")).status == "suspended"


async def leave_update(client: td.Client, amount: int) -> None:
    """Send the update ``u1`` and give up waiting for its answer: no engine
    runs to apply it."""
    with trio.move_on_after(5) as gave_up:
        await client.update("t", "add", amount, update_id="u1")
    assert gave_up.cancelled_caught
    [left] = await client.store.list_values("update:t", prefix="inbox/")
    assert left.key == "inbox/u1"


async def test_an_update_left_while_no_engine_runs_is_applied_when_one_opens(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await waiting_run(store)
    async with client_on(store) as client:
        await leave_update(client, 5)
        async with engine_on(store) as engine:
            opened = trio.current_time()
            # Nothing but the update wakes the run: the engine finds it due.
            await engine.drain()
            assert await client.store.list_values("update:t", prefix="inbox/") == []
            assert await engine.query("t", "total") == 5
            # Asked again under the same id, it is answered, and not applied again.
            with trio.fail_after(_ANSWER_WITHIN):
                assert await client.update("t", "add", 5, update_id="u1") == 5
            assert trio.current_time() == opened
            assert await client.query("t", "total") == 5
            await client.signal("t", "go")
            assert await client.result("t") == 5


async def test_asking_again_before_an_engine_opens_is_answered_when_it_opens(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await waiting_run(store)
    async with client_on(store) as client:
        await leave_update(client, 5)
        answers: list[Any] = []

        async def ask_again() -> None:
            answers.append(await client.update("t", "add", 5, update_id="u1"))
            answers.append(trio.current_time())

        with trio.fail_after(_ANSWER_WITHIN):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask_again)
                await trio.testing.wait_all_tasks_blocked()
                assert answers == []
                async with engine_on(store):
                    opened = trio.current_time()
                    await trio.testing.wait_all_tasks_blocked()
        assert answers == [5, opened]


async def test_an_update_accepted_before_the_signal_is_applied_before_the_wait_returns(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await waiting_run(store)
    async with client_on(store) as client:
        await leave_update(client, 5)
        await client.signal("t", "go")
        async with engine_on(store) as engine:
            with trio.fail_after(_ANSWER_WITHIN):
                assert await engine.result("t") == 5
                assert await client.update("t", "add", 5, update_id="u1") == 5
            assert await client.query("t", "total") == 5


async def test_an_update_accepted_after_the_signal_is_applied_before_the_wait_returns(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await waiting_run(store)
    async with client_on(store) as client:
        await client.signal("t", "go")
        # No turn took the signal yet: the run still waits, and takes updates.
        await leave_update(client, 5)
        async with engine_on(store) as engine:
            with trio.fail_after(_ANSWER_WITHIN):
                assert await engine.result("t") == 5
                assert await client.update("t", "add", 5, update_id="u1") == 5
            assert await client.query("t", "total") == 5


async def test_asking_again_wakes_a_run_nothing_woke_for_its_update(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await waiting_run(store)
    async with engine_on(store) as engine:
        # An update accepted without the run's wake-up, as a version of the
        # engine that did not write one left it.
        entry = {"name": "add", "args": "[5]", "at": fixed_wall()}
        await engine.store.apply(
            [
                PutValue("update:t", "record/u1", json.dumps({**entry, "status": "accepted"}), 0.0),
                PutValue("update:t", "inbox/u1", json.dumps(entry), 0.0),
            ]
        )
        await engine.drain()
        assert await engine.query("t", "total") == 0
        asked = trio.current_time()
        with trio.fail_after(_ANSWER_WITHIN):
            assert await engine.update("t", "add", 5, update_id="u1") == 5
        assert trio.current_time() == asked
        await engine.signal("t", "go")
        assert await engine.result("t") == 5
