"""Durable timers: `Context.sleep` and `Context.sleep_until`, the due-run
poller's batches and shuffle, and timers across engine restarts."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from trio._core import _run as trio_run

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("timers")

woke: list[tuple[str, float]] = []
"""(run id, `trio.current_time()`) each time a body got past its timer."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    woke.clear()
    yield
    woke.clear()


def tracking_wall() -> float:
    """A wall clock that moves with Trio's clock, so engines opened at
    different virtual times agree on durable time."""
    return WALL_START + trio.current_time()


@app.workflow()
async def nap(ctx: td.Context, seconds: float) -> str:
    await ctx.sleep(seconds)
    woke.append((ctx.run_id, trio.current_time()))
    return ctx.run_id


@app.workflow()
async def nap_until(ctx: td.Context, when: float) -> str:
    await ctx.sleep_until(when)
    woke.append((ctx.run_id, trio.current_time()))
    return ctx.run_id


@app.workflow()
async def nap_until_datetime(ctx: td.Context, iso: str) -> str:
    await ctx.sleep_until(datetime.datetime.fromisoformat(iso))
    woke.append((ctx.run_id, trio.current_time()))
    return ctx.run_id


gate = trio.Event()


@app.step()
async def wait_for_gate() -> None:
    await gate.wait()


@app.workflow()
async def gated_nap(ctx: td.Context, seconds: float) -> str:
    await ctx.step(wait_for_gate)
    await ctx.sleep(seconds)
    woke.append((ctx.run_id, trio.current_time()))
    return ctx.run_id


# -- sleep, sleep_until -------------------------------------------------------


@pytest.mark.parametrize("seconds", [1, 0.5, 12.75, 3600, 86_400 * 7 + 0.125])
async def test_sleep_completes_at_the_exact_virtual_time(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, seconds: float
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            t0 = trio.current_time()
            start = engine.clock.now()
            run = await engine.start(nap, seconds, run_id="r")
            assert await engine.result(run.id) == "r"
            assert trio.current_time() == t0 + seconds
            [cp] = await engine.store.get_checkpoints(run.id)
            kinds = [e.kind for e in _received(events)]
    assert woke == [("r", t0 + seconds)]
    assert (cp.kind, cp.name, cp.status) == ("timer", "sleep", "completed")
    assert cp.enqueued_at == start
    assert cp.wake_at == start + seconds
    assert cp.finished_at == cp.wake_at
    assert kinds == ["run.started", "run.suspended", "run.completed"]


async def test_sleep_zero_does_not_suspend(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            t0 = trio.current_time()
            run = await engine.start(nap, 0, run_id="r")
            await engine.result(run.id)
            kinds = [e.kind for e in _received(events)]
        [cp] = await engine.store.get_checkpoints(run.id)
    assert woke == [("r", t0)]
    assert kinds == ["run.started", "run.completed"]
    assert cp.status == "completed"


async def test_sleep_until_epoch_seconds(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    t_open = trio.current_time()
    async with open_test_engine(app) as engine:
        assert engine.clock.now() == WALL_START
        await trio.sleep(2)  # the target is absolute, not relative to the start
        run = await engine.start(nap_until, WALL_START + 42.5, run_id="r")
        await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
    assert woke == [("r", t_open + 42.5)]
    assert cp.wake_at == WALL_START + 42.5
    assert cp.finished_at == WALL_START + 42.5


@pytest.mark.parametrize(
    "tz",
    [datetime.UTC, datetime.timezone(datetime.timedelta(hours=5, minutes=30))],
    ids=["utc", "plus-0530"],
)
async def test_sleep_until_aware_datetime(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, tz: datetime.tzinfo
) -> None:
    when = datetime.datetime.fromtimestamp(WALL_START + 3600, tz=tz)
    t_open = trio.current_time()
    async with open_test_engine(app) as engine:
        run = await engine.start(nap_until_datetime, when.isoformat(), run_id="r")
        await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
    assert woke == [("r", t_open + 3600)]
    assert cp.wake_at == WALL_START + 3600


async def test_sleep_until_a_passed_time_does_not_suspend(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        with engine.subscribe() as events:
            run = await engine.start(nap_until, WALL_START - 10, run_id="r")
            await engine.result(run.id)
            kinds = [e.kind for e in _received(events)]
    assert woke == [("r", t0)]
    assert kinds == ["run.started", "run.completed"]


async def test_sleep_until_a_naive_datetime_fails_the_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(nap_until_datetime, "2030-01-01T00:00:00", run_id="r")
        with pytest.raises(td.RunFailed, match="aware datetime"):
            await engine.result(run.id)
        assert await engine.store.get_checkpoints(run.id) == []
    assert woke == []


# -- a suspended run holds no task ------------------------------------------


def _task_names() -> list[str]:
    names: list[str] = []

    def walk(task: trio.lowlevel.Task) -> None:
        names.append(task.name)
        for nursery in task.child_nurseries:
            for child in nursery.child_tasks:
                walk(child)

    root = trio.lowlevel.current_root_task()
    assert root is not None
    walk(root)
    return names


async def test_a_sleeping_run_holds_no_task(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    global gate
    gate = trio.Event()
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(gated_nap, 60, run_id="r")
        await trio.testing.wait_all_tasks_blocked()
        # While the step runs, the turn is a task of the engine.
        assert "trio_durable turn r" in _task_names()
        assert engine.statistics().runs_active == 1
        gate.set()
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
        # While it sleeps, nothing of it is left but its rows.
        names = _task_names()
        assert "trio_durable due-run poller" in names
        assert not [name for name in names if name.startswith("trio_durable turn")]
        assert engine.statistics().runs_active == 0
        assert trio.current_time() == t0
        await engine.result(run.id)
        assert trio.current_time() == t0 + 60
    assert woke == [("r", t0 + 60)]


# -- restarts -----------------------------------------------------------------


async def test_timer_survives_an_engine_restart(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    t0 = trio.current_time()
    async with open_test_engine(app, store=store, wall_clock=tracking_wall) as engine:
        run = await engine.start(nap, 100, run_id="r")
        await engine.drain()
        assert (await engine.get(run.id)).status == "suspended"
    # No engine at all for a while.
    await trio.sleep(30)
    assert woke == []
    async with open_test_engine(
        app, store=store, engine_id="second", wall_clock=tracking_wall
    ) as engine:
        assert await engine.result(run.id) == "r"
        assert trio.current_time() == t0 + 100
        stored = await engine.get(run.id)
    assert woke == [("r", t0 + 100)]
    assert stored.status == "completed"


async def test_timer_due_while_no_engine_runs_fires_when_one_opens(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = td.MemoryStore()
    t0 = trio.current_time()
    async with open_test_engine(app, store=store, wall_clock=tracking_wall) as engine:
        run = await engine.start(nap, 10, run_id="r")
        await engine.drain()
    await trio.sleep(50)
    async with open_test_engine(
        app, store=store, engine_id="second", wall_clock=tracking_wall
    ) as engine:
        await engine.result(run.id)
    assert woke == [("r", t0 + 50)]


# -- the poller's batches -------------------------------------------------------


class RecordingStore(td.MemoryStore):  # type: ignore[misc]  # final, but a test may peek
    """A memory store that records every `list_due_runs` call."""

    def __init__(self) -> None:
        super().__init__()
        self.due_calls: list[tuple[int, list[str]]] = []

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        found = await super().list_due_runs(now, limit)
        self.due_calls.append((limit, found))
        return found

    def poller_batches(self) -> list[list[str]]:
        """The non-empty listings of the poller (drain() lists with limit 1,
        only to ask whether anything at all is due)."""
        return [found for limit, found in self.due_calls if limit != 1 and found]


def _check_batches(batches: list[list[str]], size: int, total: int) -> None:
    """The first listings take the due runs ``size`` at a time, each run in
    one of them; a later listing may only see again a run whose turn had not
    yet taken it (it is then skipped, as it is queued already)."""
    full, rest = divmod(total, size)
    sizes = [size] * full + ([rest] if rest else [])
    first = batches[: len(sizes)]
    assert [len(batch) for batch in first] == sizes
    listed = [run_id for batch in first for run_id in batch]
    assert len(set(listed)) == total
    for batch in batches[len(sizes) :]:
        assert set(batch) <= set(first[-1])


async def test_poller_takes_due_runs_in_batches(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = RecordingStore()
    async with open_test_engine(app, store=store, timer_batch_size=500) as engine:
        t0 = trio.current_time()
        for i in range(1200):
            await engine.start(nap, 10, run_id=f"r{i:04}")
        await engine.drain()
        assert len(woke) == 0
        store.due_calls.clear()
        await trio.sleep(10)
        await engine.drain()
        statuses = {(await engine.get(f"r{i:04}")).status for i in range(1200)}
        assert statuses == {"completed"}
    assert len(woke) == 1200
    assert {t for _, t in woke} == {t0 + 10}
    # drain() asks with limit 1 whether anything at all is due; every other
    # listing is the poller's.
    _check_batches(store.poller_batches(), 500, 1200)
    assert {limit for limit, _ in store.due_calls if limit != 1} == {500}


class SlowListingStore(td.MemoryStore):  # type: ignore[misc]  # final, but a test may peek
    """A memory store whose listing of due runs takes 2 ms of the clock."""

    def __init__(self, clock: trio.testing.MockClock) -> None:
        super().__init__()
        self.clock = clock

    async def list_due_runs(self, now: float, limit: int) -> list[str]:
        found = await super().list_due_runs(now, limit)
        self.clock.jump(0.002)
        return found


async def test_a_timer_due_while_the_poller_lists_fires_at_once(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    # The poller lists nothing due, and by the time it asks for the next
    # due time, a short timer came due: it lists again at once, instead of
    # waiting for a turn (a third of the lease) that nothing queued.
    async with open_test_engine(app, store=SlowListingStore(autojump_clock)) as engine:
        t0 = trio.current_time()
        for i in range(5):
            await engine.start(nap, 0.001, run_id=f"r{i}")
            assert await engine.result(f"r{i}") == f"r{i}"
        assert trio.current_time() - t0 < 1.0


@pytest.mark.parametrize("size", [0, -1, math.inf, -math.inf, math.nan])
async def test_batch_size_falls_back_to_500(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock, size: float
) -> None:
    store = RecordingStore()
    async with open_test_engine(app, store=store, timer_batch_size=size) as engine:
        await engine.start(nap, 5, run_id="r")
        await engine.result("r")
    poller = {limit for limit, _ in store.due_calls if limit != 1}
    assert poller == {500}


async def test_batch_size_is_used_as_given(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    store = RecordingStore()
    async with open_test_engine(app, store=store, timer_batch_size=7) as engine:
        for i in range(20):
            await engine.start(nap, 5, run_id=f"r{i:02}")
        await engine.drain()
        store.due_calls.clear()
        await trio.sleep(5)
        await engine.drain()
    assert len(woke) == 20
    _check_batches(store.poller_batches(), 7, 20)
    assert {limit for limit, _ in store.due_calls if limit != 1} == {7}


# -- the shuffle ---------------------------------------------------------------


@asynccontextmanager
async def _deterministic_trio(seed: int) -> AsyncIterator[None]:
    """Make Trio's own scheduling order follow ``seed`` (see STYLE.md,
    Determinism), so that what remains to vary is the engine's shuffle."""
    state = trio_run._r.getstate()
    allowed = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    trio_run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    trio_run._r.seed(seed)
    try:
        yield
    finally:
        trio_run._ALLOW_DETERMINISTIC_SCHEDULING = allowed  # type: ignore[misc]
        trio_run._r.setstate(state)


async def _wake_order(open_test_engine: EngineFactory, seed: int) -> list[str]:
    woke.clear()
    async with _deterministic_trio(1234), open_test_engine(app, seed=seed) as engine:
        t0 = trio.current_time()
        for i in range(40):
            await engine.start(nap, 10, run_id=f"r{i:02}")
        await engine.drain()
        await trio.sleep(10)
        await engine.drain()
    assert {t - t0 for _, t in woke} == {10}
    return [run_id for run_id, _ in woke]


async def test_due_runs_are_woken_in_a_seeded_shuffled_order(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    first = await _wake_order(open_test_engine, seed=1)
    again = await _wake_order(open_test_engine, seed=1)
    other = await _wake_order(open_test_engine, seed=2)
    assert sorted(first) == [f"r{i:02}" for i in range(40)]
    assert first == again
    assert sorted(other) == sorted(first)
    assert other != first


# -- long sleeps ----------------------------------------------------------------


async def test_thirty_day_sleep_takes_well_under_a_second(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    thirty_days = 30 * 86_400
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        real_start = time.perf_counter()
        run = await engine.start(nap, thirty_days, run_id="r")
        await engine.result(run.id)
        real = time.perf_counter() - real_start
        assert trio.current_time() == t0 + thirty_days
    assert real < 1.0
    assert woke == [("r", t0 + thirty_days)]


def _received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    out: list[td.Event] = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out
