"""Cross-process wake-ups, as scenarios any SQL store runs: a write of a
client (or of an engine whose app lacks the workflow) wakes the run on the
engine that serves it at once, far sooner than a lease (30 s) or a
reconcile pass (60 s) would. tests/test_wakeups.py runs them on SQLite,
tests/integration/test_postgres_wakeups.py on PostgreSQL."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing

import trio_durable as td
from cli_processes import WITHIN
from trio_durable._kernel._wakes import announces_ends

TESTS: Final = Path(__file__).resolve().parent

BOUND: Final = 3.0
"""Seconds within which a wake must land: a tenth of the lease."""

app = td.App("wakeups")
elsewhere = td.App("elsewhere")
"""An app without `app`'s workflows, for an engine that lacks them."""

calls: Counter[str] = Counter()


@app.workflow()
async def wait_go(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


@app.workflow()
async def sleeper(ctx: td.Context) -> str:
    await ctx.sleep(3600)
    return "slept"


@app.step()
async def flaky_step(key: str) -> str:
    calls[key] += 1
    if calls[key] == 1:
        raise td.FatalError("first call fails", code="first")
    return f"{key} ok"


@app.workflow()
async def flaky(ctx: td.Context, key: str) -> str:
    return await ctx.step(flaky_step, key)


async def in_another_process(url: str, action: str, run_id: str) -> None:
    """Run the client of tests/wake_client.py in a process of its own."""
    with trio.fail_after(WITHIN):
        await trio.run_process([sys.executable, str(TESTS / "wake_client.py"), url, action, run_id])


async def client_signal(url: str, *, process: bool) -> None:
    async with td.open_engine(app, store=url, engine_id="serving") as engine:
        await engine.start(wait_go, run_id="w")
        await engine.drain()
        assert (await engine.get("w")).status == "suspended"
        if process:
            await in_another_process(url, "signal", "w")
        else:
            async with td.open_client(url) as client:
                await client.signal("w", "go", {"from": "another process"})
        with trio.fail_after(BOUND):
            assert await engine.result("w") == {"from": "another process"}


async def client_cancel(url: str, *, process: bool) -> None:
    async with td.open_engine(app, store=url, engine_id="serving") as engine:
        await engine.start(sleeper, run_id="s")
        await engine.drain()
        if process:
            await in_another_process(url, "cancel", "s")
        else:
            async with td.open_client(url) as client:
                await client.cancel("s")
        with trio.fail_after(BOUND), pytest.raises(td.RunCancelled):
            await engine.result("s")


async def client_retry(url: str, *, process: bool) -> None:
    calls.clear()
    async with td.open_engine(app, store=url, engine_id="serving") as engine:
        await engine.start(flaky, "k", run_id="f")
        with pytest.raises(td.RunFailed):
            await engine.result("f")
        if process:
            await in_another_process(url, "retry", "f")
        else:
            async with td.open_client(url) as client:
                assert (await client.retry("f")).status == "pending"
        with trio.fail_after(BOUND):
            assert await engine.result("f") == "k ok"


async def client_start(url: str, *, process: bool) -> None:
    async with td.open_engine(app, store=url, engine_id="serving") as engine:
        if process:
            await in_another_process(url, "start", "n")
        else:
            async with td.open_client(url) as client:
                handle = await client.start("wait_go", run_id="n")
                assert (handle.status, handle.lease_owner) == ("pending", None)
        async with td.open_client(url) as client:
            # Buffered if the run does not wait yet: either way it ends.
            await client.signal("n", "go", 1)
            with trio.fail_after(BOUND):
                assert await client.result("n") == 1
        assert (await engine.get("n")).version == "1"


async def client_result_is_woken(url: str) -> None:
    """A client's `result` learns of the end from the engine's
    announcement: on a store whose writers announce ends, a client never
    reads the run again unless told, so nothing else could wake it (the
    bound below only keeps a lost announcement from hanging the test)."""
    async with (
        td.open_engine(app, store=url, engine_id="serving") as engine,
        td.open_client(url) as client,
    ):
        assert announces_ends(client.store)
        await engine.start(wait_go, run_id="r")
        await engine.drain()
        got: list[Any] = []
        done = trio.Event()

        async def wait() -> None:
            got.append(await client.result("r"))
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(BOUND):
                await client.signal("r", "go", "done")
                await done.wait()
        assert got == ["done"]


async def engine_without_the_workflow_signals(url: str) -> None:
    """An engine whose app lacks the workflow signals a run: the engine that
    has it runs it at once (not after the lacking engine's 60 s backoff)."""
    async with (
        td.open_engine(app, store=url, engine_id="serving") as serving,
        td.open_engine(elsewhere, store=url, engine_id="lacking") as lacking,
    ):
        await serving.start(wait_go, run_id="x")
        await serving.drain()
        await lacking.signal("x", "go", "from a stranger")
        with trio.fail_after(BOUND):
            assert await serving.result("x") == "from a stranger"
        # The lacking engine never took a turn of it.
        assert lacking.statistics().turns == 0
