"""An engine whose database goes away mid-run keeps its runs: work stops
while the database is unreachable (turns, the poller and the settling of
remote results back off) and resumes, with nothing lost, once it is back."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import trio

import trio_durable as td
from servers import postgres as postgres_server
from servers.fixture import installed

app = td.App("outage")

ran: Counter[str] = Counter()


@app.step()
async def before(key: str) -> str:
    ran[f"{key}:before"] += 1
    return f"{key}-b"


@app.step(group="outage")
async def after(value: str) -> str:
    ran[f"{value}:after"] += 1
    return f"{value}-a"


@app.workflow()
async def sleepy(ctx: td.Context, key: str, seconds: float) -> str:
    value = await ctx.step(before, key)
    await ctx.sleep(seconds)
    return await ctx.step(after, value)


async def test_runs_survive_the_database_going_away_and_coming_back(tmp_path: Path) -> None:
    installed("postgres")
    ran.clear()
    workdir = tmp_path / "private"
    workdir.mkdir()
    url = await trio.to_thread.run_sync(postgres_server.start, workdir)
    try:
        async with td.open_engine(
            app,
            store=url,
            broker="memory://outage",
            serve=["outage"],
            reconcile_interval=1.0,
            lease_ttl=3.0,
        ) as engine:
            for i in range(20):
                # Timers that come due while the database is away, and after.
                await engine.start(sleepy, f"k{i}", 0.5 + 0.2 * i, run_id=f"r{i}")
            await trio.to_thread.run_sync(
                functools.partial(postgres_server.stop, workdir, keep_data=True)
            )
            # Away longer than the leases and most timers.
            await trio.sleep(4.0)
            assert await trio.to_thread.run_sync(postgres_server.start, workdir) == url
            with trio.fail_after(60):
                results = [await engine.result(f"r{i}") for i in range(20)]
        assert results == [f"k{i}-b-a" for i in range(20)]
        # Every step ran; none more than the at-least-once of a turn retried
        # after a failed write.
        assert {key for key in ran} == {f"k{i}:before" for i in range(20)} | {
            f"k{i}-b:after" for i in range(20)
        }
    finally:
        await trio.to_thread.run_sync(postgres_server.stop, workdir)
