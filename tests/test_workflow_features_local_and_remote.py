"""The workflow features a body uses, each scenario run with the body
decided in the engine and on a worker: steps and their retries, timers,
signals, children, fans, the saga, determinism, failures and cancellation.

Each scenario is written once and asserts the same outcome in both modes
(tests/local_and_remote.py sets them up). The operations the engine carries
out for a body are in tests/test_workflow_operations_local_and_remote.py.
Queries and updates are left out: remote workflows do not take them yet.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START
from local_and_remote import STEPS, Body, Harness, Scenario, cases, kit, open_harness

# -- the bodies, each defined once -----------------------------------------------------


async def retried(ctx: td.Context, key: str) -> str:
    return await ctx.step(kit().steps.flaky, key)


async def shouted(ctx: td.Context, text: str) -> list[str]:
    first = await ctx.step(kit().steps.shout, text)
    second = await ctx.step(kit().steps.shout, f"{first}!")
    return [first, second]


async def sleeper(ctx: td.Context) -> list[float]:
    started = ctx.now()
    await ctx.sleep(60)
    await ctx.sleep_until(started + datetime.timedelta(seconds=90))
    return [started.timestamp(), ctx.now().timestamp()]


async def waiter(ctx: td.Context) -> Any:
    return await ctx.wait_signal("go")


async def echo(ctx: td.Context, text: str) -> str:
    return f"echo {text}"


async def parent(ctx: td.Context) -> list[str]:
    awaited = await ctx.child("echo", "awaited")
    started = await ctx.start_child("echo", "started")
    return [awaited, started]


async def fanned(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(kit().steps.double, list(range(n)), concurrency=2)


async def trip(ctx: td.Context) -> str:
    steps = kit().steps
    await ctx.step(steps.book, "flight", compensate=steps.unbook)
    await ctx.step(steps.book, "hotel", compensate=steps.unbook)
    return await ctx.step(steps.decline, "car")


async def dice(ctx: td.Context) -> list[Any]:
    drawn = [ctx.now().timestamp(), ctx.random().randint(0, 10**9), str(ctx.uuid4())]
    # Each replay draws again: every draw of one run must agree.
    kit().journal.append(drawn)
    await ctx.sleep(30)
    return [*drawn, ctx.now().timestamp()]


async def broken(ctx: td.Context, why: str) -> None:
    await ctx.step(kit().steps.note, "before")
    raise td.FatalError(f"broken: {why}", code="broken", details={"why": why})


async def stay(ctx: td.Context, guest: str) -> str:
    steps = kit().steps
    room = await ctx.step(steps.book, guest)
    try:
        await ctx.wait_signal("checked_in", timeout=86_400)
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(steps.unbook, guest)
            await ctx.step(steps.shout, "cleaned")
        raise
    return room


BODIES = (retried, shouted, sleeper, waiter, echo, parent, fanned, trip, dice, broken, stay)


# -- the scenarios ---------------------------------------------------------------------


async def local_step_retried(h: Harness) -> None:
    await h.start("retried", "k", run_id="r")
    assert await h.engine.result("r") == "k ok"
    assert h.journal == ["try k"] * 3
    (entry,) = await h.entries("r", "flaky")
    assert (entry.kind, entry.status, entry.attempts) == ("local", "completed", 3)
    assert [e.message for e in entry.errors] == ["k not yet", "k not yet"]
    # Backoffs of 2 s then 4 s, without jitter, in durable time: recorded at
    # the start, its last attempt started and ended 6 s later, and each
    # failed attempt keeps its own times.
    assert (entry.enqueued_at, entry.started_at, entry.finished_at) == (
        WALL_START,
        WALL_START + 6,
        WALL_START + 6,
    )
    assert [(e.started_at, e.finished_at) for e in entry.errors] == [
        (WALL_START, WALL_START),
        (WALL_START + 2, WALL_START + 2),
    ]


async def remote_steps(h: Harness) -> None:
    await h.start("shouted", "hi", run_id="s")
    assert await h.engine.result("s") == ["HI", "HI!"]
    entries = await h.entries("s", "shout")
    assert [(e.kind, e.group, e.status) for e in entries] == [("remote", STEPS, "completed")] * 2


async def durable_timers(h: Harness) -> None:
    await h.start("sleeper", run_id="t")
    assert await h.engine.result("t") == [WALL_START, WALL_START + 90]
    assert trio.current_time() == 90
    timers = await h.entries("t", "sleep")
    assert [(e.kind, e.status) for e in timers] == [("timer", "completed")] * 2


async def signal_from_the_engine(h: Harness) -> None:
    await h.start("waiter", run_id="w")
    await trio.sleep(5)
    assert (await h.engine.get("w")).status == "suspended"
    await h.engine.signal("w", "go", {"n": 1})
    assert await h.engine.result("w") == {"n": 1}
    (wait,) = await h.entries("w", "go")
    assert (wait.kind, wait.status) == ("signal", "completed")


async def children(h: Harness) -> None:
    await h.start("parent", run_id="p")
    assert await h.engine.result("p") == ["echo awaited", "p.child.2"]
    assert await h.engine.result("p.child.1") == "echo awaited"
    assert await h.engine.result("p.child.2") == "echo started"
    assert (await h.engine.history("p")).children == ("p.child.1", "p.child.2")


async def fan_over_a_remote_step(h: Harness) -> None:
    await h.start("fanned", 5, run_id="f")
    assert await h.engine.result("f") == [0, 2, 4, 6, 8]
    members = await h.entries("f", "double")
    assert [(e.kind, e.status, e.parallel_size) for e in members] == [
        ("remote", "completed", 5)
    ] * 5


async def saga_compensation(h: Harness) -> None:
    await h.start("trip", run_id="trip")
    with pytest.raises(td.RunFailed) as failed:
        await h.engine.result("trip")
    assert (failed.value.code, failed.value.details) == ("sold_out", {"what": "car"})
    assert h.journal == ["book flight", "book hotel", "unbook hotel", "unbook flight"]


async def deterministic_now_and_random(h: Harness) -> None:
    await trio.sleep(7)
    await h.start("dice", run_id="dice")
    result = await h.engine.result("dice")
    assert (result[0], result[3]) == (WALL_START + 7, WALL_START + 37)
    # The body ran more than once (it was replayed after its timer) and drew
    # the same values each time.
    assert len(h.journal) >= 2
    assert all(drawn == result[:3] for drawn in h.journal)


async def body_that_raises(h: Harness) -> None:
    await h.start("broken", "gears", run_id="b")
    with pytest.raises(td.RunFailed) as failed:
        await h.engine.result("b")
    assert (failed.value.code, failed.value.details) == ("broken", {"why": "gears"})
    assert "broken: gears" in str(failed.value)
    assert (await h.engine.get("b")).status == "failed"
    assert h.journal == ["before"]


async def cancellation_cleaned_up(h: Harness) -> None:
    await h.start("stay", "ada", run_id="stay")
    await trio.sleep(60)
    assert (await h.engine.get("stay")).status == "suspended"
    await h.engine.cancel("stay")
    with pytest.raises(td.RunCancelled):
        await h.engine.result("stay")
    # The cleanup's local step ran once, and it waited on a remote step.
    assert h.journal == ["book ada", "unbook ada"]
    (cleaned,) = await h.entries("stay", "shout")
    assert (cleaned.kind, cleaned.status) == ("remote", "completed")


SCENARIOS: tuple[Scenario, ...] = (
    local_step_retried,
    remote_steps,
    durable_timers,
    signal_from_the_engine,
    children,
    fan_over_a_remote_step,
    saga_compensation,
    deterministic_now_and_random,
    body_that_raises,
    cancellation_cleaned_up,
)

KNOWN_GAPS: dict[tuple[str, Body], str] = {}
"""Parametrizations that fail for a gap in the engine, with why (none now)."""


@pytest.mark.parametrize(("scenario", "body"), cases(SCENARIOS, KNOWN_GAPS))
async def test_workflow_feature(
    scenario: Scenario, body: Body, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_harness(body, BODIES) as harness:
        await scenario(harness)
