"""Signals: `Context.wait_signal` and `Engine.signal`, buffering, order,
typed payloads, timeouts, and the calls that must change nothing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable._base._records import signal_token

app = td.App("signals")

seen: list[Any] = []
"""What bodies observed, turn after turn."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    seen.clear()
    yield
    seen.clear()


def tracking_wall() -> float:
    """A wall clock that moves with Trio's clock, so engines opened at
    different virtual times agree on durable time."""
    return WALL_START + trio.current_time()


@attrs.define(frozen=True)
class Approval:
    by: str
    level: int


@app.workflow()
async def wait_go(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


@app.workflow()
async def nap_then_wait(ctx: td.Context, seconds: float) -> Any:
    await ctx.sleep(seconds)
    payload = await ctx.wait_signal("go")
    seen.append(("got", payload, trio.current_time()))
    return payload


@app.workflow()
async def wait_three(ctx: td.Context) -> list[Any]:
    await ctx.sleep(5)
    return [await ctx.wait_signal("x") for _ in range(3)]


@app.workflow()
async def typed_wait(ctx: td.Context) -> Approval:
    approval = await ctx.wait_signal("approval", type=Approval)
    seen.append(type(approval))
    await ctx.sleep(1)
    assert isinstance(approval, Approval)
    return approval


@app.workflow()
async def wait_with_timeout(ctx: td.Context, seconds: float) -> dict[str, Any]:
    try:
        first = await ctx.wait_signal("go", timeout=seconds)
    except td.SignalTimeout as exc:
        seen.append(("timeout", exc.name, exc.timeout, trio.current_time()))
        first = None
    await ctx.sleep(100)
    second = await ctx.wait_signal("go")
    return {"first": first, "second": second}


@app.workflow()
async def wait_go_with_timeout(ctx: td.Context, seconds: float) -> Any:
    try:
        return await ctx.wait_signal("go", timeout=seconds)
    except td.SignalTimeout:
        seen.append(("timeout", trio.current_time()))
        return "timed out"


@app.workflow()
async def nap_then_wait_with_timeout(ctx: td.Context, nap: float, seconds: float) -> Any:
    await ctx.sleep(nap)
    payload = await ctx.wait_signal("go", timeout=seconds)
    seen.append(("got", payload, trio.current_time()))
    return payload


@app.workflow()
async def fails(ctx: td.Context) -> None:
    raise ValueError("boom")


# -- delivery -----------------------------------------------------------------


async def test_signal_resumes_a_waiting_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_go, run_id="r")
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
        assert await engine.store.signal_waiter(signal_token("r", "go")) == ("r", 1)
        await engine.signal(run.id, "go", {"ok": [1, 2]})
        assert await engine.result(run.id) == {"ok": [1, 2]}
        [cp] = await engine.store.get_checkpoints(run.id)
        assert await engine.store.signal_waiter(signal_token("r", "go")) is None
    assert (cp.kind, cp.name, cp.status, cp.output) == ("signal", "go", "completed", '{"ok":[1,2]}')


async def test_signal_before_the_wait_is_buffered(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(nap_then_wait, 10, run_id="r")
        await engine.drain()
        await engine.signal(run.id, "go", "early")
        assert await engine.store.buffered_signals(signal_token("r", "go")) == ['"early"']
        assert await engine.store.signal_waiter(signal_token("r", "go")) is None
        assert await engine.result(run.id) == "early"
        assert await engine.store.buffered_signals(signal_token("r", "go")) == []
    assert seen == [("got", "early", t0 + 10)]


async def test_buffered_signal_survives_an_engine_restart(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    t0 = trio.current_time()
    async with open_test_engine(app, store=store, wall_clock=tracking_wall) as engine:
        run = await engine.start(nap_then_wait, 10, run_id="r")
        await engine.drain()
        await engine.signal(run.id, "go", "kept")
    # The engine that took the signal is gone before the run waits for it.
    await trio.sleep(3)
    async with open_test_engine(
        app, store=store, engine_id="second", wall_clock=tracking_wall
    ) as engine:
        assert await engine.store.buffered_signals(signal_token("r", "go")) == ['"kept"']
        assert await engine.result(run.id) == "kept"
    assert seen == [("got", "kept", t0 + 10)]


async def test_signals_of_one_name_are_consumed_in_order(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_three, run_id="r")
        await engine.drain()
        # Two arrive while the run sleeps, the third while it waits.
        await engine.signal(run.id, "x", 1)
        await engine.signal(run.id, "x", 2)
        await engine.signal(run.id, "other", "not for x")
        await trio.sleep(5)
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
        assert await engine.store.signal_waiter(signal_token("r", "x")) == ("r", 4)
        await engine.signal(run.id, "x", 3)
        assert await engine.result(run.id) == [1, 2, 3]
        cps = await engine.store.get_checkpoints(run.id)
        assert await engine.store.buffered_signals(signal_token("r", "other")) == ['"not for x"']
    assert [(cp.seq, cp.name, cp.output) for cp in cps if cp.kind == "signal"] == [
        (2, "x", "1"),
        (3, "x", "2"),
        (4, "x", "3"),
    ]


async def test_typed_payload(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(typed_wait, run_id="r")
        await engine.drain()
        await engine.signal(run.id, "approval", Approval(by="ann", level=2))
        result = await engine.result(run.id)
        [cp, _] = await engine.store.get_checkpoints(run.id)
    assert result == Approval(by="ann", level=2)
    assert isinstance(result, Approval)
    # The first turn that took it and the replay after the timer both see an
    # Approval; the store holds JSON.
    assert seen == [Approval, Approval]
    assert cp.output == '{"by":"ann","level":2}'


# -- timeouts -----------------------------------------------------------------


async def test_timeout_raises_signal_timeout_at_the_exact_time(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    token = signal_token("r", "go")
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        start = engine.clock.now()
        run = await engine.start(wait_with_timeout, 30, run_id="r")
        await engine.drain()
        [waiting] = await engine.store.get_checkpoints(run.id)
        assert (waiting.status, waiting.wake_at) == ("pending", start + 30)
        assert (await engine.get(run.id)).wake_at == start + 30
        await trio.sleep(30)
        await engine.drain()
        assert seen == [("timeout", "go", 30, t0 + 30)]
        [timed_out, _timer] = await engine.store.get_checkpoints(run.id)
        assert timed_out.status == "failed"
        assert timed_out.error is not None
        assert timed_out.error.code == "signal_timeout"
        assert timed_out.finished_at == start + 30
        assert await engine.store.signal_waiter(token) is None
        # A signal that comes after the timeout is kept for the next wait; the
        # settled checkpoint does not change.
        await trio.sleep(20)
        await engine.signal(run.id, "go", "late")
        assert await engine.store.buffered_signals(token) == ['"late"']
        assert (await engine.store.get_checkpoints(run.id, 1, 1)) == [timed_out]
        assert await engine.result(run.id) == {"first": None, "second": "late"}
        assert trio.current_time() == t0 + 130
        cps = await engine.store.get_checkpoints(run.id)
    assert cps[0] == timed_out
    assert [(cp.seq, cp.kind, cp.status, cp.output) for cp in cps] == [
        (1, "signal", "failed", None),
        (2, "timer", "completed", None),
        (3, "signal", "completed", '"late"'),
    ]
    # Every replay raised the same SignalTimeout from the record.
    assert seen == [("timeout", "go", 30, t0 + 30)] + [("timeout", "go", 30, t0 + 130)] * 2


async def test_signal_before_the_timeout_wins(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_with_timeout, 30, run_id="r")
        await engine.drain()
        await trio.sleep(10)
        await engine.signal(run.id, "go", "in time")
        await engine.drain()
        [first, _timer] = await engine.store.get_checkpoints(run.id)
        assert (first.status, first.output) == ("completed", '"in time"')
        await trio.sleep(100)
        await engine.drain()
        await engine.signal(run.id, "go", "second")
        assert await engine.result(run.id) == {"first": "in time", "second": "second"}
    assert seen == []


async def test_buffered_signal_is_taken_at_once_by_a_wait_with_a_timeout(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(nap_then_wait_with_timeout, 10, 30, run_id="r")
        await engine.drain()
        await engine.signal(run.id, "go", "waiting for you")
        assert await engine.result(run.id) == "waiting for you"
        assert trio.current_time() == t0 + 10
    assert seen == [("got", "waiting for you", t0 + 10)]


async def test_signal_sent_right_after_start_is_not_lost(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_go_with_timeout, 60, run_id="r")
        await engine.signal(run.id, "go", "right away")
        assert await engine.result(run.id) == "right away"
    assert seen == []


async def test_zero_timeout_with_nothing_buffered_times_out_at_once(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(wait_go_with_timeout, 0, run_id="r")
        assert await engine.result(run.id) == "timed out"
        [cp] = await engine.store.get_checkpoints(run.id)
    assert seen == [("timeout", t0)]
    assert cp.status == "failed"


# -- bad calls change nothing -------------------------------------------------


async def test_signal_to_an_unknown_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        ops = engine.store.statistics().ops
        with pytest.raises(td.RunNotFoundError):
            await engine.signal("nope", "go", 1)
        assert engine.store.statistics().ops == ops
        assert await engine.store.buffered_signals(signal_token("nope", "go")) == []


@pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
async def test_signal_to_an_ended_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, end: str
) -> None:
    async with open_test_engine(app) as engine:
        if end == "failed":
            run = await engine.start(fails, run_id="r")
        else:
            run = await engine.start(wait_go, run_id="r")
            await engine.drain()
            if end == "completed":
                await engine.signal(run.id, "go", 1)
            else:
                await engine.cancel(run.id)
        await engine.drain()
        assert (await engine.get(run.id)).status == end
        ops = engine.store.statistics().ops
        with pytest.raises(td.InvalidRunStateError):
            await engine.signal(run.id, "go", 2)
        assert engine.store.statistics().ops == ops
        assert await engine.store.buffered_signals(signal_token("r", "go")) == []


@pytest.mark.parametrize("payload", [object(), math.nan, {"set": {1, 2}}], ids=repr)
async def test_signal_with_a_payload_that_cannot_be_serialized(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, payload: Any
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_go, run_id="r")
        await engine.drain()
        ops = engine.store.statistics().ops
        with pytest.raises(td.SerializationError):
            await engine.signal(run.id, "go", payload)
        assert engine.store.statistics().ops == ops
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
        assert await engine.store.signal_waiter(signal_token("r", "go")) == ("r", 1)
        assert await engine.store.buffered_signals(signal_token("r", "go")) == []
        # The run still takes a good signal.
        await engine.signal(run.id, "go", "fine")
        assert await engine.result(run.id) == "fine"


async def test_signal_name_must_be_a_non_empty_string(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(wait_go, run_id="r")
        await engine.drain()
        ops = engine.store.statistics().ops
        with pytest.raises(td.UsageError):
            await engine.signal(run.id, "", 1)
        assert engine.store.statistics().ops == ops
