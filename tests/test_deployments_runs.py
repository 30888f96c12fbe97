"""Deployments over a run's life under MockClock, on the memory broker and
the memory and SQLite stores: runs made active again (a retry, a retry of
many, a retry from a seq, a fork) are listed under their build again; a
new generation takes the current build; a fan's window sends its members
to the build the parent is on; a ramp changed while runs are in flight
moves none of them; a run keeps the versioning it started with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, StoreEngineFactory, fixed_wall
from trio_durable._brokers._base import Broker
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._features.deployments._deployments import BUILD_RUNS, Deployment, ramp_share
from trio_durable._front._open_worker import open_worker
from trio_durable._front._worker import Worker
from trio_durable._kernel._builds import placement

failing = {"on": True}
gate = trio.Event()


@pytest.fixture(autouse=True)
def _reset() -> None:
    global gate
    failing["on"] = True
    gate = trio.Event()
    gate.set()


def build_app(build: str) -> td.App:
    app = td.App("shop")

    @app.step(group="g", name="which")
    async def which() -> str:
        return build

    @app.step(group="g", name="slow")
    async def slow(i: int) -> str:
        await trio.sleep(100)
        return build

    @app.step(group="g", name="flaky")
    async def flaky() -> str:
        if failing["on"]:
            raise td.FatalError("down")
        await gate.wait()
        return build

    @app.workflow(versioning="pinned")
    async def pinned(ctx: td.Context) -> list[str]:
        return [await ctx.step(which), await ctx.step(flaky)]

    @app.workflow()
    async def upgrading(ctx: td.Context) -> list[str]:
        return [await ctx.step(which), await ctx.step(flaky)]

    @app.workflow(versioning="pinned")
    async def pinned_fan(ctx: td.Context) -> list[str]:
        return await ctx.all(slow, [0, 1, 2], concurrency=1)

    @app.workflow()
    async def upgrading_fan(ctx: td.Context) -> list[str]:
        return await ctx.all(slow, [0, 1, 2], concurrency=1)

    @app.workflow(versioning="pinned")
    async def looping(ctx: td.Context, n: int) -> str:
        first = await ctx.step(which)
        if n == 0:
            await ctx.wait_signal("go")
            ctx.continue_as_new(1)
        return first

    return app


APP_A = build_app("A")
APP_B = build_app("B")


@pytest.fixture
def engine_on(open_store_engine: StoreEngineFactory) -> EngineFactory:
    """An engine on the memory store, then on SQLite."""

    @asynccontextmanager
    async def factory(app: td.App, **kwargs: Any) -> AsyncIterator[td.Engine]:
        async with open_store_engine(app, **kwargs) as (_, engine):
            yield engine

    return factory


def worker(app: td.App, broker: Broker, build: str) -> AbstractAsyncContextManager[Worker]:
    return open_worker(
        app,
        broker=broker,
        groups=["g"],
        instance_id=f"w-{build}",
        wall_clock=fixed_wall,
        seed=0,
        build_id=build,
    )


async def listed(engine: td.Engine) -> list[str]:
    return [v.key for v in await engine.store.list_values(BUILD_RUNS)]


async def open_counts(engine: td.Engine) -> dict[str, tuple[int, int]]:
    report = await engine.deployments()
    return {b.build: (b.pinned_runs, b.upgrading_runs) for b in report.builds}


async def test_a_retried_run_is_listed_under_its_build_again(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    async with (
        engine_on(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        worker(APP_B, broker, "B"),
    ):
        await engine.set_current_build("pinned", "A")
        await engine.set_current_build("upgrading", "A")
        for run_id, workflow in (("p1", "pinned"), ("p2", "pinned"), ("u1", "upgrading")):
            await engine.start(workflow, run_id=run_id)
        await engine.drain()
        assert [(await engine.get(r)).status for r in ("p1", "p2", "u1")] == ["failed"] * 3
        assert await listed(engine) == []
        assert await open_counts(engine) == {"A": (0, 0), "B": (0, 0)}

        # B becomes current: the pinned runs stay on A, the upgrading one
        # moves at its next turn, each listed while it runs again.
        await engine.set_current_build("pinned", "B")
        await engine.set_current_build("upgrading", "B")
        failing["on"] = False
        global gate
        gate = trio.Event()
        await engine.retry("p1")
        report = await engine.retry_many(td.RunSelection(workflow="upgrading"))
        assert report.acted == 1
        await engine.retry_many(td.RunSelection(id_prefix="p2"))
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(await listed(engine)) == ["A/p1", "A/p2", "B/u1"]
        assert await open_counts(engine) == {"A": (2, 0), "B": (0, 1)}
        gate.set()
        assert await engine.result("p1") == ["A", "A"]
        assert await engine.result("p2") == ["A", "A"]
        assert await engine.result("u1") == ["A", "B"]
        assert await listed(engine) == []
        records = {r.kind: r for r in await engine.store.get_records("p1")}
        placed = placement(records)
        assert placed is not None
        assert (placed.build, placed.versioning, placed.listed) == ("A", "pinned", False)


async def test_a_run_retried_from_a_seq_or_forked_is_listed(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    async with (
        engine_on(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        worker(APP_B, broker, "B"),
    ):
        await engine.set_current_build("pinned", "A")
        await engine.set_current_build("upgrading", "A")
        failing["on"] = False
        await engine.start("pinned", run_id="p1")
        await engine.start("upgrading", run_id="u1")
        assert await engine.result("p1") == await engine.result("u1") == ["A", "A"]
        await engine.set_current_build("pinned", "B")
        await engine.set_current_build("upgrading", "B")

        global gate
        gate = trio.Event()
        await engine.retry("p1", from_seq=2)
        await trio.testing.wait_all_tasks_blocked()
        assert await listed(engine) == ["A/p1"]
        gate.set()
        assert await engine.result("p1") == ["A", "A"]
        # A fork of a pinned run stays on the build that made the history
        # it keeps; a fork of an upgrading run takes the current build.
        pinned_fork = await engine.fork("p1", from_seq=2)
        upgrading_fork = await engine.fork("u1", from_seq=2)
        assert await engine.result(pinned_fork.id) == ["A", "A"]
        assert await engine.result(upgrading_fork.id) == ["A", "B"]
        assert await listed(engine) == []
        report = await engine.deployments()
        assert all(b.drained for b in report.builds)


async def test_a_new_generation_takes_the_current_build(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    broker = MemoryBroker()
    async with (
        engine_on(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        worker(APP_B, broker, "B"),
    ):
        await engine.set_current_build("looping", "A")
        await engine.start("looping", 0, run_id="l")
        await engine.drain()
        assert await listed(engine) == ["A/l"]
        await engine.set_current_build("looping", "B")
        await engine.signal("l", "go", True)
        # A new generation is a new run, with a history of its own. (The
        # result of a run that continued as new is its last generation's.)
        assert await engine.result("l") == "B"
        assert await listed(engine) == []


@pytest.mark.parametrize(
    ("workflow", "expected"), [("pinned_fan", "AAA"), ("upgrading_fan", "ABB")]
)
async def test_a_fans_window_sends_members_to_the_build_the_parent_is_on(
    workflow: str,
    expected: str,
    autojump_clock: trio.testing.MockClock,
    engine_on: EngineFactory,
) -> None:
    broker = MemoryBroker()
    async with (
        engine_on(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        worker(APP_B, broker, "B"),
    ):
        await engine.set_current_build(workflow, "A")
        await engine.start(workflow, run_id="f")
        await trio.sleep(1.0)
        await engine.set_current_build(workflow, "B")
        # The parent looks at its fan after 60 s (its next turn), while the
        # first member is out for 100 s: an upgrading parent moves to B
        # there, and the members its window starts later follow it.
        assert "".join(await engine.result("f")) == expected


async def test_a_ramp_changed_in_flight_moves_no_run(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    deployment = Deployment(workflow="w", current="A", ramping="B", ramp=50.0)
    ids = [f"r-{i}" for i in range(200)]
    shares = {run_id: ramp_share("w", run_id) for run_id in ids}
    # New runs: by share.
    assert all(deployment.build_for(r) == ("B" if shares[r] < 50 else "A") for r in ids)
    for ramp in (10.0, 90.0):
        changed = Deployment(workflow="w", current="A", ramping="B", ramp=ramp)
        # Runs in flight stay where they are, however the ramp moves.
        assert all(changed.build_for(r, "B") == "B" for r in ids)
        assert all(changed.build_for(r, "A") == "A" for r in ids)
    # B made current: every upgrading run moves there.
    done = Deployment(workflow="w", current="B")
    assert all(done.build_for(r, "A") == "B" for r in ids)

    broker = MemoryBroker()
    async with (
        engine_on(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        worker(APP_B, broker, "B"),
    ):
        await engine.set_current_build("upgrading", "A")
        await engine.set_current_build("upgrading", "B", ramp=50)
        runs = [f"u-{i}" for i in range(20)]
        for run_id in runs:
            await engine.start("upgrading", run_id=run_id)
        await engine.drain()
        firsts = {r: "B" if ramp_share("upgrading", r) < 50 else "A" for r in runs}
        assert {"A", "B"} <= set(firsts.values())
        await engine.set_current_build("upgrading", "B", ramp=10)
        failing["on"] = False
        for run_id in runs:
            await engine.retry(run_id)
        # The second step of each ran on the build its first did.
        assert {r: await engine.result(r) for r in runs} == {
            r: [firsts[r], firsts[r]] for r in runs
        }


async def test_a_run_keeps_the_versioning_workers_announce_for_a_body_the_engine_lacks(
    autojump_clock: trio.testing.MockClock, engine_on: EngineFactory
) -> None:
    """An engine whose app lacks the workflow (or declares it by name
    only) pins a run that the workers' announcement says is pinned."""
    remote = td.App("service")
    remote.remote_workflow("remote_pinned", group="orders")
    workers = {}
    for build in ("A", "B"):
        app = td.App("shop")

        @app.workflow(group="orders", versioning="pinned", name="remote_pinned")
        async def remote_pinned(ctx: td.Context, build: str = build) -> list[str]:
            await ctx.wait_signal("go")
            return [build]

        workers[build] = app
    broker = MemoryBroker()
    async with (
        engine_on(remote, broker=broker) as engine,
        open_worker(
            workers["A"], broker=broker, groups=["orders"], build_id="A", seed=0, instance_id="w-A"
        ),
        open_worker(
            workers["B"], broker=broker, groups=["orders"], build_id="B", seed=0, instance_id="w-B"
        ),
    ):
        await engine.set_current_build("remote_pinned", "A")
        await engine.start("remote_pinned", run_id="r1")
        await engine.drain()
        await engine.set_current_build("remote_pinned", "B")
        await engine.signal("r1", "go", True)
        assert await engine.result("r1") == ["A"]
        assert await open_counts(engine) == {"A": (0, 0), "B": (0, 0)}


async def test_setting_a_build_no_live_worker_announces_warns(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    broker = MemoryBroker()
    async with open_test_engine(APP_A, broker=broker) as engine, worker(APP_A, broker, "A"):
        await engine.set_current_build("pinned", "A")
        assert "no live worker announces" not in caplog.text
        deployment = await engine.set_current_build("pinned", "Z")
        assert deployment.current == "Z"
        assert "no live worker announces build 'Z': runs of 'pinned' given it wait" in caplog.text
