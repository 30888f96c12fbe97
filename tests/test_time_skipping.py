"""Time-skipping: under `trio.testing.MockClock(autojump_threshold=0)` a
long `ctx.sleep` costs no more real time than a short one, on every
embedded store, with the engine's default options.

Nothing the engine runs may wake on a timer of Trio's clock while a run
sleeps: not `engine.result` (told of the end), not the due-run poller
(told of due times), not the reconcile pass (told when a run may stall).
Each such wake stops the autojump clock, so a poll every virtual second
made a year-long sleep on SQLite cost an hour of real time. The tests
measure real time with `time.perf_counter`, and, where it says more, count
the store's reads: those must not grow with the length of the sleep.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import fixed_wall
from trio_durable._front._engine import crash

app = td.App("time-skipping")

DAY = 86_400.0

stamps: list[tuple[str, float]] = []
"""(label, Trio time) as the step below records them."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    stamps.clear()
    yield
    stamps.clear()


@app.step()
async def stamp(label: str) -> float:
    stamps.append((label, trio.current_time()))
    return trio.current_time()


@app.step(group="stamps")
async def remote_stamp(label: str) -> float:
    stamps.append((label, trio.current_time()))
    return trio.current_time()


@app.workflow()
async def sleeper(ctx: td.Context, seconds: float) -> list[float]:
    before = await ctx.step(stamp, "before")
    await ctx.sleep(seconds)
    after = await ctx.step(stamp, "after")
    return [before, after]


@app.workflow()
async def remote_sleeper(ctx: td.Context, seconds: float) -> list[float]:
    before = await ctx.step(remote_stamp, "before")
    await ctx.sleep(seconds)
    after = await ctx.step(remote_stamp, "after")
    return [before, after]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'runs.db'}"


@contextmanager
def real_time_limit(seconds: float) -> Iterator[trio.CancelScope]:
    """Cancel the block after ``seconds`` of real time (a thread's timer,
    which the autojump clock does not see), so that a test of code that
    polls fails in seconds instead of running for an hour."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(seconds, token.run_sync_soon, (scope.cancel,))
        timer.start()
        try:
            yield scope
        finally:
            timer.cancel()
            timer.join()
    assert not scope.cancelled_caught, f"took more than {seconds} s of real time"


async def sleep_once(
    engine: td.Engine, days: float, workflow: td.Workflow[..., list[float]] = sleeper
) -> float:
    """Run ``workflow`` (`sleeper`, or `remote_sleeper`) for ``days`` on
    ``engine``; the real seconds it took from the start to the result.
    Checks the virtual times exactly."""
    stamps.clear()
    t0 = trio.current_time()
    began = time.perf_counter()
    run = await engine.start(workflow, days * DAY)
    before, after = await engine.result(run.id)
    took = time.perf_counter() - began
    # The step after the sleep ran at its due time, to the virtual second,
    # and the result came back at that very moment.
    assert (before, after) == (t0, t0 + days * DAY)
    assert stamps == [("before", t0), ("after", t0 + days * DAY)]
    assert trio.current_time() == t0 + days * DAY
    return took


@pytest.mark.parametrize("days", [1, 365])
async def test_a_long_sleep_between_two_steps_takes_well_under_a_second(
    autojump_clock: trio.testing.MockClock, store_url: str, days: int
) -> None:
    with real_time_limit(30.0):
        async with td.open_engine(app, store=store_url) as engine:
            took = await sleep_once(engine, days)
    assert took < 1.0


async def test_a_year_costs_no_more_real_time_than_a_day(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    day: list[float] = []
    year: list[float] = []
    with real_time_limit(30.0):
        async with td.open_engine(app, store=store_url) as engine:
            # Interleaved, and the fastest of each kept: a loaded machine
            # slows single runs, not the shape of the cost.
            for _ in range(5):
                day.append(await sleep_once(engine, 1))
                year.append(await sleep_once(engine, 365))
    assert min(year) < 2 * min(day)


@pytest.mark.parametrize("days", [1, 365])
async def test_a_long_sleep_between_two_remote_steps_takes_well_under_a_second(
    autojump_clock: trio.testing.MockClock, store_url: str, days: int
) -> None:
    # The README's set-up: the embedded memory broker, and a worker inside
    # the engine. Nothing of the worker wakes on a timer (no heartbeat: its
    # announcement lives as long as the broker, in this process).
    with real_time_limit(30.0):
        async with td.open_engine(app, store=store_url, serve=["stamps"]) as engine:
            took = await sleep_once(engine, days, remote_sleeper)
    assert took < 1.0


async def test_a_year_between_remote_steps_costs_no_more_real_time_than_a_day(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    day: list[float] = []
    year: list[float] = []
    with real_time_limit(30.0):
        async with td.open_engine(app, store=store_url, serve=["stamps"]) as engine:
            for _ in range(5):
                day.append(await sleep_once(engine, 1, remote_sleeper))
                year.append(await sleep_once(engine, 365, remote_sleeper))
    assert min(year) < 2 * min(day)


async def test_a_worker_of_its_own_on_the_memory_broker_costs_no_real_time_either(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    # An engine and a worker opened side by side on ``memory://``, each
    # with its default options.
    with real_time_limit(30.0):
        async with (
            td.open_engine(app, store=store_url) as engine,
            td.open_worker(app, groups=["stamps"]),
        ):
            took = await sleep_once(engine, 365, remote_sleeper)
    assert took < 1.0


class CountingStore:
    """Delegates to a store, counting the calls of the reads that a
    periodic scan or poll makes."""

    COUNTED = ("get_run", "list_due_runs", "next_due_time", "list_stalled_runs")

    def __init__(self, inner: td.Store) -> None:
        self.inner = inner
        self.calls = dict.fromkeys(self.COUNTED, 0)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in self.COUNTED:
            return found

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await found(*args, **kwargs)

        return counted


@asynccontextmanager
async def counted_store(url: str) -> AsyncIterator[CountingStore]:
    async with td.open_store(url) as store:
        yield CountingStore(store)


async def test_a_sleeping_run_costs_no_reads_however_long_it_sleeps(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    reads: dict[int, dict[str, int]] = {}
    with real_time_limit(30.0):
        for days in (1, 30, 365):
            async with (
                counted_store(store_url) as store,
                td.open_engine(app, store=store) as engine,
            ):
                await sleep_once(engine, days)
                reads[days] = dict(store.calls)
    # As few reads for a year as for a day: none on a timer. result() read
    # the run once at most (it was told of the end); the reconcile pass
    # made a pass at most (a minute after the run suspended); the poller
    # listed due runs at its wake-ups alone: as the engine opened, as the
    # run suspended and when its timer came due (once more if it got to
    # list again before the engine closed).
    for counts in reads.values():
        assert counts["get_run"] <= 1
        assert counts["list_stalled_runs"] <= 1
        assert counts["list_due_runs"] <= 5
        assert counts["next_due_time"] <= 5


async def test_a_second_engine_and_a_client_see_the_end_through_the_watch(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    # This engine's app lacks the workflow: the run ends on the other one,
    # and only the store's watch tells this one and the client of the end.
    other = td.App("time-skipping-elsewhere")
    ended: dict[str, tuple[list[float], float]] = {}
    with real_time_limit(30.0):
        # One wall clock for all three, so they agree on durable time.
        async with (
            counted_store(url) as watched,
            td.open_engine(app, store=url, wall_clock=fixed_wall) as runner,
            td.open_engine(other, store=watched, wall_clock=fixed_wall) as bystander,
            td.open_client(url, wall_clock=fixed_wall) as client,
        ):
            t0 = trio.current_time()
            began = time.perf_counter()
            run = await runner.start(sleeper, 365 * DAY)

            async def wait(name: str, source: td.Engine | td.Client) -> None:
                ended[name] = (await source.result(run.id), trio.current_time())

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait, "bystander", bystander)
                nursery.start_soon(wait, "client", client)
            took = time.perf_counter() - began
            reads = watched.calls["get_run"]
    end = t0 + 365 * DAY
    assert ended == {"bystander": ([t0, end], end), "client": ([t0, end], end)}
    assert took < 1.0
    # The bystander read the run when it began waiting and once told of
    # its end: never in between.
    assert reads <= 2


@app.workflow()
async def waiter(ctx: td.Context) -> str:
    payload: str = await ctx.wait_signal("go")
    return payload


async def test_a_run_waiting_a_year_for_a_signal_costs_no_scans(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    with real_time_limit(30.0):
        async with (
            counted_store(store_url) as store,
            td.open_engine(app, store=store) as engine,
        ):
            run = await engine.start(waiter)
            await engine.drain()
            began = time.perf_counter()
            await trio.sleep(365 * DAY)
            took = time.perf_counter() - began
            await engine.signal(run.id, "go", "at last")
            assert await engine.result(run.id) == "at last"
    assert took < 1.0
    # A run suspended with no wake time may stall, so the reconcile pass
    # looked once, a minute after it suspended; not every minute since.
    assert store.calls["list_stalled_runs"] <= 2


async def test_a_timer_set_by_an_engine_that_crashed_fires_on_time_on_another(
    autojump_clock: trio.testing.MockClock, store_url: str
) -> None:
    memory = td.MemoryStore()

    def store() -> Any:
        # Each engine opens the SQLite file itself, as a process would; the
        # memory store is one object they share.
        return memory if store_url == "memory://" else store_url

    with real_time_limit(30.0):
        async with td.open_engine(app, store=store(), engine_id="a", wall_clock=fixed_wall) as a:
            # Engine a has looked for due runs and found none: it waits for
            # no time at all, until told of one.
            await trio.testing.wait_all_tasks_blocked()
            async with td.open_engine(
                app, store=store(), engine_id="b", wall_clock=fixed_wall
            ) as b:
                t0 = trio.current_time()
                run = await b.start(sleeper, 30.0)
                await b.drain()
                assert (await b.get(run.id)).status == "suspended"
                crash(b)
            # b died without a word; a fires the timer b set, on time.
            assert await a.result(run.id) == [t0, t0 + 30.0]
            assert trio.current_time() == t0 + 30.0
