"""Runs that act on other runs: ``start_child(..., cancel_with_parent=True)``
and ``ctx.signal`` (a durable message from one run to another, once per
key)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall

app = td.App("messages")

undone: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()


@app.step()
async def undo_hold(name: str) -> None:
    undone.append(name)


@app.step()
async def hold(name: str) -> str:
    return name


@app.workflow()
async def sleeper(ctx: td.Context, name: str) -> str:
    await ctx.step(hold, name, compensate=undo_hold)
    await ctx.sleep(10_000)
    return name


@app.workflow()
async def sleeper_that_continues(ctx: td.Context, name: str, round: int) -> str:
    await ctx.sleep(100)
    ctx.continue_as_new(name, round + 1)


@app.workflow()
async def starter(ctx: td.Context) -> str:
    await ctx.start_child(sleeper, "linked", cancel_with_parent=True)
    await ctx.start_child(sleeper, "free")
    await ctx.start_child(sleeper_that_continues, "chain", 1, cancel_with_parent=True)
    await ctx.sleep(10_000)
    return "done"


async def test_cancel_takes_the_children_started_with_cancel_with_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(starter, run_id="p")
        await trio.sleep(250)
        await engine.drain()
        assert (await engine.get("p.child.3.gen.3")).status == "suspended"
        await engine.cancel("p", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("p")
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.1")
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.3")
        assert (await engine.get("p.child.3.gen.3")).status == "cancelled"
        assert (await engine.get("p.child.2")).status == "suspended"
        # The parent's compensate choice reaches the child.
        assert undone == ["linked"]
        [started] = await store.get_checkpoints("p", 1, 1)
        assert json.loads(started.output or "") == {"id": "p.child.1", "cancel_with_parent": True}
        [free] = await store.get_checkpoints("p", 2, 2)
        assert json.loads(free.output or "") == "p.child.2"


async def test_a_timeout_takes_the_children_started_with_cancel_with_parent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(starter, run_id="p", timeout=50)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("p")
        assert info.value.code == "timeout"
        with pytest.raises(td.RunCancelled):
            await engine.result("p.child.1")
        assert (await engine.get("p.child.2")).status == "suspended"
        assert undone == ["linked"]
        assert trio.current_time() == 50.0


# -- ctx.signal --------------------------------------------------------------------


@app.workflow()
async def receiver(ctx: td.Context, expected: int) -> list[Any]:
    got: list[Any] = []
    for _ in range(expected):
        try:
            got.append(await ctx.wait_signal("note", timeout=1000))
        except td.SignalTimeout:
            got.append("timed out")
    return got


@app.workflow()
async def sender(ctx: td.Context, target: str, payload: Any, key: str | None) -> str:
    await ctx.signal(target, "note", payload, idempotency_key=key)
    # A second turn replays the call: it is not sent again.
    await ctx.sleep(5)
    return "sent"


@app.step()
async def explode(after: str) -> None:
    raise td.FatalError(f"failed after {after}", code="boom")


@app.workflow()
async def sender_that_fails(ctx: td.Context, target: str) -> str:
    await ctx.signal(target, "note", "once")
    await ctx.step(explode, "sending")
    return "unreachable"


@app.workflow()
async def sender_to_nobody(ctx: td.Context, target: str) -> str:
    try:
        await ctx.signal(target, "note", 1)
    except td.SignalTargetNotFoundError as exc:
        return f"{type(exc).__name__}: {exc}"
    except td.InvalidRunStateError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "sent"


@app.workflow()
async def chain_receiver(ctx: td.Context, round: int) -> list[Any]:
    if round < 3:
        await ctx.sleep(10)
        ctx.continue_as_new(round + 1)
    return [round, await ctx.wait_signal("note")]


async def _sent_keys(store: td.Store) -> list[str]:
    return [value.key for value in await store.list_values("signal-key")]


async def test_a_signal_reaches_a_waiting_run_and_a_later_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(receiver, 2, run_id="r")
        await engine.drain()
        await engine.start(sender, "r", {"n": 1}, None, run_id="s1")
        assert await engine.result("s1") == "sent"
        await engine.start(sender, "r", [2], None, run_id="s2")
        assert await engine.result("r") == [{"n": 1}, [2]]
        # s1's result waited for its 5 s sleep; s2's signal woke r at once.
        assert trio.current_time() == 5.0
        assert await _sent_keys(store) == ["s1:1", "s2:1"]
        [cp] = await store.get_checkpoints("s1", 1, 1)
        assert (cp.kind, cp.name, cp.status) == ("signal", "send:note", "completed")
        assert json.loads(cp.output or "") == {"to": "r", "key": "s1:1", "delivered": True}


async def test_one_key_delivers_once_across_runs_and_replays(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(receiver, 2, run_id="r")
        await engine.drain()
        for sender_id in ("a", "b", "c"):
            await engine.start(sender, "r", sender_id, "order-1", run_id=sender_id)
        for sender_id in ("a", "b", "c"):
            assert await engine.result(sender_id) == "sent"
        got = await engine.result("r")
        assert got[1] == "timed out"
        assert got[0] in ("a", "b", "c")
        outputs = [
            json.loads(cp.output or "")
            for sender_id in ("a", "b", "c")
            for cp in await store.get_checkpoints(sender_id, 1, 1)
        ]
        assert sorted(o["delivered"] for o in outputs) == [False, False, True]
        assert await _sent_keys(store) == ["order-1"]


async def test_a_retried_sender_does_not_send_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(receiver, 2, run_id="r")
        await engine.drain()
        await engine.start(sender_that_fails, "r", run_id="s")
        with pytest.raises(td.RunFailed):
            await engine.result("s")
        await engine.retry("s")
        with pytest.raises(td.RunFailed):
            await engine.result("s")
        assert await engine.result("r") == ["once", "timed out"]


async def test_an_unknown_or_ended_target_raises_in_the_body_and_writes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(sender_to_nobody, "ghost", run_id="s")
        assert await engine.result("s") == (
            "SignalTargetNotFoundError: no run 'ghost' to signal in namespace 'default'"
        )
        await engine.start(sender_to_nobody, "s", run_id="late")
        assert await engine.result("late") == (
            "InvalidRunStateError: run 's' is completed; it takes no signals"
        )
        await engine.start(sender_to_nobody, "s", run_id="other", namespace="tenant")
        message = await engine.result("other")
        assert message.startswith("SignalTargetNotFoundError")
        assert await store.get_checkpoints("s") == []
        assert await _sent_keys(store) == []


async def test_a_signal_to_a_run_that_continued_reaches_its_latest_generation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(chain_receiver, 1, run_id="c")
        await trio.sleep(25)
        await engine.drain()
        await engine.start(sender, "c", "hello", None, run_id="s")
        assert await engine.result("c") == [3, "hello"]
        [cp] = await engine.store.get_checkpoints("s", 1, 1)
        assert json.loads(cp.output or "")["to"] == "c.gen.3"


@pytest.mark.parametrize(
    ("target", "name", "key"),
    [("", "note", None), ("r", "", None), ("r", "note", ""), (3, "note", None)],
)
async def test_malformed_arguments_are_refused(
    autojump_clock: trio.testing.MockClock, target: Any, name: Any, key: Any
) -> None:
    bad = td.App("bad")

    @bad.workflow()
    async def malformed(ctx: td.Context) -> str:
        try:
            await ctx.signal(target, name, idempotency_key=key)
        except td.UsageError as exc:
            return type(exc).__name__
        return "sent"

    async with td.open_engine(bad, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(malformed, run_id="m")
        assert await engine.result("m") == "UsageError"


async def test_two_engines_on_one_sqlite_file_deliver_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'signals.db'}"
    async with (
        td.open_engine(app, store=url, seed=1, wall_clock=fixed_wall) as first,
        td.open_engine(app, store=url, seed=2, wall_clock=fixed_wall) as second,
    ):
        await second.start(receiver, 2, run_id="r")
        await second.drain()
        await first.start(sender, "r", "from first", "k", run_id="a")
        await second.start(sender, "r", "from second", "k", run_id="b")
        assert await first.result("a") == "sent"
        assert await second.result("b") == "sent"
        got = await first.result("r")
        assert got[1] == "timed out"
        assert got[0] in ("from first", "from second")


# -- a remote workflow's body (decided on a worker) -----------------------------------

workers = td.App("workers")


@workers.workflow(group="deciders")
async def remote_sender(ctx: td.Context, target: str) -> str:
    await ctx.signal(target, "note", 1)
    return "sent"


@workers.workflow(group="deciders")
async def remote_starter(ctx: td.Context) -> str:
    await ctx.start_child("remote_sender", "x", cancel_with_parent=True)
    return "started"


service = td.App("service")
service.remote_workflow("remote_sender", group="deciders")
service.remote_workflow("remote_starter", group="deciders")


async def test_a_remote_workflow_signals_and_starts_children_cancelled_with_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        await engine.start("remote_starter", run_id="w")
        assert await engine.result("w") == "started"
        # The child signals a run that does not exist: the error a local
        # body gets, as the run's failure.
        with pytest.raises(td.RunFailed, match="no run 'x' to signal"):
            await engine.result("w.child.1")
