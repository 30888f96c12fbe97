"""Deployments under MockClock: build ids announced and consumed, runs
given their workflow's current build (ramped by `ramp_share`), pinned runs
kept on their build and blocked while none of its workers lives, upgrading
runs moved at their next turn, the builds' view (drained once their runs
end), and bad input refused with `DeploymentError`, storing nothing."""

from __future__ import annotations

import json
import math
from contextlib import AbstractAsyncContextManager

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from test_console_api import TOKEN, api
from trio_durable._base._policies import Versioning
from trio_durable._brokers._base import Broker
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._features.deployments._deployments import (
    BUILD_RUNS,
    DEPLOYMENTS,
    Deployment,
    ramp_share,
)
from trio_durable._front._open_worker import open_worker
from trio_durable._front._worker import Worker
from trio_durable._kernel._builds import BUILD, run_build
from trio_durable._kernel._dispatch import served_broker_queues
from trio_durable._kernel._fleet import aggregate

RECHECK = 5.0


def build_app(build: str) -> td.App:
    """The same workflows in every build; the step says which build ran it."""
    app = td.App("shop")

    @app.step(group="g", name="which")
    async def which() -> str:
        return build

    @app.workflow(versioning="pinned")
    async def pinned(ctx: td.Context) -> list[str]:
        first = await ctx.step(which)
        await ctx.wait_signal("go")
        return [first, await ctx.step(which)]

    @app.workflow()
    async def upgrading(ctx: td.Context) -> list[str]:
        first = await ctx.step(which)
        await ctx.wait_signal("go")
        return [first, await ctx.step(which)]

    @app.workflow(versioning="pinned")
    async def once(ctx: td.Context) -> str:
        return await ctx.step(which)

    return app


APP_A = build_app("A")
APP_B = build_app("B")


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


async def serve_until(app: td.App, broker: Broker, build: str, stop: trio.Event) -> None:
    async with worker(app, broker, build):
        await stop.wait()


async def build_of(engine: td.Engine, run_id: str) -> str | None:
    records = {r.kind: r for r in await engine.store.get_records(run_id)}
    return run_build(records)


def test_a_worker_consumes_its_builds_queues_too() -> None:
    assert served_broker_queues(APP_A, ["g"], [], "A") == ("g", "g+A")
    assert served_broker_queues(APP_A, ["g@acme"], [], None) == ("g@acme",)


async def test_a_worker_announces_its_build_by_default_its_registration_hash(
    autojump_clock: trio.abc.Clock,
) -> None:
    broker = MemoryBroker()
    async with open_worker(APP_A, broker=broker, groups=["g"], seed=0) as w:
        [d] = await broker.worker_descriptors()
        assert d.build_id == APP_A.registration_hash() == w.build_id
    async with worker(APP_A, broker, "A"):
        [d] = await broker.worker_descriptors()
        assert d.build_id == "A"
        assert d.workflows["pinned"]["versioning"] == "pinned"
        assert "versioning" not in d.workflows["upgrading"]
        assert d.steps["which"]["params"] == []


@pytest.mark.parametrize("bad", ["", "a b", ".x", "x/y", "a" * 101, 7])
async def test_bad_build_ids_are_refused(bad: object, autojump_clock: trio.abc.Clock) -> None:
    with pytest.raises(td.UsageError, match="broker-safe"):
        async with open_worker(APP_A, broker=MemoryBroker(), groups=["g"], build_id=bad):  # type: ignore[arg-type]
            pass
    with pytest.raises(td.UsageError, match="broker-safe"):
        async with td.open_engine(APP_A, build_id=bad):  # type: ignore[arg-type]
            pass


def test_versioning_is_checked_and_hashed() -> None:
    app = td.App("x")
    with pytest.raises(td.RegistrationError, match="versioning"):
        app.workflow(versioning="sticky")  # type: ignore[call-overload]
    with pytest.raises(td.RegistrationError, match="versioning"):
        app.remote_workflow("r", versioning="sticky")  # type: ignore[arg-type]

    def with_versioning(versioning: Versioning) -> str:
        app = td.App("x")

        @app.workflow(versioning=versioning)
        async def flow(ctx: td.Context) -> None:
            pass

        return app.registration_hash()

    plain = td.App("x")

    @plain.workflow()
    async def flow(ctx: td.Context) -> None:
        pass

    # The default hashes as before versioning existed.
    assert with_versioning("auto_upgrade") == plain.registration_hash()
    assert with_versioning("pinned") != plain.registration_hash()


async def test_pinned_runs_stay_on_their_build_upgrading_runs_move(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(APP_A, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, APP_A, broker, "A", stop)
        nursery.start_soon(serve_until, APP_B, broker, "B", stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("pinned", "A")
        await engine.set_current_build("upgrading", "A")
        await engine.start("pinned", run_id="p1")
        await engine.start("upgrading", run_id="u1")
        await engine.drain()
        assert await build_of(engine, "p1") == "A"
        assert await build_of(engine, "u1") == "A"

        report = await engine.deployments()
        [a, b] = report.builds
        assert (a.build, a.workers, a.pinned_runs, a.upgrading_runs) == ("A", ("w-A",), 1, 1)
        assert not a.drained
        assert (b.build, b.workers, b.drained) == ("B", ("w-B",), True)

        await engine.set_current_build("pinned", "B")
        await engine.set_current_build("upgrading", "B")
        await engine.start("pinned", run_id="p2")
        await engine.signal("p1", "go", True)
        await engine.signal("u1", "go", True)
        await engine.signal("p2", "go", True)
        assert await engine.result("p1") == ["A", "A"]
        assert await engine.result("u1") == ["A", "B"]
        assert await engine.result("p2") == ["B", "B"]
        assert await build_of(engine, "u1") == "B"

        report = await engine.deployments()
        builds = {b.build: b for b in report.builds}
        assert builds["A"].drained
        assert builds["B"].drained
        assert builds["B"].current_for == ("pinned", "upgrading")
        # Nothing left listed: every run ended.
        assert await engine.store.list_values(BUILD_RUNS) == []
        stop.set()


async def test_a_pinned_run_waits_blocked_until_a_worker_of_its_build_lives(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(APP_A, broker=broker, blocked_recheck=RECHECK) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, APP_B, broker, "B", stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("once", "A")
        await engine.start("once", run_id="o1")
        await engine.drain()
        run = await engine.get("o1")
        assert run.status == "suspended"
        assert run.wake_at == WALL_START + RECHECK
        [cp] = await engine.store.get_checkpoints("o1")
        assert cp.started_at is None
        assert cp.mark is not None
        assert cp.mark.code == "blocked"
        assert cp.mark.message == "blocked: no live worker of build 'A' serves group 'g'"
        assert broker.depth("g") == broker.depth("g+A") == 0
        # Still blocked at the recheck; never failed.
        await trio.sleep_until(RECHECK + 1.0)
        assert (await engine.get("o1")).status == "suspended"

        nursery.start_soon(serve_until, APP_A, broker, "A", stop)
        assert await engine.result("o1") == "A"
        assert trio.current_time() == 2 * RECHECK
        stop.set()


async def test_a_ramp_sends_its_share_of_new_runs_to_the_ramped_build(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    stop = trio.Event()
    async with (
        open_test_engine(APP_A, broker=broker) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, APP_A, broker, "A", stop)
        nursery.start_soon(serve_until, APP_B, broker, "B", stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("once", "A")
        deployment = await engine.set_current_build("once", "B", ramp=25)
        assert (deployment.current, deployment.ramping, deployment.ramp) == ("A", "B", 25.0)
        ids = [f"r-{i}" for i in range(60)]
        for run_id in ids:
            await engine.start("once", run_id=run_id)
        outputs = [await engine.result(run_id) for run_id in ids]
        expected = ["B" if ramp_share("once", run_id) < 25 else "A" for run_id in ids]
        assert outputs == expected
        assert 0 < expected.count("B") < len(ids)
        stop.set()


def test_ramp_shares_are_spread_evenly() -> None:
    deployment = Deployment(workflow="once", current="A", ramping="B", ramp=25.0)
    builds = [deployment.build_for(f"run-{i}") for i in range(400)]
    assert abs(builds.count("B") / 400 - 0.25) <= 0.08
    assert all(0 <= ramp_share("w", f"{i}") < 100 for i in range(100))


@pytest.mark.parametrize(
    ("workflow", "build", "ramp", "message"),
    [
        ("nope", "A", None, "unknown workflow 'nope'"),
        ("once", "a b", None, "broker-safe"),
        ("once", "", None, "broker-safe"),
        ("once", "A", 0, "ramp must be"),
        ("once", "A", 150, "ramp must be"),
        ("once", "A", math.nan, "ramp must be"),
        ("once", "A", "10%", "ramp must be"),
        ("once", "A", True, "ramp must be"),
    ],
)
async def test_bad_deployment_changes_are_refused_and_store_nothing(
    workflow: str,
    build: str,
    ramp: object,
    message: str,
    autojump_clock: trio.abc.Clock,
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(APP_A) as engine:
        await engine.set_current_build("once", "A")
        before = await engine.store.list_values(DEPLOYMENTS)
        with pytest.raises(td.DeploymentError, match=message):
            await engine.set_current_build(workflow, build, ramp=ramp)  # type: ignore[arg-type]
        assert await engine.store.list_values(DEPLOYMENTS) == before


async def test_workflows_without_a_deployment_keep_no_build(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(APP_A, serve=["g"], build_id="A") as engine:
        assert await engine.start("once", run_id="plain") is not None
        assert await engine.result("plain") == "A"
        assert BUILD not in {r.kind for r in await engine.store.get_records("plain")}
        report = await engine.deployments()
        assert [b.build for b in report.builds] == ["A"]


def _descriptor(
    instance: str, build: str, params: list[dict[str, object]], version: str = "1"
) -> td.WorkerDescriptor:
    return td.WorkerDescriptor(
        instance_id=instance,
        app="shop",
        workflows={"checkout": {"versions": [version], "params": params}},
        steps={"charge": {"group": "g", "params": params}},
        build_id=build,
    )


AMOUNT: dict[str, object] = {"name": "amount", "type": ["integer"]}


@pytest.mark.parametrize(
    ("new", "current", "breaking"),
    [
        # Unchanged: nothing to say.
        ([AMOUNT], None, False),
        # A parameter added with a default: safe from the current build.
        ([AMOUNT, {"name": "note", "default": True}], {"checkout": "A"}, False),
        # A required parameter added, one renamed, a narrower type: breaking.
        ([AMOUNT, {"name": "note"}], {"checkout": "A"}, True),
        ([{"name": "total", "type": ["integer"]}], None, True),
        ([{"name": "amount", "type": ["string"]}], None, True),
        # A wider type takes what was recorded.
        ([{"name": "amount", "type": ["integer", "null"]}], {"checkout": "A"}, False),
    ],
)
def test_a_new_builds_breaking_changes_are_flagged(
    new: list[dict[str, object]], current: dict[str, str] | None, breaking: bool
) -> None:
    fleet = aggregate([_descriptor("w-a", "A", [AMOUNT]), _descriptor("w-b", "B", new)], current)
    flagged = [d for d in fleet.disagreements if d.kind == "breaking"]
    if not breaking:
        assert flagged == []
        return
    # The workflow's version, and the step (as the same parameters).
    assert [d.subject for d in flagged] == ["charge", "checkout"]
    values = [json.loads(v) for v in flagged[1].values]
    assert [(v["build"], v["version"]) for v in values] == [("A", "1"), ("B", "1")]
    assert list(flagged[1].values.values()) == [("w-a",), ("w-b",)]


def test_a_version_bump_is_no_breaking_change() -> None:
    fleet = aggregate(
        [_descriptor("w-a", "A", [AMOUNT]), _descriptor("w-b", "B", [{"name": "x"}], "2")]
    )
    assert [d.subject for d in fleet.disagreements if d.kind == "breaking"] == ["charge"]


async def test_the_engines_fleet_compares_against_the_current_build(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    app_c = td.App("shop")

    @app_c.step(group="g", name="which")
    async def which(extra: int) -> str:
        return "C"

    stop = trio.Event()
    async with (
        open_test_engine(APP_A, broker=broker) as engine,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(serve_until, APP_A, broker, "A", stop)
        nursery.start_soon(serve_until, app_c, broker, "C", stop)
        await trio.testing.wait_all_tasks_blocked()
        await engine.set_current_build("once", "A")
        fleet = await engine.fleet()
        [flagged] = [d for d in fleet.disagreements if d.kind == "breaking"]
        assert flagged.subject == "which"
        assert sorted(json.loads(v)["build"] for v in flagged.values) == ["A", "C"]
        stop.set()


async def test_the_console_shows_the_builds(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    async with (
        open_test_engine(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        api(engine) as client,
    ):
        await engine.set_current_build("pinned", "A")
        await engine.start("pinned", run_id="p1")
        await engine.drain()
        body = (await client.get("/api/deployments")).json()
        assert body["deployments"][0]["current"] == "A"
        [a] = body["builds"]
        assert (a["build"], a["workers"], a["pinned_runs"], a["drained"]) == (
            "A",
            ["w-A"],
            1,
            False,
        )
        page = (await client.get("/deployments")).text
        assert 'data-build="A"' in page
        assert "open runs" in page
        await engine.signal("p1", "go", True)
        await engine.result("p1")
        page = (await client.get("/deployments")).text
        assert "drained" in page


async def test_the_console_sets_a_current_build_with_the_token(
    autojump_clock: trio.abc.Clock, open_test_engine: EngineFactory
) -> None:
    broker = MemoryBroker()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        open_test_engine(APP_A, broker=broker) as engine,
        worker(APP_A, broker, "A"),
        api(engine) as client,
    ):
        path = "/api/deployments/pinned/current"
        page = (await client.get("/deployments")).text
        assert 'data-action="set-current-build"' in page
        # Without the token, or with a malformed body, nothing is stored.
        assert (await client.post(path, json={"build": "A"})).status_code == 401
        for body, message in [
            ({"build": 7}, "build must be a string"),
            ({"build": "A", "ramp": "10%"}, "ramp must be a number"),
            ({"build": "A", "extra": 1}, "unknown field 'extra'"),
            ({"build": "A", "ramp": 150}, "ramp"),
            ({"build": "not a build!"}, "build"),
        ]:
            response = await client.post(path, json=body, headers=auth)
            assert response.status_code == 400, response.text
            assert message in response.json()["error"]["message"]
        nowhere = await client.post(
            "/api/deployments/nope/current", json={"build": "A"}, headers=auth
        )
        assert nowhere.status_code == 400
        assert (await engine.deployments()).deployments == ()
        answer = await client.post(path, json={"build": "A", "ramp": 25}, headers=auth)
        assert answer.status_code == 200, answer.text
        assert (answer.json()["workflow"], answer.json()["ramping"], answer.json()["ramp"]) == (
            "pinned",
            "A",
            25.0,
        )
        [deployment] = (await engine.deployments()).deployments
        assert (deployment.current, deployment.ramping, deployment.ramp) == (None, "A", 25.0)
