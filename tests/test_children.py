"""Child runs: `Context.child` (awaited) and `Context.start_child` (detached)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("children")

turns: Counter[str] = Counter()
"""Body entries per run id: one per turn that replayed the body."""


@pytest.fixture(autouse=True)
def _reset_turns() -> Iterator[None]:
    turns.clear()
    yield
    turns.clear()


@attrs.define(frozen=True)
class Point:
    x: int
    y: int


@app.step()
async def double(x: int) -> int:
    return 2 * x


@app.workflow()
async def gated_kid(ctx: td.Context, x: int) -> Point:
    """Doubles ``x``, then waits for the signal "go" before it returns."""
    turns[ctx.run_id] += 1
    doubled = await ctx.step(double, x)
    await ctx.wait_signal("go")
    return Point(x=doubled, y=x)


@app.workflow()
async def await_kid(ctx: td.Context, x: int) -> dict[str, Any]:
    turns[ctx.run_id] += 1
    first = await ctx.step(double, x)
    point = await ctx.child(gated_kid, first)
    return {"type": type(point).__name__, "x": point.x, "y": point.y}


@app.workflow()
async def failing_kid(ctx: td.Context, code: str | None) -> int:
    turns[ctx.run_id] += 1
    if code is None:
        raise ValueError("plain failure")
    raise td.FatalError("card declined", code=code, details={"amount": 12, "tries": [1, 2]})


@app.workflow()
async def catching_parent(ctx: td.Context, code: str | None) -> dict[str, Any]:
    turns[ctx.run_id] += 1
    try:
        await ctx.child(failing_kid, code)
    except td.RunFailed as exc:
        return {
            "type": type(exc).__name__,
            "run_id": exc.run_id,
            "message": exc.message,
            "code": exc.code,
            "details": exc.details,
        }
    return {"type": None}


@app.workflow()
async def uncaught_parent(ctx: td.Context, code: str | None) -> int:
    turns[ctx.run_id] += 1
    return await ctx.child(failing_kid, code)


@app.workflow()
async def detaching_parent(ctx: td.Context, x: int) -> str:
    turns[ctx.run_id] += 1
    child_id = await ctx.start_child(gated_kid, x)
    # The id is there at once, in the same turn: the next durable op runs now.
    await ctx.step(double, x)
    await ctx.wait_signal("finish")
    return child_id


@app.workflow()
async def detach_and_return(ctx: td.Context, x: int) -> str:
    turns[ctx.run_id] += 1
    return await ctx.start_child(gated_kid, x)


def _completion(cp: td.Checkpoint) -> Any:
    assert cp.output is not None
    return json.loads(cp.output)


async def test_child_is_awaited_under_a_derived_id_and_the_parent_waits(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(await_kid, 5, run_id="p")
        await engine.drain()

        # seq 1 is the step, so the child sits at seq 2.
        parent = await engine.get("p")
        child = await engine.get("p.child.2")
        assert parent.status == "suspended"
        assert parent.wake_at is None
        assert child.status == "suspended"
        assert (child.parent_id, child.parent_seq) == ("p", 2)
        assert child.workflow == "gated_kid"
        assert json.loads(child.input) == [10]
        [step_cp, child_cp] = await engine.store.get_checkpoints("p")
        assert (step_cp.seq, step_cp.kind, step_cp.status) == (1, "local", "completed")
        assert (child_cp.seq, child_cp.kind, child_cp.status) == (2, "child", "pending")
        assert child_cp.child_id == "p.child.2"
        assert child_cp.name == "gated_kid"
        assert turns == {"p": 1, "p.child.2": 1}

        # Nothing wakes the parent while the child waits, however long.
        await trio.sleep(3600)
        await engine.drain()
        assert (await engine.get("p")).status == "suspended"
        assert turns == {"p": 1, "p.child.2": 1}

        await engine.signal("p.child.2", "go")
        assert await engine.result("p") == {"type": "Point", "x": 20, "y": 10}
        assert await engine.result("p.child.2") == Point(x=20, y=10)
        await engine.drain()
        # One turn to start the child, one to resume with its value.
        assert turns == {"p": 2, "p.child.2": 2}
        assert trio.current_time() == 3600.0


async def test_child_fatal_error_code_and_details_reach_the_parent(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(catching_parent, "card_declined", run_id="p")
        assert await engine.result("p") == {
            "type": "RunFailed",
            "run_id": "p.child.1",
            "message": "card declined",
            "code": "card_declined",
            "details": {"amount": 12, "tries": [1, 2]},
        }
        child = await engine.get("p.child.1")
        assert child.status == "failed"
        assert child.error is not None
        assert (child.error.message, child.error.code) == ("card declined", "card_declined")
        assert child.error.details == {"amount": 12, "tries": [1, 2]}


async def test_uncaught_child_failure_becomes_the_parents_stored_error(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(uncaught_parent, "out_of_stock", run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert not isinstance(info.value, td.RunCancelled)
        assert info.value.run_id == "p"
        assert info.value.code == "out_of_stock"
        assert info.value.details == {"amount": 12, "tries": [1, 2]}
        assert info.value.message == "card declined"
        parent = await engine.get("p")
        assert parent.status == "failed"
        assert parent.error is not None
        assert parent.error.code == "out_of_stock"
        assert parent.error.details == {"amount": 12, "tries": [1, 2]}
        assert parent.error.message == "card declined"
        await engine.drain()
        assert turns == {"p": 2, "p.child.1": 1}


async def test_completion_written_on_success_is_exact(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(await_kid, 1, run_id="p")
        await engine.drain()
        await engine.signal("p.child.2", "go")
        await engine.result("p")
        [_, child_cp] = await engine.store.get_checkpoints("p")
        assert child_cp.status == "completed"
        assert child_cp.error is None
        assert _completion(child_cp) == {"ok": True, "value": {"x": 4, "y": 2}}
        assert child_cp.finished_at == WALL_START


async def test_completion_written_on_failure_is_exact(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(uncaught_parent, "nope", run_id="p")
        await engine.start(uncaught_parent, None, run_id="q")
        for run_id in ("p", "q"):
            with pytest.raises(td.RunFailed):
                await engine.result(run_id)

        [p_cp] = await engine.store.get_checkpoints("p")
        assert p_cp.status == "failed"
        assert _completion(p_cp) == {
            "ok": False,
            "error": "card declined",
            "code": "nope",
            "details": {"amount": 12, "tries": [1, 2]},
        }
        assert p_cp.error is not None
        assert p_cp.error.code == "nope"

        # A plain exception: no code, no details, but the keys are all there.
        [q_cp] = await engine.store.get_checkpoints("q")
        assert q_cp.status == "failed"
        assert _completion(q_cp) == {
            "ok": False,
            "error": "plain failure",
            "code": None,
            "details": None,
        }
        q = await engine.get("q")
        assert q.error is not None
        assert (q.error.message, q.error.code, q.error.details) == ("plain failure", None, None)


async def test_start_child_returns_the_id_at_once_and_the_child_runs(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(detach_and_return, 3, run_id="p")
        # The parent ends while its child still waits for its signal.
        assert await engine.result("p") == "p.child.1"
        await engine.drain()
        child = await engine.get("p.child.1")
        assert child.status == "suspended"
        assert child.parent_id == "p"
        assert child.parent_seq is None
        [cp] = await engine.store.get_checkpoints("p")
        assert (cp.kind, cp.status, cp.child_id) == ("child", "completed", "p.child.1")
        assert json.loads(cp.output or "") == "p.child.1"
        assert turns == {"p": 1, "p.child.1": 1}

        await engine.signal("p.child.1", "go")
        assert await engine.result("p.child.1") == Point(x=6, y=3)


async def test_start_child_end_does_not_wake_the_parent(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(detaching_parent, 4, run_id="p")
        await engine.drain()
        assert (await engine.get("p")).status == "suspended"
        cps = await engine.store.get_checkpoints("p")
        assert [(cp.seq, cp.kind, cp.status) for cp in cps] == [
            (1, "child", "completed"),
            (2, "local", "completed"),
            (3, "signal", "pending"),
        ]
        assert turns == {"p": 1, "p.child.1": 1}
        ops_before = engine.store.statistics().ops

        await engine.signal("p.child.1", "go")
        assert await engine.result("p.child.1") == Point(x=8, y=4)
        await engine.drain()
        # The child's end wrote only its own row: the parent's record and
        # status are as they were and its body did not replay.
        assert turns == {"p": 1, "p.child.1": 2}
        assert await engine.store.get_checkpoints("p") == cps
        assert (await engine.get("p")).status == "suspended"
        assert engine.store.statistics().ops > ops_before

        await engine.signal("p", "finish")
        assert await engine.result("p") == "p.child.1"
        assert turns == {"p": 2, "p.child.1": 2}


async def test_cancelling_the_parent_leaves_a_started_child_running(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(detaching_parent, 2, run_id="p")
        await engine.drain()
        await engine.cancel("p")
        with pytest.raises(td.RunCancelled):
            await engine.result("p")
        await engine.drain()
        child = await engine.get("p.child.1")
        assert child.status == "suspended"
        assert child.error is None
        # The child still takes its signal and completes on its own.
        await engine.signal("p.child.1", "go")
        assert await engine.result("p.child.1") == Point(x=4, y=2)


async def test_cancelling_the_parent_cancels_an_awaited_child(
    open_test_engine: EngineFactory,
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(await_kid, 2, run_id="p")
        await engine.drain()
        await engine.cancel("p")
        with pytest.raises(td.RunCancelled):
            await engine.result("p")
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("p.child.2")
        assert info.value.code == "cancelled"
        [_, child_cp] = await engine.store.get_checkpoints("p")
        assert child_cp.status == "failed"
        assert _completion(child_cp) == {
            "ok": False,
            "error": "cancelled",
            "code": "cancelled",
            "details": None,
        }
