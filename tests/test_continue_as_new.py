"""Continue-as-new: `Context.continue_as_new` ends a run and starts its next
generation with a fresh history, linked both ways; results, signals and
cancels follow the chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from trio_durable._features.lifecycle._lifecycle import CONTINUED_AS, CONTINUED_FROM

app = td.App("generations")

BATCH = 10


@app.step()
async def tick(i: int) -> int:
    return i


@app.workflow()
async def counter(ctx: td.Context, start: int, total: int) -> int:
    """Counts to ``total`` with one step per number, continuing as new
    every `BATCH` numbers."""
    i = start
    while i < total:
        await ctx.step(tick, i)
        i += 1
        if i % BATCH == 0 and i < total:
            ctx.continue_as_new(i, total)
    return i


@app.workflow()
async def waiter(ctx: td.Context, round: int) -> list[Any]:
    """Takes a signal per generation, for three generations."""
    got = await ctx.wait_signal("next")
    if round < 3:
        ctx.continue_as_new(round + 1)
    return [round, got]


@app.workflow()
async def continues_badly(ctx: td.Context, x: int) -> str:
    try:
        ctx.continue_as_new("not", "fitting")
    except td.ContinueAsNewError as exc:
        return f"refused: {type(exc).__name__}"
    return "unreachable"


@app.step()
async def step_that_continues(x: int) -> None:
    assert captured is not None
    captured.continue_as_new(x)


captured: td.Context | None = None


@app.workflow()
async def continues_in_a_step(ctx: td.Context, x: int) -> str:
    global captured
    captured = ctx
    try:
        await ctx.step(step_that_continues, x)
    except td.StepFailed as exc:
        return str(exc)
    return "unreachable"


@app.workflow()
async def parent_of_chain(ctx: td.Context) -> int:
    return await ctx.child(counter, 0, 35)


async def _status(client: td.Client, run_id: str) -> str:
    try:
        return (await client.get(run_id)).status
    except td.RunNotFoundError:
        return "missing"


async def _checkpoints(store: td.Store, run_id: str) -> list[td.Checkpoint]:
    return await store.get_checkpoints(run_id)


async def test_a_long_loop_keeps_each_generations_history_bounded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        handle = await engine.start(counter, 0, 1000, run_id="loop")
        assert await engine.result("loop") == 1000
        assert await handle.result() == 1000
        await engine.drain()
        ids = ["loop", *(f"loop.gen.{n}" for n in range(2, 101))]
        assert await engine.result(ids[-1]) == 1000
        assert await engine.result(ids[37]) == 1000
        assert await store.get_run("loop.gen.101") is None
        most = 0
        for n, run_id in enumerate(ids, start=1):
            run = await store.get_run(run_id)
            assert run is not None
            checkpoints = await _checkpoints(store, run_id)
            records = {record.kind: record for record in await store.get_records(run_id)}
            most = max(most, len(checkpoints) + len(records))
            assert len(checkpoints) == BATCH, run_id
            if n < len(ids):
                assert run.status == "completed"
                assert run.output is None
                forward = records[CONTINUED_AS]
                assert forward.status == "completed"
                assert json.loads(forward.output or "") == ids[n]
            else:
                assert run.output == "1000"
                assert CONTINUED_AS not in records
            if n > 1:
                back = records[CONTINUED_FROM]
                assert json.loads(back.output or "") == ids[n - 2]
                assert json.loads(back.input or "") == {"root": "loop", "generation": n}
                assert json.loads(run.input) == [(n - 1) * BATCH, 1000]
        # Each generation holds its ten steps and its links, nothing more.
        assert most == BATCH + 2


async def test_signals_and_cancel_go_to_the_latest_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(waiter, 1, run_id="w", tags=["t"])
        for payload in ("a", "b"):
            await engine.drain()
            await engine.signal("w", "next", payload)
        await engine.drain()
        latest = await engine.get("w.gen.3")
        assert latest.status == "suspended"
        assert latest.tags == ("t",)
        await engine.cancel("w")
        with pytest.raises(td.RunCancelled):
            await engine.result("w")
        assert (await engine.get("w")).status == "completed"
        assert (await engine.get("w.gen.3")).status == "cancelled"


async def test_the_chain_runs_to_its_end_through_signals(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(waiter, 1, run_id="w")
        for payload in ("a", "b", "c"):
            await engine.drain()
            await engine.signal("w", "next", payload)
        assert await engine.result("w") == [3, "c"]


async def test_bad_inputs_raise_in_the_body_and_write_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(continues_badly, 1, run_id="bad")
        assert await engine.result("bad") == "refused: ContinueAsNewError"
        assert await store.get_run("bad.gen.2") is None
        assert await _checkpoints(store, "bad") == []


async def test_continue_as_new_inside_a_step_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(continues_in_a_step, 1, run_id="s")
        message = await engine.result("s")
        assert "inside step" in message
        assert await store.get_run("s.gen.2") is None


async def test_a_parent_awaits_the_last_generation_of_its_child(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(parent_of_chain, run_id="p")
        assert await engine.result("p") == 35
        last = await engine.get("p.child.1.gen.4")
        assert (last.parent_id, last.parent_seq) == ("p", 1)
        [cp] = await store.get_checkpoints("p", 1, 1)
        assert cp.status == "completed"


async def test_the_chain_is_followed_from_another_engine_on_one_sqlite_file(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'chain.db'}"
    async with (
        td.open_engine(app, store=url, seed=1, wall_clock=fixed_wall) as first,
        td.open_engine(app, store=url, seed=2, wall_clock=fixed_wall) as second,
        td.open_client(url, app=app, wall_clock=fixed_wall) as client,
    ):
        await first.start(waiter, 1, run_id="x")
        await first.drain()
        await second.signal("x", "next", "a")
        await second.drain()
        await first.drain()
        await client.signal("x", "next", "b")
        await first.drain()
        await second.drain()
        # Taken by whichever engine saw the announcement first.
        while await _status(client, "x.gen.3") != "suspended":  # noqa: ASYNC110
            await trio.sleep(0.5)
        await first.signal("x", "next", "c")
        assert await second.result("x") == [3, "c"]
        assert await client.result("x") == [3, "c"]
        handle = await client.start(waiter, 1, run_id="x")
        assert await handle.result() == [3, "c"]


# -- a remote workflow's body (decided on a worker) -----------------------------------

workers = td.App("workers")


@workers.workflow(group="deciders")
async def remote_counter(ctx: td.Context, i: int) -> int:
    if i < 3:
        ctx.continue_as_new(i + 1)
    return i


service = td.App("service")
service.remote_workflow("remote_counter", group="deciders")


async def test_a_remote_workflow_continues_as_new(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        await engine.start("remote_counter", 1, run_id="r")
        assert await engine.result("r") == 3
        assert [(await engine.get(i)).status for i in ("r", "r.gen.2", "r.gen.3")] == [
            "completed"
        ] * 3
