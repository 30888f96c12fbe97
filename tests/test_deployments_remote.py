"""Deployments of remote workflows under MockClock, on the memory broker
and the memory and SQLite stores: a pinned run's decision tasks wait
blocked, with the reason shown, while no worker of its build lives, and go
on once one does; queries and updates of a run go to the workers of the
build it is on."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, StoreEngineFactory, fixed_wall
from test_console_api import api
from trio_durable._brokers._base import Broker
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._front._open_worker import open_worker
from trio_durable._front._worker import Worker
from trio_durable._kernel._builds import run_build
from trio_durable._kernel._decision_record import DECISION

RECHECK = 5.0
BLOCKED_ON_A = "blocked: no live worker of build 'A' serves group 'orders'"


@pytest.fixture
def engine_on(open_store_engine: StoreEngineFactory) -> EngineFactory:
    """An engine on the memory store, then on SQLite."""

    @asynccontextmanager
    async def factory(app: td.App, **kwargs: Any) -> AsyncIterator[td.Engine]:
        async with open_store_engine(app, **kwargs) as (_, engine):
            yield engine

    return factory


def worker_app(build: str) -> td.App:
    """The workflows' bodies as build ``build`` has them: each says which
    build decided it."""
    app = td.App("shop")

    @app.workflow(group="orders", versioning="pinned")
    async def pinned(ctx: td.Context) -> list[str]:
        @ctx.query("build")
        def which() -> str:
            return build

        @ctx.update("note")
        def note(text: str) -> str:
            return f"{build}:{text}"

        await ctx.wait_signal("go")
        return [build]

    @app.workflow(group="orders")
    async def upgrading(ctx: td.Context) -> str:
        @ctx.query("build")
        def which() -> str:
            return build

        await ctx.wait_signal("go")
        return build

    return app


SERVICE = td.App("service")
SERVICE.remote_workflow("pinned", group="orders", versioning="pinned")
SERVICE.remote_workflow("upgrading", group="orders")


def worker(build: str, broker: Broker) -> AbstractAsyncContextManager[Worker]:
    return open_worker(
        worker_app(build),
        broker=broker,
        groups=["orders"],
        instance_id=f"w-{build}",
        wall_clock=fixed_wall,
        seed=0,
        build_id=build,
    )


async def serve_until(build: str, broker: Broker, stop: trio.Event) -> None:
    async with worker(build, broker):
        await stop.wait()


async def build_of(engine: td.Engine, run_id: str) -> str | None:
    return run_build({r.kind: r for r in await engine.store.get_records(run_id)})


async def test_a_pinned_runs_decisions_wait_blocked_until_a_worker_of_its_build_lives(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        engine_on(SERVICE, broker=broker, blocked_recheck=RECHECK) as engine,
        api(engine) as client,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, "B", broker, stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("pinned", "A")
        await engine.start("pinned", run_id="p1")
        await engine.drain()
        run = await engine.get("p1")
        assert run.status == "suspended"
        assert run.wake_at == WALL_START + RECHECK
        [decision] = [r for r in await engine.store.get_records("p1") if r.kind == DECISION]
        assert decision.status == "pending"
        assert decision.started_at is None
        assert decision.attempts == 0
        assert decision.mark is not None
        assert (decision.mark.code, decision.mark.message) == ("blocked", BLOCKED_ON_A)
        # Nothing was sent: no worker of B takes it, nothing waits on A's queue.
        assert broker.depth("orders") == broker.depth("orders+A") == 0

        # Shown where a run's pending reasons are.
        assert (await engine.run_detail("p1")).waiting == BLOCKED_ON_A
        assert (await engine.history("p1")).waiting == BLOCKED_ON_A
        page = (await client.get("/runs/p1")).text
        assert 'class="run-waiting reason"' in page
        assert "no live worker of build &#39;A&#39; serves group &#39;orders&#39;" in page
        assert (await client.get("/api/runs/p1")).json()["waiting"] == BLOCKED_ON_A

        # Still blocked at the recheck; never failed.
        await trio.sleep_until(RECHECK + 1.0)
        assert (await engine.get("p1")).status == "suspended"
        assert (await engine.run_detail("p1")).waiting == BLOCKED_ON_A

        nursery.start_soon(serve_until, "A", broker, stop)
        await trio.sleep_until(2 * RECHECK + 1.0)
        # Sent at the recheck after A came: the run now waits on its body.
        assert (await engine.run_detail("p1")).waiting is None
        await engine.signal("p1", "go", True)
        assert await engine.result("p1") == ["A"]
        [decision] = [r for r in await engine.store.get_records("p1") if r.kind == DECISION]
        assert decision.attempts == 2
        stop.set()


async def test_a_blocked_decision_of_a_cancelled_run_waits_too(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        engine_on(SERVICE, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, "A", broker, stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("pinned", "A")
        await engine.start("pinned", run_id="p1")
        await engine.drain()
        stop.set()
        # Past the engine's memory of the live workers (at most a second).
        await trio.sleep(1.0)
        # Its build's workers went away: the cancel's cleanup task waits.
        await engine.cancel("p1")
        await trio.sleep(1.0)
        # Its cleanup waits, the run suspended until the recheck.
        assert (await engine.get("p1")).status == "suspended"
        assert (await engine.run_detail("p1")).waiting == BLOCKED_ON_A
        again = trio.Event()
        nursery.start_soon(serve_until, "A", broker, again)
        with pytest.raises(td.RunCancelled):
            await engine.result("p1")
        again.set()


async def test_queries_and_updates_go_to_the_build_the_run_is_on(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        engine_on(SERVICE, broker=broker) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, "A", broker, stop)
        nursery.start_soon(serve_until, "B", broker, stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("pinned", "A")
        await engine.set_current_build("upgrading", "A")
        await engine.start("pinned", run_id="p1")
        await engine.start("upgrading", run_id="u1")
        await engine.drain()
        await engine.set_current_build("pinned", "B")
        await engine.set_current_build("upgrading", "B")
        # Every query goes to A's workers, whichever of the two would
        # have taken it off the shared queue before.
        for _ in range(4):
            assert await engine.query("p1", "build") == "A"
            assert await engine.query("u1", "build") == "A"
        # The update is validated on A, and applied by A.
        assert await engine.update("p1", "note", "x") == "A:x"
        # The upgrading run moves at its next turn; its queries follow.
        await engine.signal("u1", "go", True)
        assert await engine.result("u1") == "B"
        assert await build_of(engine, "u1") == "B"
        assert await engine.query("u1", "build") == "B"
        assert await engine.query("p1", "build") == "A"
        stop.set()


async def test_a_query_of_a_run_whose_build_has_no_live_worker_fails_at_once(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        engine_on(SERVICE, broker=broker) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, "A", broker, stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("pinned", "A")
        await engine.start("pinned", run_id="p1")
        await engine.drain()
        stop.set()
        again = trio.Event()
        nursery.start_soon(serve_until, "B", broker, again)
        await trio.sleep(1.0)
        started = trio.current_time()
        with pytest.raises(td.QueryFailed, match="no live worker of build 'A'") as caught:
            await engine.query("p1", "build")
        assert caught.value.code == "blocked"
        assert trio.current_time() == started
        # Nothing was left on a queue for a worker to answer to nobody.
        assert broker.depth("orders+A") == broker.depth("orders+B") == 0
        again.set()
