"""Deterministic helpers: ``ctx.now()``, ``ctx.random()`` and
``ctx.uuid4()`` answer the same on every replay, across a crash and on
another engine, on the memory and SQLite stores."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, shared_store

app = td.App("determinism")

seen: list[tuple[str, Any]] = []
"""What bodies observed, turn after turn."""
hold: list[trio.Event] = []
entered: list[trio.Event] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    seen.clear()
    hold.clear()
    entered.clear()
    yield
    seen.clear()


@app.step()
async def work(x: int) -> int:
    await trio.sleep(2)  # virtual time: the step ends 2 s after it started
    return x + 1


@app.step()
async def stall(x: int) -> int:
    if entered:
        entered[0].set()
    if hold:
        await hold[0].wait()
    return x


def _draw(ctx: td.Context) -> dict[str, Any]:
    return {
        "now": ctx.now().timestamp(),
        "random": ctx.random().random(),
        "uuid": str(ctx.uuid4()),
    }


@app.workflow()
async def draws(ctx: td.Context, x: int) -> list[dict[str, Any]]:
    first = _draw(ctx)
    seen.append(("first", first))
    await ctx.step(work, x)
    second = _draw(ctx)
    seen.append(("second", second))
    await ctx.step(stall, x)
    third = _draw(ctx)
    seen.append(("third", third))
    await ctx.sleep(10)
    fourth = _draw(ctx)
    seen.append(("fourth", fourth))
    return [first, second, third, fourth]


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    """Virtual time that jumps as soon as every task waits, on both stores."""
    return trio.testing.MockClock(autojump_threshold=0)


async def test_now_random_and_uuid4_replay_identically(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(draws, 1, run_id="r")
        result = await engine.result(run.id)
    by_label: dict[str, list[Any]] = {}
    for label, value in seen:
        by_label.setdefault(label, []).append(value)
    # Three turns (start, after `stall`... all in one turn, then after the
    # timer): each replay saw exactly what the first pass did.
    for label, values in by_label.items():
        assert all(v == values[0] for v in values), label
    assert [v for v in result] == [by_label[k][0] for k in ("first", "second", "third", "fourth")]
    first, second, third, fourth = result
    # Durable time: the run's creation, then each step's end, then the timer's.
    assert first["now"] == WALL_START
    assert second["now"] == WALL_START + 2
    assert third["now"] == WALL_START + 2
    assert fourth["now"] == WALL_START + 12
    # Draws differ from one another, and uuids are version 4.
    assert len({d["random"] for d in result}) == 4
    assert len({d["uuid"] for d in result}) == 4
    assert all(uuid.UUID(d["uuid"]).version == 4 for d in result)


async def test_now_is_an_aware_utc_datetime(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(stamp, run_id="s")
        text = await engine.result(run.id)
    assert text == datetime.datetime.fromtimestamp(WALL_START, tz=datetime.UTC).isoformat()


@app.workflow()
async def stamp(ctx: td.Context) -> str:
    now = ctx.now()
    assert now.tzinfo is datetime.UTC
    return now.isoformat()


async def test_values_are_seeded_per_run(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        a = await engine.start(draws, 1, run_id="a")
        b = await engine.start(draws, 1, run_id="b")
        ra, rb = await engine.result(a.id), await engine.result(b.id)
    assert ra[0]["uuid"] != rb[0]["uuid"]
    assert ra[0]["random"] != rb[0]["random"]


async def test_values_survive_a_crash_and_replay_on_another_engine(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    hold.append(trio.Event())
    entered.append(trio.Event())
    async with shared_store(kind, tmp_path) as store:
        with trio.CancelScope() as crash:
            async with open_test_engine(app, store=store, engine_id="first") as first:
                await first.start(draws, 1, run_id="r")
                await entered[0].wait()
                # `stall` holds the first engine's turn: the process dies there,
                # having written nothing of the turn.
                crash.cancel()
        before = list(seen)
        assert [label for label, _ in before] == ["first", "second"]
        hold.clear()
        async with open_test_engine(app, store=store, engine_id="second") as second:
            result = await second.result("r")
    # The second engine replayed the body from its start: its first two
    # draws are the first engine's, though `work` ran again there.
    after = dict(seen[len(before) :])
    assert after["first"] == before[0][1]
    assert result[0] == before[0][1]
    assert result[1]["random"] == before[1][1]["random"]
    assert result[1]["uuid"] == before[1][1]["uuid"]
    # The run's creation is durable: so is `now` before the first step.
    assert result[0]["now"] == WALL_START


@app.workflow()
async def now_around_a_patch(ctx: td.Context) -> list[float]:
    before = ctx.now().timestamp()
    await ctx.step(work, 1)
    await trio.sleep(3)  # the body's own time passes: the marker is later
    at_patch = ctx.now().timestamp()
    ctx.patched("later")
    after = ctx.now().timestamp()
    seen.append(("now", [before, at_patch, after]))
    await ctx.sleep(10)
    return [before, at_patch, after]


async def test_a_patch_marker_does_not_move_now(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(now_around_a_patch, run_id="p")
        result = await engine.result(run.id)
    assert result == [WALL_START, WALL_START + 2, WALL_START + 2]
    assert [value for _, value in seen] == [result, result]
