"""Schedules on the memory store under `MockClock`: declaring one in code
and checking it at the call, the run-time calls on the engine and the
client, ticks at exact times, catch-up after an outage and missed ticks,
the three overlap policies, jitter, and ticks across DST changes.

Two engines on one SQLite file and on PostgreSQL: tests/schedule_cases.py.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from schedule_cases import Wall, at
from trio_durable._features.schedules._schedule_spec import (
    SPEC_SCOPE,
    STATE_SCOPE,
    ScheduleSpec,
    tick_stamp,
)

START = at("2026-06-01T00:00:00")

app = td.App("schedules")
log: list[tuple[str, float]] = []
"""(run id, trio time) of each run's first step."""


@pytest.fixture(autouse=True)
def _clear() -> None:
    log.clear()


@app.step()
async def note(run_id: str) -> str:
    log.append((run_id, trio.current_time()))
    return run_id


@app.workflow()
async def job(ctx: td.Context, seconds: int) -> int:
    await ctx.step(note, ctx.run_id)
    await ctx.sleep(seconds)
    return seconds


def ids(*ticks: float) -> list[str]:
    return [f"nightly@{tick_stamp(START + tick)}" for tick in ticks]


def engine(store: td.Store | str = "memory://", **kwargs: Any) -> Any:
    kwargs.setdefault("seed", 0)
    return td.open_engine(app, store=store, wall_clock=Wall(START), **kwargs)


async def started_runs(front: td.Engine | td.Client, name: str = "nightly") -> list[td.Run]:
    page = await front.list_runs(tags=[f"schedule:{name}"], limit=500)
    return sorted(page.runs, key=lambda run: run.id)


# -- declaring ---------------------------------------------------------------


async def test_a_declared_schedule_starts_a_run_at_each_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    every = td.App("every")
    every_log: list[float] = []

    @every.workflow()
    async def tick(ctx: td.Context, label: str) -> str:
        every_log.append(trio.current_time())
        return label

    every.schedule("five", tick, cron="*/5 * * * *", args=("x",))
    async with td.open_engine(every, wall_clock=Wall(START), seed=0) as eng:
        info = await eng.get_schedule("five")
        assert info.next_tick == START + 300
        assert (info.started, info.last_tick, info.last_run_id) == (0, None, None)
        # drain() does not wait for the ticker.
        await eng.drain()
        assert trio.current_time() == 0
        await trio.sleep(16 * 60)
        info = await eng.get_schedule("five")
        runs = (await eng.list_runs(tags=["schedule:five"])).runs
    assert sorted(set(every_log)) == [300, 600, 900]
    assert sorted(run.id for run in runs) == [
        "five@2026-06-01T00:05:00Z",
        "five@2026-06-01T00:10:00Z",
        "five@2026-06-01T00:15:00Z",
    ]
    assert {run.input for run in runs} == {'["x"]'}
    assert info.started == 3
    assert info.last_tick == START + 900
    assert info.last_run_id == "five@2026-06-01T00:15:00Z"
    assert info.next_tick == START + 1200
    assert (info.skipped, info.missed, info.paused) == (0, 0, False)


@pytest.mark.parametrize(
    "options",
    [
        {"cron": "not a cron"},
        {"cron": "61 * * * *"},
        {"cron": "* * * *"},
        {"cron": 5},
        {"timezone": "Mars/Olympus_Mons"},
        {"timezone": ""},
        {"timezone": "../etc/passwd"},
        {"overlap": "sometimes"},
        {"catchup_window": -1},
        {"catchup_window": math.nan},
        {"jitter": math.inf},
        {"jitter": "5"},
        {"jitter": True},
        {"args": (1, 2)},
        {"args": ("not an int",)},
        {"args": (object(),)},
        {"args": 5},
    ],
    ids=repr,
)
async def test_an_invalid_declaration_is_refused(
    options: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    bad = td.App("bad")
    bad_job = bad.workflow(name="job")(job.fn)
    options = {"cron": "* * * * *", **options}
    with pytest.raises(td.ScheduleError):
        bad.schedule("nightly", bad_job, **options)
    assert bad.schedules == []


@pytest.mark.parametrize("name", ["", "has space", "x" * 201, "-lead", 5])
def test_an_invalid_schedule_name_is_refused(name: Any) -> None:
    with pytest.raises(td.ScheduleError, match="name"):
        app.schedule(name, job)


def test_a_schedule_name_is_declared_once() -> None:
    twice = td.App("twice")
    twice.schedule("nightly", "job", cron="0 3 * * *")
    with pytest.raises(td.ScheduleError, match="already declared"):
        twice.schedule("nightly", "job", cron="0 4 * * *")
    assert [spec.cron for spec in twice.schedules] == ["0 3 * * *"]


@pytest.mark.parametrize("front", ["engine", "client"])
async def test_bad_input_at_run_time_writes_nothing(
    front: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = td.MemoryStore()
    async with (
        engine(store) as eng,
        td.open_client(store, app=app, wall_clock=Wall(START)) as client,
    ):
        caller: td.Engine | td.Client = eng if front == "engine" else client
        batches = store.statistics().batches
        bad: list[dict[str, Any]] = [
            {"cron": "every day"},
            {"timezone": "Nowhere/Land"},
            {"overlap": "never"},
            {"jitter": -1},
            {"args": ("x", "y")},
        ]
        for options in bad:
            with pytest.raises(td.ScheduleError):
                await caller.create_schedule("nightly", job, **{"cron": "* * * * *", **options})
        for call in (
            caller.get_schedule,
            caller.pause_schedule,
            caller.resume_schedule,
            caller.trigger_schedule,
            caller.delete_schedule,
        ):
            with pytest.raises(td.ScheduleNotFoundError):
                await call("nightly")
        assert store.statistics().batches == batches
        assert await store.list_values(SPEC_SCOPE) == []
        assert await store.list_values(STATE_SCOPE) == []
        assert await caller.list_schedules() == []
        assert await store.list_runs() == []


# -- the run-time calls --------------------------------------------------------


@pytest.mark.parametrize("front", ["engine", "client"])
async def test_create_pause_resume_trigger_delete_and_list(
    front: str, autojump_clock: trio.testing.MockClock
) -> None:
    store = td.MemoryStore()
    async with (
        engine(store) as eng,
        td.open_client(store, app=app, wall_clock=Wall(START)) as client,
    ):
        caller: td.Engine | td.Client = eng if front == "engine" else client
        info = await caller.create_schedule(
            "nightly", job, cron="*/10 * * * *", args=(60,), overlap="allow", jitter=0
        )
        assert (info.name, info.workflow, info.cron, info.timezone) == (
            "nightly",
            "job",
            "*/10 * * * *",
            "UTC",
        )
        assert (info.overlap, info.catchup_window, info.jitter) == ("allow", 60.0, 0.0)
        assert info.next_tick == START + 600
        assert [s.name for s in await caller.list_schedules()] == ["nightly"]
        await trio.sleep(700)
        assert [run.id for run in await started_runs(caller)] == ids(600)
        # Paused: the ticks of 1200 and 1800 start nothing, and count as nothing.
        paused = await caller.pause_schedule("nightly")
        assert paused.paused
        assert paused.next_tick is None
        assert (await caller.pause_schedule("nightly")).paused
        await trio.sleep(1300)  # to 2000
        assert [run.id for run in await started_runs(caller)] == ids(600)
        # A trigger starts one run now, paused or not.
        handle = await caller.trigger_schedule("nightly")
        assert handle.id == "nightly@trigger-1-2026-06-01T00:33:20.000Z"
        assert await handle.result() == 60
        info = await caller.get_schedule("nightly")
        assert (info.triggered, info.started, info.last_run_id) == (1, 1, handle.id)
        resumed = await caller.resume_schedule("nightly")
        assert not resumed.paused
        assert resumed.next_tick == START + 2400
        await trio.sleep(START + 2500 - eng.clock.now())
        assert [run.id for run in await started_runs(caller)] == [
            *ids(600, 2400),
            handle.id,
        ]
        info = await caller.get_schedule("nightly")
        assert (info.started, info.skipped, info.missed) == (2, 0, 0)
        # Declared again with another cron: the counters stay.
        changed = await caller.create_schedule("nightly", job, cron="0 * * * *", args=(60,))
        assert (changed.cron, changed.started, changed.next_tick) == ("0 * * * *", 2, START + 3600)
        await caller.delete_schedule("nightly")
        with pytest.raises(td.ScheduleNotFoundError):
            await caller.get_schedule("nightly")
        assert await caller.list_schedules() == []
        await trio.sleep(7200)
        # Deleted: no more runs; those it started are kept.
        assert len(await started_runs(caller)) == 3


async def test_a_pause_is_kept_across_a_restart_and_a_new_declaration(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    declared = td.App("declared")
    declared_job = declared.workflow(name="job")(job.fn)
    declared.step(note.fn)
    declared.schedule("nightly", declared_job, cron="*/10 * * * *", args=(1,))
    wall = Wall(START)
    async with td.open_engine(declared, store=store, wall_clock=wall) as eng:
        await trio.sleep(700)
        await eng.pause_schedule("nightly")
    again = td.App("declared")
    again.workflow(name="job")(job.fn)
    again.step(note.fn)
    again.schedule("nightly", "job", cron="*/20 * * * *", args=(1,))
    async with td.open_engine(again, store=store, wall_clock=wall) as eng:
        info = await eng.get_schedule("nightly")
        assert (info.cron, info.paused, info.started) == ("*/20 * * * *", True, 1)
        await trio.sleep(3600)
        assert [run.id for run in await started_runs(eng)] == ids(600)


# -- catch-up and overlap ------------------------------------------------------


async def test_missed_ticks_inside_the_catchup_window_start_after_an_outage(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with engine(store) as eng:
        await eng.create_schedule(
            "nightly", job, cron="*/10 * * * *", args=(5,), overlap="allow", catchup_window=1500
        )
        await trio.sleep(650)
    # Down from 650 to 3700: the ticks of 1200 and 1800 are older than the
    # catch-up window on restart; those of 2400, 3000 and 3600 are not.
    await trio.sleep(3700 - 650)
    async with engine(store) as eng:
        await trio.sleep(1)
        await eng.drain()
        info = await eng.get_schedule("nightly")
        runs = await started_runs(eng)
    assert [run.id for run in runs] == ids(600, 2400, 3000, 3600)
    assert [run.created_at - START for run in runs] == [600, 3700, 3700, 3700]
    assert (info.started, info.missed, info.skipped) == (4, 2, 0)
    assert info.next_tick == START + 4200


async def test_skip_leaves_out_ticks_while_the_last_run_is_open(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with engine() as eng:
        await eng.create_schedule("nightly", job, cron="*/10 * * * *", args=(1300,))
        await trio.sleep(2500)
        info = await eng.get_schedule("nightly")
        runs = await started_runs(eng)
    # 600 runs until 1900: 1200 and 1800 are skipped.
    assert [run.id for run in runs] == ids(600, 2400)
    assert (info.started, info.skipped, info.missed) == (2, 2, 0)


async def test_buffer_one_starts_one_waiting_tick_when_the_run_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with engine() as eng:
        await eng.create_schedule(
            "nightly", job, cron="*/10 * * * *", args=(1300,), overlap="buffer_one"
        )
        await trio.sleep(3300)
        info = await eng.get_schedule("nightly")
        runs = await started_runs(eng)
    # 600 runs until 1900; 1200 waits for it (1800 is skipped) and runs
    # from 1900 to 3200; 2400 waits for that (3000 is skipped).
    assert [run.id for run in runs] == ids(600, 1200, 2400)
    assert [run.created_at - START for run in runs] == [600, 1900, 3200]
    assert sorted(set(log)) == [(run.id, run.created_at - START) for run in runs]
    assert (info.started, info.skipped, info.buffered) == (3, 2, None)


async def test_allow_starts_every_tick(autojump_clock: trio.testing.MockClock) -> None:
    async with engine() as eng:
        await eng.create_schedule(
            "nightly", job, cron="*/10 * * * *", args=(1300,), overlap="allow"
        )
        await trio.sleep(2500)
        info = await eng.get_schedule("nightly")
        runs = await started_runs(eng)
    assert [run.id for run in runs] == ids(600, 1200, 1800, 2400)
    assert (info.started, info.skipped) == (4, 0)


# -- jitter --------------------------------------------------------------------


def test_jitter_is_bounded_and_the_same_for_every_engine() -> None:
    spec = ScheduleSpec(name="nightly", workflow="job", cron="* * * * *", jitter=30)
    again = ScheduleSpec(name="nightly", workflow="job", cron="* * * * *", jitter=30)
    other = ScheduleSpec(name="weekly", workflow="job", cron="* * * * *", jitter=30)
    ticks = [START + 60 * n for n in range(500)]
    delays = [spec.jitter_of(tick) for tick in ticks]
    assert all(0 <= delay < 30 for delay in delays)
    assert delays == [again.jitter_of(tick) for tick in ticks]
    assert delays != [other.jitter_of(tick) for tick in ticks]
    # Spread over the bound, not bunched at one end.
    assert min(delays) < 3
    assert max(delays) > 27
    assert ScheduleSpec(name="n", workflow="job").jitter_of(START) == 0


async def test_a_tick_starts_after_its_jitter(autojump_clock: trio.testing.MockClock) -> None:
    async with engine() as eng:
        await eng.create_schedule(
            "nightly", job, cron="*/10 * * * *", args=(1,), overlap="allow", jitter=120
        )
        await trio.sleep(1900)
        runs = await started_runs(eng)
    spec = ScheduleSpec(name="nightly", workflow="job", cron="*/10 * * * *", jitter=120)
    assert [run.id for run in runs] == ids(600, 1200, 1800)
    assert [run.created_at for run in runs] == [
        START + tick + spec.jitter_of(START + tick) for tick in (600, 1200, 1800)
    ]


# -- DST -----------------------------------------------------------------------


def ticks_from(spec: ScheduleSpec, start: str, count: int) -> list[str]:
    tick, found = at(start), []
    for _ in range(count):
        tick = spec.next_tick(tick)
        found.append(tick_stamp(tick))
    return found


def test_a_local_time_that_does_not_exist_fires_after_the_gap() -> None:
    # New York, 2026-03-08: 02:00 to 02:59 do not exist. The 02:30 tick of
    # that day fires at 03:00 EDT (07:00Z), the first instant after the gap.
    daily = ScheduleSpec(name="n", workflow="w", cron="30 2 * * *", timezone="America/New_York")
    assert ticks_from(daily, "2026-03-06T12:00:00", 3) == [
        "2026-03-07T07:30:00Z",  # 02:30 EST
        "2026-03-08T07:00:00Z",  # 03:00 EDT
        "2026-03-09T06:30:00Z",  # 02:30 EDT
    ]
    # A tick at 03:00 already: the one out of the gap merges with it.
    hourly = ScheduleSpec(name="n", workflow="w", cron="0 1-4 * * *", timezone="America/New_York")
    assert ticks_from(hourly, "2026-03-08T05:30:00", 3) == [
        "2026-03-08T06:00:00Z",  # 01:00 EST
        "2026-03-08T07:00:00Z",  # 03:00 EDT
        "2026-03-08T08:00:00Z",  # 04:00 EDT
    ]


def test_a_local_time_that_happens_twice_fires_twice() -> None:
    # New York, 2026-11-01: 01:00 to 01:59 happen in EDT, then in EST.
    daily = ScheduleSpec(name="n", workflow="w", cron="30 1 * * *", timezone="America/New_York")
    assert ticks_from(daily, "2026-10-31T12:00:00", 3) == [
        "2026-11-01T05:30:00Z",  # 01:30 EDT
        "2026-11-01T06:30:00Z",  # 01:30 EST
        "2026-11-02T06:30:00Z",
    ]
    # From inside the repeated hour, the next tick is the second 01:30.
    assert ticks_from(daily, "2026-11-01T05:45:00", 1) == ["2026-11-01T06:30:00Z"]


async def test_ticks_across_a_dst_change_on_an_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    wall = Wall(at("2026-03-08T05:00:00"))
    async with td.open_engine(app, wall_clock=wall, seed=0) as eng:
        await eng.create_schedule(
            "nightly", job, cron="30 * * * *", timezone="America/New_York", args=(1,)
        )
        await wall.sleep_until(at("2026-03-08T09:00:00"))
        runs = await started_runs(eng)
    assert [run.id for run in runs] == [
        "nightly@2026-03-08T05:30:00Z",  # 00:30 EST
        "nightly@2026-03-08T06:30:00Z",  # 01:30 EST
        "nightly@2026-03-08T07:30:00Z",  # 03:30 EDT
        "nightly@2026-03-08T08:30:00Z",  # 04:30 EDT
    ]


# -- reaching engines ----------------------------------------------------------


async def test_a_client_change_reaches_the_engine_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    async with engine(url) as eng, td.open_client(url, wall_clock=Wall(START)) as client:
        await trio.sleep(10)
        # The engine knows no schedule: it waits for an announcement, and
        # nothing else would make it look.
        await client.create_schedule("nightly", "job", cron="* * * * *", args=[1])
        await trio.sleep(100)
        assert [run.id for run in await started_runs(eng)] == ids(60)
        await client.pause_schedule("nightly")
        await trio.sleep(300)
        assert [run.id for run in await started_runs(eng)] == ids(60)
        await client.resume_schedule("nightly")
        await trio.sleep(60)
        assert [run.id for run in await started_runs(eng)] == ids(60, 420)
        handle = await client.trigger_schedule("nightly")
        assert await handle.result() == 1


async def test_a_long_outage_counts_every_missed_tick(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with engine(store) as eng:
        await eng.create_schedule("nightly", job, cron="* * * * *", args=(1,), catchup_window=90)
    # Down for three days: 4,320 ticks, worked off in writes of 1,000.
    await trio.sleep(3 * 86_400 + 30)
    async with engine(store) as eng:
        await trio.sleep(1)
        info = await eng.get_schedule("nightly")
        runs = await started_runs(eng)
    # The ticks of the last 90 s are caught up: one starts, one is skipped
    # (the first's run is still open).
    assert (info.missed, info.started, info.skipped) == (4320 - 2, 1, 1)
    assert [run.id for run in runs] == ids(3 * 86_400 - 60)


class Unannounced:
    """A memory store seen without its watch and change feed: a store on
    which nothing tells an engine of others' writes."""

    HIDDEN = frozenset({"watch", "run_end_event", "due_event", "unwoken_runs", "unwoken_event"})

    def __init__(self, inner: td.MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in self.HIDDEN:
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_without_announcements_an_engine_looks_again_every_reconcile_interval(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = td.MemoryStore()
    store: Any = Unannounced(inner)
    async with (
        engine(store, reconcile_interval=300) as eng,
        td.open_client(inner, wall_clock=Wall(START)) as client,
    ):
        await trio.sleep(10)
        await client.create_schedule("nightly", "job", cron="* * * * *", args=[1], catchup_window=0)
        await trio.sleep(330)
        info = await client.get_schedule("nightly")
        runs = await started_runs(eng)
    # The engine looked at 300: the ticks of 60 to 240 were late by then.
    assert (info.missed, info.started) == (4, 1)
    assert [(run.id, run.created_at - START) for run in runs] == [(ids(300)[0], 300)]


async def test_triggers_at_one_instant_start_a_run_each(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with engine() as eng:
        await eng.create_schedule("nightly", job, cron="0 0 1 1 *", args=(5,))
        first = await eng.trigger_schedule("nightly")
        second = await eng.trigger_schedule("nightly")
        assert [first.id, second.id] == [
            "nightly@trigger-1-2026-06-01T00:00:00.000Z",
            "nightly@trigger-2-2026-06-01T00:00:00.000Z",
        ]
        assert [await first.result(), await second.result()] == [5, 5]
        info = await eng.get_schedule("nightly")
    assert (info.triggered, info.started, info.last_run_id) == (2, 0, second.id)


limited = td.App("limited")
limited_log: list[tuple[str, float]] = []


@limited.workflow(concurrency_key=lambda team: team, max_concurrent=1)
async def one_at_a_time(ctx: td.Context, team: str) -> str:
    limited_log.append((ctx.run_id, trio.current_time()))
    await ctx.sleep(1300)
    return team


async def test_tick_runs_wait_for_their_concurrency_key(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limited_log.clear()
    begun = trio.current_time()
    async with td.open_engine(limited, wall_clock=Wall(START), seed=0) as eng:
        await eng.create_schedule(
            "nightly", one_at_a_time, cron="*/10 * * * *", args=("ops",), overlap="allow"
        )
        await trio.sleep(3300)
    # Each tick starts a run, but the key lets one body run at a time: the
    # run of 1200 waits until 600's ends (1900), 1800's until 3200.
    first_steps: dict[str, float] = {}
    for run_id, at_time in limited_log:
        first_steps.setdefault(run_id, at_time - begun)
    assert first_steps == dict(zip(ids(600, 1200, 1800), [600, 1900, 3200], strict=True))
