"""Versioning by patches: ``ctx.patched`` answers False when replaying a
history that predates the change and True for new runs, and
``ctx.deprecate_patch`` accepts histories with or without the marker."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store

ran: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ran.clear()
    yield
    ran.clear()


def _app(version: str) -> td.App:
    """The app of one deploy: the same steps, the workflow "order" changed."""
    app = td.App("patches")

    @app.step()
    async def charge(x: int) -> int:
        ran["charge"] += 1
        return x * 10

    @app.step()
    async def fraud_check(x: int) -> str:
        ran["fraud_check"] += 1
        return "ok"

    @app.step()
    async def ship(x: int) -> str:
        ran["ship"] += 1
        return f"shipped {x}"

    if version == "A":

        @app.workflow(name="order")
        async def order_a(ctx: td.Context, x: int) -> str:
            amount = await ctx.step(charge, x)
            await ctx.wait_signal("go")
            return await ctx.step(ship, amount)

    elif version == "B":

        @app.workflow(name="order")
        async def order_b(ctx: td.Context, x: int) -> str:
            amount = await ctx.step(charge, x)
            if ctx.patched("fraud-check"):
                await ctx.step(fraud_check, amount)
            await ctx.wait_signal("go")
            shipped = await ctx.step(ship, amount)
            # The answer holds for the rest of the run.
            return f"{shipped} ({'new' if ctx.patched('fraud-check') else 'old'} code)"

    elif version == "C":

        @app.workflow(name="order")
        async def order_c(ctx: td.Context, x: int) -> str:
            amount = await ctx.step(charge, x)
            ctx.deprecate_patch("fraud-check")
            await ctx.step(fraud_check, amount)
            await ctx.wait_signal("go")
            shipped = await ctx.step(ship, amount)
            return f"{shipped} (new code)"

    else:

        @app.workflow(name="order")
        async def order_d(ctx: td.Context, x: int) -> str:
            amount = await ctx.step(charge, x)
            await ctx.step(fraud_check, amount)
            await ctx.wait_signal("go")
            shipped = await ctx.step(ship, amount)
            return f"{shipped} (new code)"

    return app


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def _start(engine: td.Engine, run_id: str) -> None:
    await engine.start("order", 4, run_id=run_id)
    await engine.drain()
    assert (await engine.get(run_id)).status == "suspended"


async def _names(store: td.Store, run_id: str) -> list[tuple[int, str]]:
    return [(cp.seq, cp.name) for cp in await store.get_checkpoints(run_id) if cp.seq < 1000]


async def test_a_run_recorded_by_old_code_finishes_on_the_old_branch_under_new_code(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with shared_store(kind, tmp_path) as store:
        async with open_test_engine(_app("A"), store=store, engine_id="deploy-a") as engine:
            await _start(engine, "old")
        # The engine of deploy A is gone mid-run; deploy B takes over.
        async with open_test_engine(_app("B"), store=store, engine_id="deploy-b") as engine:
            await engine.signal("old", "go")
            assert await engine.result("old") == "shipped 40 (old code)"
            await _start(engine, "new")
            await engine.signal("new", "go")
            assert await engine.result("new") == "shipped 40 (new code)"
        assert ran == {"charge": 2, "fraud_check": 1, "ship": 2}
        assert await _names(store, "old") == [(1, "charge"), (2, "go"), (3, "ship")]
        # The new run recorded its answer as a marker, in line.
        assert await _names(store, "new") == [
            (1, "charge"),
            (2, "patch:fraud-check"),
            (3, "fraud_check"),
            (4, "go"),
            (5, "ship"),
        ]


async def test_deprecate_patch_accepts_histories_with_and_without_the_marker(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with shared_store(kind, tmp_path) as store:
        async with open_test_engine(_app("B"), store=store, engine_id="deploy-b") as engine:
            await _start(engine, "with-marker")
        async with open_test_engine(_app("C"), store=store, engine_id="deploy-c") as engine:
            # A run started by the deprecating deploy records the marker too,
            # so deploy B (in a rollout) would replay it on the new branch.
            await _start(engine, "by-c")
            await engine.signal("with-marker", "go")
            assert await engine.result("with-marker") == "shipped 40 (new code)"
        assert (2, "patch:fraud-check") in await _names(store, "by-c")
        async with open_test_engine(_app("B"), store=store, engine_id="deploy-b2") as engine:
            await engine.signal("by-c", "go")
            assert await engine.result("by-c") == "shipped 40 (new code)"
            await _start(engine, "by-b")
        # The call removed altogether: a history with the marker replays.
        async with open_test_engine(_app("D"), store=store, engine_id="deploy-d") as engine:
            await engine.signal("by-b", "go")
            assert await engine.result("by-b") == "shipped 40 (new code)"
            await _start(engine, "by-d")
            await engine.signal("by-d", "go")
            assert await engine.result("by-d") == "shipped 40 (new code)"
        assert await _names(store, "by-d") == [
            (1, "charge"),
            (2, "fraud_check"),
            (3, "go"),
            (4, "ship"),
        ]
        assert ran["fraud_check"] == 4


async def test_a_run_waiting_right_before_the_change_takes_the_new_branch(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    """Nothing is recorded past the point of the change: the run's history
    fits the new code, which it runs from there on (as Temporal does)."""
    store = td.MemoryStore()
    old = td.App("patches")
    new = td.App("patches")
    for app in (old, new):

        @app.step(name="notify")
        async def notify(x: int) -> int:
            ran["notify"] += 1
            return x

    @old.workflow(name="flow")
    async def flow_old(ctx: td.Context, x: int) -> str:
        await ctx.wait_signal("go")
        return "old"

    @new.workflow(name="flow")
    async def flow_new(ctx: td.Context, x: int) -> str:
        await ctx.wait_signal("go")
        if ctx.patched("notify"):
            await ctx.step(new.get_step("notify"), x)  # type: ignore[arg-type]
            return "new"
        return "old"

    async with open_test_engine(old, store=store) as engine:
        await engine.start("flow", 1, run_id="r")
        await engine.drain()
    async with open_test_engine(new, store=store, engine_id="new") as engine:
        await engine.signal("r", "go")
        assert await engine.result("r") == "new"
    assert ran == {"notify": 1}


patch_app = td.App("patch-ids")


@patch_app.workflow()
async def bad_id(ctx: td.Context, change_id: str) -> bool:
    try:
        return ctx.patched(change_id)
    except td.UsageError as exc:
        return str(exc).startswith("a change id")


async def test_a_malformed_change_id_raises_usage_error(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(patch_app) as engine:
        for change_id in ["", "has space", "a:b"]:
            run = await engine.start(bad_id, change_id)
            assert await engine.result(run.id) is True
            assert await _names(engine.store, run.id) == []
