"""Signals sent while no engine runs (docs/signals.md): a signal that a
waiting run's wait takes makes the run due in the store, so an engine that
opens later resumes it at once rather than when its reconcile pass finds
it; a signal no wait takes yet is buffered and wakes nothing. On a memory
store and on a SQLite file, under virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

app = td.App("signals-waiting")


@app.workflow()
async def waits(ctx: td.Context) -> str:
    got: str = await ctx.wait_signal("go")
    return got


@app.workflow()
async def sleeps_then_waits(ctx: td.Context) -> str:
    await ctx.sleep(3600)
    got: str = await ctx.wait_signal("go")
    return got


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> td.Store | str:
    """A memory store object engines and clients share, or the URL of a
    SQLite file each of them opens for itself (as separate processes do)."""
    if request.param == "memory":
        return td.MemoryStore()
    return f"sqlite:///{tmp_path / 'signals.db'}"


@asynccontextmanager
async def engine_on(store: td.Store | str) -> AsyncIterator[td.Engine]:
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        yield engine


async def suspended(store: td.Store | str, workflow: td.Workflow[..., str]) -> None:
    """Start a run ``r`` of ``workflow`` and leave it suspended, with no
    engine left running."""
    async with engine_on(store) as engine:
        await engine.start(workflow, run_id="r")
        await engine.drain()
        assert (await engine.get("r")).status == "suspended"


async def test_a_signal_sent_while_no_engine_runs_resumes_the_run_when_one_opens(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await suspended(store, waits)
    async with td.open_client(store, app=app, wall_clock=fixed_wall) as client:
        await client.signal("r", "go", "now")
        assert (await client.get("r")).wake_at == fixed_wall()
    async with engine_on(store) as engine:
        opened = trio.current_time()
        assert await engine.result("r") == "now"
        # Resumed at once, not by the reconcile pass a minute later.
        assert trio.current_time() == opened


async def test_a_buffered_signal_wakes_nothing(
    autojump_clock: trio.testing.MockClock, store: td.Store | str
) -> None:
    await suspended(store, sleeps_then_waits)
    async with td.open_client(store, app=app, wall_clock=fixed_wall) as client:
        woken_at = (await client.get("r")).wake_at
        await client.signal("r", "go", "later")
        assert (await client.get("r")).wake_at == woken_at
    async with engine_on(store) as engine:
        assert await engine.result("r") == "later"
        assert fixed_wall() == woken_at
