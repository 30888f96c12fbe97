"""Whole-run timeouts: ``@app.workflow(timeout=)`` and ``start(timeout=)``.

A run's deadline is a pending record of kind ``deadline``, written with
the run; when it passes the run is cancelled with
compensation (code ``timeout``), the children it awaits with it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, fixed_wall, shared_store
from trio_durable._features.lifecycle._lifecycle import DEADLINE
from trio_durable._stores._ops import CreateRun, Op
from trio_durable._stores._wrapping import StoreWrapper
from trio_durable.stores import RunRecord

app = td.App("deadlines")

undone: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()


@app.step()
async def undo_book(item: str) -> None:
    undone.append(item)


@app.step()
async def book(item: str) -> str:
    return f"booked-{item}"


@app.step()
async def slow(seconds: float) -> str:
    await trio.sleep(seconds)
    return "slept"


@app.workflow(timeout=60)
async def trip(ctx: td.Context, nap: float) -> str:
    booked = await ctx.step(book, "hotel", compensate=undo_book)
    await ctx.sleep(nap)
    return booked


@app.workflow()
async def waits_for_go(ctx: td.Context) -> str:
    await ctx.step(book, "car", compensate=undo_book)
    return str(await ctx.wait_signal("go"))


@app.workflow()
async def holds_a_long_step(ctx: td.Context) -> str:
    return await ctx.step(slow, 1000.0)


@app.workflow()
async def kid(ctx: td.Context) -> str:
    await ctx.step(book, "kid", compensate=undo_book)
    await ctx.sleep(10_000)
    return "kid done"


@app.workflow()
async def parent(ctx: td.Context) -> str:
    return await ctx.child(kid)


@app.workflow()
async def parent_of_trip(ctx: td.Context) -> str:
    return await ctx.child(trip, 10_000.0)


@app.workflow()
async def looping(ctx: td.Context, i: int) -> int:
    await ctx.sleep(20)
    ctx.continue_as_new(i + 1)


async def _deadline(store: td.Store, run_id: str) -> RunRecord:
    [found] = [r for r in await store.get_records(run_id) if r.kind == DEADLINE]
    return found


async def test_the_workflows_timeout_cancels_the_run_with_compensation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(trip, 3600.0, run_id="t")
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("t")
        assert info.value.code == "timeout"
        assert trio.current_time() == 60.0
        assert undone == ["hotel"]
        run = await engine.get("t")
        assert run.status == "cancelled"
        assert run.error is not None
        assert run.error.details == {"timeout": 60.0}
        cp = await _deadline(store, "t")
        assert (cp.kind, cp.status) == ("deadline", "completed")
        assert cp.wake_at == WALL_START + 60.0


async def test_a_run_that_ends_before_its_deadline_is_unaffected(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(trip, 30.0, run_id="t")
        assert await engine.result("t") == "booked-hotel"
        assert trio.current_time() == 30.0
        await trio.sleep(100)
        await engine.drain()
        assert (await engine.get("t")).status == "completed"
        assert undone == []


async def test_start_timeout_overrides_the_workflows(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(trip, 3600.0, run_id="long", timeout=7200.0)
        assert await engine.result("long") == "booked-hotel"
        await engine.start(trip, 3600.0, run_id="short", timeout=5)
        with pytest.raises(td.RunCancelled):
            await engine.result("short")
        assert trio.current_time() == 3605.0


async def test_a_signal_wait_is_cut_short_by_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        handle = await engine.start(waits_for_go, run_id="w", timeout=90)
        with pytest.raises(td.RunCancelled) as info:
            await handle.result()
        assert info.value.code == "timeout"
        assert trio.current_time() == 90.0
        assert undone == ["car"]


async def test_a_turn_in_flight_is_cut_short_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(holds_a_long_step, run_id="h", timeout=15)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("h")
        assert info.value.code == "timeout"
        assert trio.current_time() == 15.0


async def test_the_children_it_awaits_are_cancelled_with_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(app, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(parent, run_id="p", timeout=100)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("p")
        assert info.value.code == "timeout"
        with pytest.raises(td.RunCancelled) as child:
            await engine.result("p.child.1")
        assert child.value.code == "cancelled"
        assert undone == ["kid"]
        assert trio.current_time() == 100.0


async def test_a_child_of_a_workflow_with_a_timeout_gets_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(parent_of_trip, run_id="p")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("p")
        assert info.value.code == "timeout"
        child = await engine.get("p.child.1")
        assert child.status == "cancelled"
        assert (await _deadline(store, "p.child.1")).wake_at == child.created_at + 60.0


async def test_a_chain_continued_as_new_shares_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(looping, 0, run_id="l", timeout=70)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("l")
        assert info.value.code == "timeout"
        assert trio.current_time() == 70.0
        assert (await engine.get("l.gen.4")).status == "cancelled"
        assert (await _deadline(store, "l.gen.4")).wake_at == WALL_START + 70.0


async def test_a_client_start_takes_a_timeout(autojump_clock: trio.testing.MockClock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall),
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        await client.start(waits_for_go, run_id="c", timeout=45)
        with pytest.raises(td.RunCancelled) as info:
            await client.result("c")
        assert info.value.code == "timeout"
        assert trio.current_time() == 45.0


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), True, "5"])
async def test_a_bad_timeout_is_refused_before_anything_is_written(bad: Any) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=0) as engine,
        td.open_client(store, app=app) as client,
    ):
        with pytest.raises(td.UsageError):
            await engine.start(waits_for_go, run_id="e", timeout=bad)
        with pytest.raises(td.UsageError):
            await client.start(waits_for_go, run_id="c", timeout=bad)
        assert await store.get_run("e") is None
        assert await store.get_run("c") is None


async def test_the_deadline_fires_on_another_engine_after_the_first_stopped(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'deadline.db'}"
    async with td.open_engine(app, store=url, seed=1, wall_clock=fixed_wall) as first:
        await first.start(trip, 3600.0, run_id="t")
        await first.drain()
        assert (await first.get("t")).status == "suspended"
    assert trio.current_time() == 0.0
    async with (
        td.open_engine(app, store=url, seed=2, wall_clock=fixed_wall) as second,
    ):
        with pytest.raises(td.RunCancelled) as info:
            await second.result("t")
        assert info.value.code == "timeout"
        assert trio.current_time() == 60.0
        assert undone == ["hotel"]


@app.workflow()
async def slow_handler(ctx: td.Context, info: dict[str, Any]) -> str:
    await ctx.step(book, "handler", compensate=undo_book)
    await ctx.sleep(10_000)
    return "handled"


@app.step()
async def refuse(item: str) -> str:
    raise td.FatalError(f"no {item}", code="refused")


@app.workflow(on_error=[td.OnError(workflow="slow_handler")])
async def fails_then_handed_off(ctx: td.Context) -> str:
    await ctx.step(book, "ticket", compensate=undo_book)
    await ctx.sleep(10)
    return await ctx.step(refuse, "seat")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_run_handed_to_its_on_error_handler_is_cancelled_at_its_deadline(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, kind: str
) -> None:
    async with (
        shared_store(kind, tmp_path) as store,
        td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine,
    ):
        await engine.start(fails_then_handed_off, run_id="f", timeout=100)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("f")
        assert info.value.code == "timeout"
        # Handed off at 10 s, its deadline still fires at exactly 100 s.
        assert trio.current_time() == 100.0
        # The handler it awaited is cancelled with it, its undo run.
        with pytest.raises(td.RunCancelled) as handler:
            await engine.result("f.onError.0")
        assert handler.value.code == "cancelled"
        assert sorted(undone) == ["handler", "ticket"]
        assert trio.current_time() == 100.0


# -- racing starts of one id: the start that created the run set its deadline ------


@app.workflow()
async def waits_as(ctx: td.Context, who: str) -> str:
    return str(await ctx.wait_signal("go"))


@app.workflow(concurrency_key=lambda who: "one-line")
async def waits_in_line(ctx: td.Context, who: str) -> str:
    return str(await ctx.wait_signal("go"))


class Racing(StoreWrapper):
    """Makes ``count`` starts of ``run_id`` race: a start that reads the
    id first is answered only once every start has read it or written
    its create, so that all of them find the id free and all write."""

    def __init__(self, inner: td.Store, run_id: str, count: int) -> None:
        self.inner = inner
        self._run_id = run_id
        self._left = count
        self._all_in = trio.Event()

    def _arrive(self) -> None:
        self._left -= 1
        if self._left == 0:
            self._all_in.set()

    async def get_run(self, run_id: str) -> td.Run | None:
        found = await self.inner.get_run(run_id)
        if run_id == self._run_id and not self._all_in.is_set():
            self._arrive()
            await self._all_in.wait()
        return found

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        for op in ops:
            creates = isinstance(op, CreateRun) and op.run.id == self._run_id
            if creates and not self._all_in.is_set():
                self._arrive()
        return await self.inner.apply(ops)


TIMEOUTS = {"a": 100.0, "b": 30.0}


@pytest.mark.parametrize("starters", ["one engine", "two engines", "engine and client"])
@pytest.mark.parametrize("workflow", [waits_as, waits_in_line], ids=["batched", "controlled"])
async def test_racing_starts_with_timeouts_keep_the_creators_deadline(
    autojump_clock: trio.testing.MockClock, starters: str, workflow: Any
) -> None:
    memory = td.MemoryStore()
    store = Racing(memory, "r", 2)
    async with (
        td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine,
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as other,
        td.open_client(store, app=app, wall_clock=fixed_wall) as client,
    ):
        second: Any = {"one engine": engine, "two engines": other, "engine and client": client}[
            starters
        ]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(engine.start, workflow, "a", run_id="r", timeout=TIMEOUTS["a"])
            )
            nursery.start_soon(
                partial(second.start, workflow, "b", run_id="r", timeout=TIMEOUTS["b"])
            )
        stored = await memory.get_run("r")
        assert stored is not None
        # One start created the run; the other found it and wrote nothing,
        # so the deadline is the creator's, counted from its creation.
        [creator] = json.loads(stored.input)
        cp = await _deadline(memory, "r")
        assert json.loads(cp.input or "") == {"timeout": TIMEOUTS[creator]}
        assert cp.wake_at == stored.created_at + TIMEOUTS[creator]
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("r")
        assert info.value.code == "timeout"
        assert trio.current_time() == TIMEOUTS[creator]


async def test_a_start_of_an_existing_id_with_a_timeout_leaves_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall) as engine:
        await engine.start(waits_as, "a", run_id="r", timeout=100)
        await trio.sleep(10)
        again = await engine.start(waits_as, "b", run_id="r", timeout=30)
        assert again.input == '["a"]'
        cp = await _deadline(store, "r")
        assert (cp.input, cp.wake_at) == ('{"timeout": 100.0}', WALL_START + 100.0)
        with pytest.raises(td.RunCancelled):
            await engine.result("r")
        assert trio.current_time() == 100.0


# -- a remote workflow (decided on a worker): the engine keeps its deadline -----------

workers = td.App("workers")


@workers.step()
async def remote_undo(item: str) -> None:
    undone.append(item)


@workers.step()
async def remote_book(item: str) -> str:
    return item


@workers.workflow(group="deciders")
async def remote_trip(ctx: td.Context) -> str:
    await ctx.step(remote_book, "plane", compensate=remote_undo)
    await ctx.sleep(3600)
    return "flown"


service = td.App("service")
service.remote_workflow("remote_trip", group="deciders")


async def test_a_remote_workflows_run_is_cancelled_at_its_deadline_with_compensation(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(workers, broker=broker, groups=["deciders"]),
    ):
        await engine.start("remote_trip", run_id="r", timeout=30)
        with pytest.raises(td.RunCancelled) as info:
            await engine.result("r")
        assert info.value.code == "timeout"
        assert trio.current_time() == 30.0
        assert undone == ["plane"]


async def test_a_client_start_by_name_gets_the_workflows_timeout_on_its_first_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=0, wall_clock=fixed_wall),
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        # Without an app, the client cannot know the timeout: the run's
        # first turn records the deadline, counted from its creation.
        await client.start("trip", 3600.0, run_id="named")
        with pytest.raises(td.RunCancelled) as info:
            await client.result("named")
        assert info.value.code == "timeout"
        assert trio.current_time() == 60.0
        assert (await _deadline(store, "named")).wake_at == WALL_START + 60.0
