"""A cancel that lands while a turn runs never loses a step that turn
completed: the step is recorded, and so undone by ``compensate=True``.

The window is the time between a turn's start and its final write, which
expects the run still ``running``; a cancel moves it to ``cancelling``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, shared_store
from trio_durable._stores._ops import Op, UpdateRun

app = td.App("cancel-window")

undone: Counter[str] = Counter()
booked: Counter[str] = Counter()
# Set by a test to hold `book` inside the turn until the cancel has landed.
gate: list[trio.Event] = []
entered: list[trio.Event] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    undone.clear()
    booked.clear()
    gate.clear()
    entered.clear()


@app.step()
async def book(item: str) -> str:
    booked[item] += 1
    if entered:
        entered[0].set()
    if gate:
        await gate[0].wait()
    return f"booked-{item}"


@app.step()
async def unbook(item: str) -> None:
    undone[item] += 1


@app.workflow()
async def trip(ctx: td.Context, item: str) -> str:
    done = await ctx.step(book, item, compensate=unbook)
    await ctx.sleep(3600)
    return done


async def _assert_undone_once(store: td.Store) -> None:
    run = await store.get_run("t")
    assert run is not None
    assert run.status == "cancelled"
    cps = {cp.seq: cp for cp in await store.get_checkpoints("t")}
    # The step the turn completed is on record, and so is its undo.
    assert (cps[1].name, cps[1].status, cps[1].output) == ("book", "completed", '"booked-x"')
    assert (cps[-1].name, cps[-1].status) == ("unbook", "completed")
    assert booked == {"x": 1}
    assert undone == {"x": 1}


async def test_a_cancel_right_after_start_undoes_the_step_the_first_turn_ran(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(trip, "x", run_id="t")
        # Before the first turn even began: that turn was handed the run as
        # `start` wrote it (running), so it runs the step regardless.
        await engine.cancel("t", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("t")
        await engine.drain()
        await _assert_undone_once(engine.store)
    assert trio.current_time() == 0.0


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(kind: str) -> trio.testing.MockClock:
    """Virtual time that jumps as soon as every task waits, on both stores:
    SQLite keeps its queries on the Trio thread under a mock clock."""
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_cancel_from_another_engine_during_a_turn_undoes_its_step(
    kind: str,
    clock: trio.testing.MockClock,
    tmp_path: Path,
    open_test_engine: EngineFactory,
) -> None:
    gate.append(trio.Event())
    entered.append(trio.Event())
    async with (
        shared_store(kind, tmp_path) as store,
        open_test_engine(app, store=store, engine_id="runner") as runner,
        open_test_engine(app, store=store, engine_id="other") as other,
    ):
        await runner.start(trip, "x", run_id="t")
        # `book` runs inside the runner's turn and holds it there.
        await entered[0].wait()
        await other.cancel("t", compensate=True)
        # The other engine's wake found the run leased to the runner and
        # did nothing; now let the runner's turn reach its final write.
        await trio.testing.wait_all_tasks_blocked()
        assert (await store.get_run("t")).status == "cancelling"  # type: ignore[union-attr]
        gate[0].set()
        with pytest.raises(td.RunCancelled):
            await runner.result("t")
        await runner.drain()
        await other.drain()
        await _assert_undone_once(store)


class _SlowCommit:
    """A memory store whose first write that suspends a run takes as long as
    the test wants, as a database commit takes time."""

    def __init__(self, sequencer: trio.testing.Sequencer) -> None:
        self.inner = td.MemoryStore()
        self._sequencer = sequencer
        self._held = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        suspends = any(
            isinstance(op, UpdateRun) and op.changes.get("status") == "suspended" for op in ops
        )
        if suspends and not self._held:
            self._held = True
            async with self._sequencer(0):
                pass
            async with self._sequencer(2):
                pass
        return await self.inner.apply(ops)


async def test_a_cancel_during_the_final_write_of_a_turn_undoes_its_step(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    """The cancel lands while the turn's final write is in flight, when the
    body already returned and no interrupt can reach it."""
    sequencer = trio.testing.Sequencer()
    store = _SlowCommit(sequencer)
    async with open_test_engine(app, store=store) as engine:
        await engine.start(trip, "x", run_id="t")
        async with sequencer(1):
            await engine.cancel("t", compensate=True)
        with pytest.raises(td.RunCancelled):
            await engine.result("t")
        await engine.drain()
        await _assert_undone_once(store.inner)


class _CountedTurns:
    """A memory store that fails the test once a run begins too many turns
    (a loop of turns that never idles would stop virtual time, and hang)."""

    def __init__(self) -> None:
        self.inner = td.MemoryStore()
        self.turns = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def begin_turn(self, run_id: str, owner: str, expiry: float, now: float) -> Any:
        self.turns += 1
        assert self.turns < 10, "the run's turns loop"
        return await self.inner.begin_turn(run_id, owner, expiry, now)


async def test_a_cancelling_run_past_its_recoveries_ends_dead(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    """Taken over from a dead engine while cancelling, once too often: the
    run ends dead, instead of its turns looping on a write that expects it
    running."""
    store = _CountedTurns()
    # An engine died holding the lease of a run told to cancel.
    ghost = td.Run(
        id="t",
        workflow="trip",
        status="cancelling",
        input='["x"]',
        lease_owner="ghost",
        lease_expiry=WALL_START + 30,
        created_at=WALL_START,
        updated_at=WALL_START,
    )
    await store.inner.create_run(ghost)
    async with open_test_engine(app, store=store, max_recoveries=0) as engine:
        with pytest.raises(td.RunFailed) as info:
            await engine.result("t")
    assert info.value.code == "dead"
    assert trio.current_time() == 30
    assert store.turns == 1
