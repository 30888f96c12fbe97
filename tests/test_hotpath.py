"""What one run of one remote step costs the engine, pinned as counts: store
calls and transactions, tasks spawned, turns. (Speed is for bench/; these
counts are what the speed comes from.)"""

from __future__ import annotations

import gc
import threading
import types
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory
from trio_durable._brokers._memory import MemoryBroker
from trio_durable._stores._memory import MemoryStore
from trio_durable._stores._sqlite import open_sqlite_store

app = td.App("hotpath")


@app.step(group="work")
async def square(x: int) -> int:
    return x * x


@app.workflow()
async def one_step(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@app.step()
async def slow(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@app.workflow()
async def waits(ctx: td.Context) -> int:
    return int(await ctx.wait_signal("go"))


@app.workflow()
async def one_slow_local_step(ctx: td.Context, seconds: float) -> float:
    return await ctx.step(slow, seconds)


_COUNTED = ("apply", "begin_turn", "get_run", "get_checkpoints", "count_checkpoints")


def counting(store: MemoryStore) -> Counter[str]:
    """Count the store's calls by method, from now on."""
    calls: Counter[str] = Counter()
    for name in _COUNTED:
        method: Callable[..., Awaitable[Any]] = getattr(store, name)

        def counted(*args: Any, _name: str = name, _method: Any = method, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _method(*args, **kwargs)

        setattr(store, name, counted)
    return calls


class Spawns(trio.abc.Instrument):
    """Counts the tasks spawned while on."""

    def __init__(self) -> None:
        self.names: Counter[str] = Counter()

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names[task.name.split(" ")[0]] += 1


async def test_one_remote_step_run_costs_five_transactions_and_no_recheck(
    open_test_engine: EngineFactory,
) -> None:
    store = MemoryStore()
    async with open_test_engine(
        app, store=store, broker=MemoryBroker(), serve=["work"], worker_concurrency=4
    ) as engine:
        stats = store.statistics()
        before = (stats.transactions, stats.ops)
        calls = counting(store)
        run = await engine.start(one_step, 3, run_id="r")
        assert await engine.result(run.id) == 9
        await engine.drain()
        # Create, suspend (checkpoint and run), settle, begin the second
        # turn, end: each one transaction.
        assert (stats.transactions - before[0], stats.ops - before[1]) == (5, 5)
        # The step this turn recorded goes out only after the suspend gave
        # the lease back: no read after the suspend looks for its result.
        assert calls["count_checkpoints"] == 0
        assert calls["begin_turn"] == 1  # the first turn starts from what start wrote
        assert calls["apply"] == 4
        assert engine.statistics().turns == 2


async def test_a_turn_spawns_no_task_of_its_own(open_test_engine: EngineFactory) -> None:
    spawns = Spawns()
    async with open_test_engine(
        app, broker=MemoryBroker(), serve=["work"], worker_concurrency=4
    ) as engine:
        trio.lowlevel.add_instrument(spawns)
        try:
            run = await engine.start(one_step, 3, run_id="r")
            assert await engine.result(run.id) == 9
            await engine.drain()
        finally:
            trio.lowlevel.remove_instrument(spawns)
    # A task per turn (two turns) and one for the worker's attempt (the
    # due-run poller's timers aside): the lease of a turn is kept by the
    # engine's one lease keeper.
    assert {name: n for name, n in spawns.names.items() if "_poller" not in name} == {
        "trio_durable": 2,
        "trio_durable._front._worker.Worker._run_task": 1,
    }


async def test_the_lease_keeper_renews_a_long_turn_every_third_of_the_ttl(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    store = MemoryStore()
    async with open_test_engine(app, store=store, lease_ttl=3.0) as engine:
        run = await engine.start(one_slow_local_step, 9.5, run_id="slow")
        assert await engine.result(run.id) == 9.5
        # Renewed at 1, 2, ..., 9 s of the 9.5 s the body ran (not at the
        # instant it ends, where the order of the two is the scheduler's);
        # never lapsed.
        assert engine._rt.leases.renewals == 9
        assert engine._rt.leases.held == 0
        stored = await engine.get(run.id)
        assert stored.recoveries == 0
        assert trio.current_time() == 9.5


async def test_a_second_engine_cannot_take_a_renewed_run_over(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    store = MemoryStore()
    async with (
        open_test_engine(app, store=store, lease_ttl=3.0) as a,
        open_test_engine(app, store=store, lease_ttl=3.0, seed=1) as b,
    ):
        run = await a.start(one_slow_local_step, 10.0, run_id="slow")
        await trio.sleep(5.0)
        # Well past the first lease's 3 s: b's wake finds it held.
        b._rt.scheduler.wake(run.id)
        assert await a.result(run.id) == 10.0
        assert (await a.get(run.id)).recoveries == 0


async def test_wakes_of_a_queued_turn_add_no_turn(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app, broker=MemoryBroker()) as engine:
        run = await engine.start(one_step, 3, run_id="r")
        await engine.drain()  # suspended: no worker serves the step's group
        turns = engine.statistics().turns
        scheduler = engine._rt.scheduler
        # Three results settled in three batches before the run's turn
        # began: that turn reads all three.
        scheduler.wake(run.id)
        scheduler.wake(run.id)
        scheduler.wake(run.id)
        await engine.drain()
        stats = engine.statistics()
        assert stats.turns - turns == 1
        assert stats.wakes_coalesced == 2


async def test_a_start_then_its_result_read_nothing(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_sqlite_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        calls = counting(store)  # type: ignore[arg-type]
        async with open_test_engine(app, store=store) as engine:
            calls.clear()
            run = await engine.start(one_slow_local_step, 0.25, run_id="a")
            assert await engine.result(run.id) == 0.25
            # (A step shorter than the result's poll interval: no poll.)
            # Created leased to this engine, its first turn not yet begun:
            # nothing can have ended it, and nothing is read.
            assert (calls["get_run"], calls["apply"]) == (0, 2)
            # Once it ended, a result reads it.
            assert await engine.result("a") == 0.25
            assert calls["get_run"] == 1
            # A run that is not this namespace's is missing, however new.
            await engine.start(one_slow_local_step, 0.25, run_id="b")
            with pytest.raises(td.RunNotFoundError):
                await engine.result("b", namespace="other")
            # A first turn that suspends: the waiter still learns the end
            # a later turn writes.
            calls.clear()
            waiting = await engine.start(waits, run_id="c")
            async with trio.open_nursery() as nursery:
                results: list[int] = []

                async def wait() -> None:
                    results.append(await waiting.result())

                nursery.start_soon(wait)
                await engine.drain()
                assert (await engine.get("c")).status == "suspended"
                await engine.signal("c", "go", 7)
            assert results == [7]


@app.step()
async def add_one(x: int) -> int:
    return x + 1


@app.workflow()
async def three_local(ctx: td.Context, x: int) -> int:
    for _ in range(3):
        x = await ctx.step(add_one, x)
    return x


async def test_sqlite_statements_run_on_the_stores_own_thread_alone(
    open_test_engine: EngineFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under Trio's own clock (no autojump): the store hands its trips to its
    # one thread, never to trio's thread cache (`trio.to_thread`), which
    # costs more per hand-off (bench/bench_engine.py).
    path = tmp_path / "runs.db"
    handed: list[Callable[..., Any]] = []
    to_thread = trio.to_thread.run_sync

    async def counted(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return await to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", counted)
    async with open_sqlite_store(f"sqlite:///{path}") as store:
        threads: Counter[str] = Counter()
        store._connection.set_trace_callback(
            lambda _: threads.update([threading.current_thread().name])
        )
        async with open_test_engine(app, store=store) as engine:
            for i in range(5):
                run = await engine.start(three_local, i)
                assert await engine.result(run.id) == i + 3
    monkeypatch.undo()
    own = [fn for fn in handed if fn == store._connection.close or "_run_trip" in repr(fn)]
    # The file's watch looks from a thread of its own, with a connection of
    # its own; every statement of the store's connection ran on its thread.
    assert set(threads) == {f"trio-durable sqlite {path}"}
    assert threads.total() > 5 * 3
    assert own == []


async def test_a_suspending_turn_lets_its_bodys_frames_go_before_it_writes(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    # A suspend's traceback holds the body's frames (and their locals):
    # kept while the turn writes, every run waiting for a group commit
    # holds them, and a full collection walks them all.
    store = MemoryStore()
    apply = store.apply
    seen: list[int] = []

    async def apply_looking(ops: Any) -> Any:
        seen.append(
            sum(
                isinstance(o, types.TracebackType) and _innermost(o) == "remote_step"
                for o in gc.get_objects()
            )
        )
        return await apply(ops)

    async with open_test_engine(app, store=store, broker=MemoryBroker()) as engine:
        store.apply = apply_looking  # type: ignore[method-assign]
        # No worker serves the step: every run's turn suspends on it.
        for i in range(5):
            await engine.start(one_step, i)
        await trio.sleep(1)
        assert engine.statistics().turns == 5
    assert len(seen) >= 5
    assert seen == [0] * len(seen)


def _innermost(tb: types.TracebackType) -> str:
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_name
