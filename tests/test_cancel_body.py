"""A workflow catches its own cancellation (``except td.Cancelled:``) and
runs cleanup steps in ``ctx.shield()`` before its run ends ``cancelled``,
across a crash in the middle of the cleanup, on the memory and SQLite
stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, shared_store

app = td.App("cancel-body")

done: list[str] = []
"""Steps that ran to their end, in order."""
seen: list[str] = []
hold: list[trio.Event] = []
entered: list[trio.Event] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    for items in (done, seen, hold, entered):
        items.clear()
    yield
    done.clear()


@app.step()
async def unreserve(x: int) -> None:
    done.append("unreserve")


@app.step()
async def reserve(x: int) -> str:
    done.append("reserve")
    return f"hold-{x}"


@app.step()
async def release(x: int) -> None:
    done.append("release")


@app.step()
async def notify(x: int) -> None:
    if entered:
        entered[0].set()
    if hold:
        await hold[0].wait()
    done.append("notify")


@app.workflow()
async def booking(ctx: td.Context, x: int) -> str:
    await ctx.step(reserve, x, compensate=unreserve)
    try:
        await ctx.wait_signal("confirm")
    except td.Cancelled:
        seen.append("cancelled")
        with ctx.shield():
            await ctx.step(release, x)
            await ctx.step(notify, x)
        raise
    return "confirmed"


@app.workflow()
async def unshielded(ctx: td.Context, x: int) -> str:
    try:
        await ctx.sleep(60)
    except td.Cancelled:
        try:
            await ctx.step(release, x)
        except td.Cancelled:
            seen.append("cancelled again")
        raise
    return "slept"


@app.workflow()
async def waits_in_cleanup(ctx: td.Context, x: int) -> str:
    try:
        await ctx.sleep(60)
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(release, x)
            await ctx.sleep(5)
            seen.append("slept in cleanup")
        return "swallowed"
    return "slept"


@app.workflow()
async def catches_exception(ctx: td.Context, x: int) -> str:
    try:
        await ctx.sleep(60)
    except Exception:
        seen.append("caught as Exception")
        raise
    return "slept"


async def _checkpoints(store: td.Store, run_id: str) -> list[tuple[int | None, str, str]]:
    """The run's checkpoints (seq, name, status), then its records (None,
    kind, status)."""
    return [
        *((cp.seq, cp.name, cp.status) for cp in await store.get_checkpoints(run_id)),
        *((None, r.kind, r.status) for r in await store.get_records(run_id)),
    ]


async def test_the_body_cleans_up_and_the_run_ends_cancelled(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(booking, 7, run_id="b")
        await engine.drain()
        await engine.cancel("b")
        with pytest.raises(td.RunCancelled):
            await engine.result("b")
        cps = await _checkpoints(engine.store, "b")
    assert seen == ["cancelled"]
    assert done == ["reserve", "release", "notify"]
    assert cps == [
        (1, "reserve", "completed"),
        (2, "confirm", "pending"),
        (3, "release", "completed"),
        (4, "notify", "completed"),
        (None, "cancelled_at", "completed"),
    ]


async def test_cleanup_runs_before_compensation(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(booking, 7, run_id="b")
        await engine.drain()
        await engine.cancel("b", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("b")
    assert done == ["reserve", "release", "notify", "unreserve"]


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_crash_during_cleanup_is_finished_by_another_engine(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    hold.append(trio.Event())
    entered.append(trio.Event())
    async with shared_store(kind, tmp_path) as store:
        with trio.CancelScope() as crash:
            async with open_test_engine(app, store=store, engine_id="first") as first:
                await first.start(booking, 7, run_id="b")
                await first.drain()
                await first.cancel("b")
                # The cleanup's first step ended (and was written); the
                # engine dies in its second.
                await entered[0].wait()
                crash.cancel()
        assert done == ["reserve", "release"]
        assert [name for _, name, _ in await _checkpoints(store, "b")] == [
            "reserve",
            "confirm",
            "release",
            "cancelled_at",
        ]
        hold.clear()
        async with open_test_engine(app, store=store, engine_id="second") as second:
            with pytest.raises(td.RunCancelled):
                await second.result("b")
            await second.drain()
        run = await store.get_run("b")
        cps = await _checkpoints(store, "b")
    assert run is not None
    assert run.status == "cancelled"
    # The second engine delivered the cancel at the same seq, replayed the
    # cleanup step that ran and ran the one that did not end.
    assert done == ["reserve", "release", "notify"]
    assert cps == [
        (1, "reserve", "completed"),
        (2, "confirm", "pending"),
        (3, "release", "completed"),
        (4, "notify", "completed"),
        (None, "cancelled_at", "completed"),
    ]


async def test_operations_after_the_cancel_outside_a_shield_raise_cancelled(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(unshielded, 1, run_id="u")
        await engine.drain()
        await engine.cancel("u")
        with pytest.raises(td.RunCancelled):
            await engine.result("u")
        cps = await _checkpoints(engine.store, "u")
    assert seen == ["cancelled again"]
    assert done == []
    assert cps == [(1, "sleep", "pending")]


async def test_a_cleanup_that_waits_and_returns_still_ends_cancelled(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(waits_in_cleanup, 1, run_id="w")
        await engine.drain()
        await engine.cancel("w")
        with pytest.raises(td.RunCancelled):
            await engine.result("w")
        cps = await _checkpoints(engine.store, "w")
    assert done == ["release"]
    assert seen == ["slept in cleanup"]
    assert cps == [
        (1, "sleep", "pending"),
        (2, "release", "completed"),
        (3, "sleep", "completed"),
        (None, "cancelled_at", "completed"),
    ]


async def test_except_exception_does_not_catch_the_cancellation(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(catches_exception, 1, run_id="e")
        await engine.drain()
        await engine.cancel("e")
        with pytest.raises(td.RunCancelled):
            await engine.result("e")
        cps = await _checkpoints(engine.store, "e")
    assert seen == []
    # A body that does not catch it writes nothing more than a cancel did.
    assert cps == [(1, "sleep", "pending")]


@app.workflow(timeout=100)
async def bounded(ctx: td.Context, x: int) -> str:
    try:
        await ctx.wait_signal("never")
    except td.Cancelled as exc:
        seen.append(f"cancelled at seq {exc.seq}")
        with ctx.shield():
            await ctx.step(release, x)
        raise
    return "signalled"


async def test_the_runs_deadline_is_delivered_as_a_cancellation_too(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(bounded, 1, run_id="t")
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("t")
    assert info.value.code == "timeout"
    assert trio.current_time() == 100.0
    assert seen == ["cancelled at seq 1"]
    assert done == ["release"]


async def test_a_client_cancel_reaches_the_body(
    kind: str, clock: trio.testing.MockClock, tmp_path: Path, open_test_engine: EngineFactory
) -> None:
    async with (
        shared_store(kind, tmp_path) as store,
        open_test_engine(app, store=store) as engine,
        td.open_client(store) as client,
    ):
        await engine.start(booking, 3, run_id="c")
        await engine.drain()
        await client.cancel("c")
        with pytest.raises(td.RunCancelled):
            await client.result("c")
    assert seen == ["cancelled"]
    assert done == ["reserve", "release", "notify"]
