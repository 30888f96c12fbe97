"""Schedules across a fleet: two engines on one store, as each store's tests
run them (tests/test_schedules_fleet.py on SQLite,
tests/integration/test_schedules_postgres.py on PostgreSQL).

Each case takes the store's URL and runs under a `trio.testing.MockClock`
the caller gives the test; durable time starts where the case says
(`Wall`), so the ticks cross a real DST change of Europe/Berlin.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Final

import trio

import trio_durable as td
from trio_durable._features.schedules._schedule_spec import tick_stamp

executions: Counter[str] = Counter()
"""How often each run's step ran, by run id (once each, or a tick ran twice)."""


def make_app(name: str) -> tuple[td.App, td.Workflow[[str], str]]:
    """An app with ``tick_job``: a step that counts its executions, then a
    minute's sleep."""
    app = td.App(name)

    @app.step()
    async def record(run_id: str) -> str:
        executions[run_id] += 1
        return run_id

    @app.workflow()
    async def tick_job(ctx: td.Context, label: str) -> str:
        await ctx.step(record, ctx.run_id)
        await ctx.sleep(60)
        return label

    return app, tick_job


def at(text: str) -> float:
    """Durable time of a UTC ISO text (``2026-03-29T00:00:00``)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class Wall:
    """A wall clock that reads ``start`` at Trio time 0 and moves with
    Trio's clock, so engines opened at any moment agree on durable time."""

    def __init__(self, start: float) -> None:
        self.start = start

    def __call__(self) -> float:
        return self.start + trio.current_time()

    async def sleep_until(self, durable: float) -> None:
        await trio.sleep_until(durable - self.start)


DST: Final = {
    # Spring: 02:00 and 02:30 local do not exist on 2026-03-29; the ticks
    # around the gap are 01:00 and 01:30 CET, then 03:00 and 03:30 CEST.
    "spring": (
        "2026-03-28T23:45:00",
        ["2026-03-29T00:00:00Z", "2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z",
         "2026-03-29T01:30:00Z"],
    ),
    # Autumn: 02:00 and 02:30 local happen twice on 2026-10-25 (CEST, then
    # CET): each fires twice, at distinct instants.
    "autumn": (
        "2026-10-24T22:45:00",
        ["2026-10-24T23:00:00Z", "2026-10-24T23:30:00Z", "2026-10-25T00:00:00Z",
         "2026-10-25T00:30:00Z", "2026-10-25T01:00:00Z", "2026-10-25T01:30:00Z",
         "2026-10-25T02:00:00Z", "2026-10-25T02:30:00Z"],
    ),
}  # fmt: skip


async def restart_across_dst(url: str, season: str, *, exact: bool = True) -> None:
    """Two engines tick ``0,30 1-3 * * *`` in Europe/Berlin through a DST
    change; both stop (all engines down) 40 minutes after the first tick
    and start again 40 minutes later: the tick missed meanwhile starts on
    restart (inside the catch-up window), every tick starts exactly once.

    With ``exact`` off (a store whose calls run on threads, so the mock
    clock may move while one is in flight), start times are checked to the
    minute."""
    start, expected = DST[season]
    wall = Wall(at(start))
    executions.clear()
    first = at(expected[0].rstrip("Z"))
    schedule_app, tick_job = make_app("schedule-fleet-dst")
    schedule_app.schedule(
        "berlin",
        tick_job,
        cron="0,30 1-3 * * *",
        timezone="Europe/Berlin",
        args=("night",),
        catchup_window=3600,
    )
    for round_ in range(2):
        async with (
            td.open_engine(schedule_app, store=url, engine_id="a", seed=1, wall_clock=wall) as a,
            td.open_engine(schedule_app, store=url, engine_id="b", seed=2, wall_clock=wall) as b,
        ):
            if round_ == 0:
                await wall.sleep_until(first + 2400)
            else:
                await wall.sleep_until(at(expected[-1].rstrip("Z")) + 600)
                await a.drain()
                await b.drain()
                info = await a.get_schedule("berlin")
        if round_ == 0:
            await wall.sleep_until(first + 4800)
    ids = sorted(run_id for run_id in executions)
    assert ids == [f"berlin@{stamp}" for stamp in expected]
    assert set(executions.values()) == {1}
    assert info.started == len(expected)
    assert info.missed == 0
    async with td.open_store(url) as store:
        caught_up = await store.get_run(f"berlin@{tick_stamp(first + 3600)}")
        assert caught_up is not None
        assert caught_up.status == "completed"
        # Started when the engines came back, 20 minutes late.
        on_time = await store.get_run(f"berlin@{tick_stamp(first)}")
        assert on_time is not None
        if exact:
            assert caught_up.created_at == first + 4800
            assert on_time.created_at == first
        else:
            assert first + 4800 <= caught_up.created_at < first + 4860
            assert first <= on_time.created_at < first + 60


async def never_twice(url: str, minutes: int = 120) -> None:
    """Two engines tick one schedule every minute for ``minutes``: each tick
    starts one run, whose step runs once, and no tick is left out."""
    wall = Wall(at("2026-06-01T00:00:00"))
    executions.clear()
    app, tick_job = make_app("schedule-fleet")
    async with (
        td.open_engine(app, store=url, engine_id="a", seed=1, wall_clock=wall) as a,
        td.open_engine(app, store=url, engine_id="b", seed=2, wall_clock=wall) as b,
    ):
        with a.subscribe(buffer=1000) as events_a, b.subscribe(buffer=1000) as events_b:
            await a.create_schedule(
                "minutely", tick_job, cron="* * * * *", args=("m",), overlap="allow"
            )
            await wall.sleep_until(wall.start + minutes * 60 + 30)
            await b.pause_schedule("minutely")
            await wall.sleep_until(wall.start + minutes * 60 + 120)
            await a.drain()
            await b.drain()
            info = await b.get_schedule("minutely")
            started = {
                name: [event.run_id for event in _drained(events) if event.kind == "run.started"]
                for name, events in (("a", events_a), ("b", events_b))
            }
            runs = [
                run
                for page in [await a.list_runs(tags=["schedule:minutely"], limit=500)]
                for run in page.runs
            ]
    expected = [f"minutely@{tick_stamp(wall.start + 60 * n)}" for n in range(1, minutes + 1)]
    ticked = sorted(executions)
    assert ticked == expected
    assert Counter(executions.values()) == {1: len(expected)}
    assert info.started == len(expected)
    assert info.skipped == info.missed == 0
    assert sorted(run.id for run in runs) == expected
    # Both engines raced for the ticks, and each tick went to one of them.
    assert started["a"]
    assert started["b"]
    assert sorted(started["a"] + started["b"]) == expected
    assert {run.status for run in runs} == {"completed"}


def _drained(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    got = []
    while True:
        try:
            got.append(events.receive_nowait())
        except trio.WouldBlock:
            return got
