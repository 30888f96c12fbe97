"""Terminate and a resumed bulk retry on the real PostgreSQL server: a
terminated run ends ``terminated`` without cleanup, a turn in flight
cannot bring it back, retention prunes it through the index of ended runs
(which holds ``terminated`` from schema version 13); a bulk retry
interrupted after its first batch and called again retries each run
exactly once, though the runs it retried failed again meanwhile."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Callable

import psycopg
import pytest
import trio

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._front._control import terminate_run

app = td.App("pg-terminate")

attempts: Counter[str] = Counter()
cleaned: list[str] = []
entered = trio.Event()
hold = trio.Event()


@app.step(retry=td.Retry(attempts=1))
async def charge(order: str) -> str:
    attempts[order] += 1
    raise td.FatalError("declined", code="declined")


@app.step()
async def slow(x: int) -> int:
    entered.set()
    await hold.wait()
    return x


@app.step()
async def release(x: int) -> None:
    cleaned.append("release")


@app.workflow()
async def checkout(ctx: td.Context, order: str) -> str:
    return await ctx.step(charge, order)


@app.workflow()
async def waits(ctx: td.Context, x: int) -> str:
    try:
        await ctx.wait_signal("go")
    except td.Cancelled:
        with ctx.shield():
            await ctx.step(release, x)
        raise
    return "went"


@app.workflow()
async def in_flight(ctx: td.Context, x: int) -> int:
    await ctx.step(slow, x)
    return x


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


def _ended_index(url: str) -> str:
    base, _, schema = url.rpartition("schema=")
    with psycopg.connect(base.rstrip("?&")) as conn:
        [(definition,)] = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = 'runs_ended'",
            (schema,),
        ).fetchall()
    return str(definition)


async def test_terminate_and_a_resumed_bulk_retry_on_postgres(url: str) -> None:
    async with td.open_engine(app, store=url) as engine:
        await engine.start(waits, 1, run_id="w")
        await engine.drain()
        await engine.terminate("w", reason="obsolete")
        with pytest.raises(td.RunTerminated, match="obsolete"):
            await engine.result("w")
        assert cleaned == []

        # Written as another process would, unannounced: the turn in flight
        # goes on, and its write finds the run being terminated.
        await engine.start(in_flight, 2, run_id="f")
        await entered.wait()
        await terminate_run(engine.store, engine.clock.now(), "f", None, None)
        hold.set()
        with pytest.raises(td.RunTerminated):
            await engine.result("f")
        assert (await engine.get("f")).output is None

        for i in range(25):
            await engine.start(checkout, f"o{i}", run_id=f"o{i:02}")
        await engine.drain()
        selection = td.RunSelection(workflow="checkout", code="declined")

        def interrupt(progress: td.BulkProgress) -> None:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            await engine.retry_many(selection, batch_size=10, on_progress=interrupt)
        await engine.drain()
        report = await engine.retry_many(selection, batch_size=10)
        assert (report.matched, report.acted, report.skipped) == (15, 15, 10)
        await engine.drain()
        assert attempts == Counter({f"o{i}": 2 for i in range(25)})

        assert "'terminated'" in await trio.to_thread.run_sync(_ended_index, url)
        pruned = await engine.prune(td.Retention(terminated=0))
        assert pruned == 2
