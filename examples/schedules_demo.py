"""Schedules across a fleet (docs/schedules.md): two engines share a SQLite
file and tick a schedule declared in code through the night the clocks go
forward in Berlin; every engine stops for a while and the tick missed
meanwhile starts when they are back; a client pauses, triggers and resumes
the schedule from outside.

Runs under a `trio.testing.MockClock`, so five hours pass in a moment:

    python examples/schedules_demo.py [path/to/file.db]
"""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import trio
import trio.testing

import trio_durable as td

app = td.App("reports")


@app.step()
async def build_report(team: str) -> str:
    return f"report for {team}"


@app.workflow()
async def nightly_report(ctx: td.Context, team: str) -> str:
    report = await ctx.step(build_report, team)
    await ctx.sleep(600)  # ten minutes of work
    return report


# Every half hour from 01:00 to 03:30, Berlin time. On 2026-03-29, 02:00 and
# 02:30 do not exist there: croniter moves them to 03:00, which is a tick
# anyway.
app.schedule(
    "night-shift",
    nightly_report,
    cron="0,30 1-3 * * *",
    timezone="Europe/Berlin",
    args=("ops",),
    overlap="buffer_one",
    catchup_window=3600,
)

START = datetime(2026, 3, 28, 23, 45, tzinfo=UTC).timestamp()


def utc(durable: float | None) -> str:
    assert durable is not None
    return datetime.fromtimestamp(durable, UTC).strftime("%H:%M")


async def main(db: Path) -> None:
    begun = trio.current_time()

    def wall() -> float:
        return START + trio.current_time() - begun

    async def until(hhmm: str) -> None:
        target = datetime.fromisoformat(f"2026-03-29T{hhmm}:00+00:00").timestamp()
        await trio.sleep_until(begun + target - START)

    url = f"sqlite:///{db}"
    async with (
        td.open_engine(app, store=url, engine_id="engine-a", wall_clock=wall) as a,
        td.open_engine(app, store=url, engine_id="engine-b", wall_clock=wall),
    ):
        info = await a.get_schedule("night-shift")
        print(f"declared {info.name}: next tick {utc(info.next_tick)} UTC")
        await until("00:40")
    print("every engine stops at 00:40 UTC")
    await until("01:20")
    print("engines back at 01:20 UTC")
    async with (
        td.open_engine(app, store=url, engine_id="engine-a", wall_clock=wall) as a,
        td.open_engine(app, store=url, engine_id="engine-b", wall_clock=wall) as b,
        td.open_client(url, wall_clock=wall) as client,
    ):
        await until("01:40")
        await client.pause_schedule("night-shift")
        run = await client.trigger_schedule("night-shift")
        print(f"triggered {run.id}: {await client.result(run.id)}")
        await until("23:10")  # the tick of 23:00 passes while paused
        info = await client.resume_schedule("night-shift")
        print(f"resumed: next tick {utc(info.next_tick)} UTC")
        await until("23:45")
        await a.drain()
        await b.drain()
        page = await client.list_runs(tags=["schedule:night-shift"])
        for found in sorted(page.runs, key=lambda r: r.created_at):
            print(f"{found.id} started {utc(found.created_at)} UTC, {found.status}")
        info = await client.get_schedule("night-shift")
        print(
            f"started {info.started}, skipped {info.skipped}, missed {info.missed},"
            f" triggered {info.triggered}"
        )


if __name__ == "__main__":
    clock = trio.testing.MockClock(autojump_threshold=0)
    if len(sys.argv) > 1:
        trio.run(main, Path(sys.argv[1]), clock=clock)
    else:
        with tempfile.TemporaryDirectory() as folder:
            trio.run(main, Path(folder) / "schedules-demo.db", clock=clock)
