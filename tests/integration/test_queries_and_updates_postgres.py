"""Queries, updates and published values on PostgreSQL: two engines and a
client, each with its own connection to one database as separate processes
would have; the engine that holds the run applies the updates the others
send, and their callers wake on its announcements (``LISTEN``/``NOTIFY``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import trio

import trio_durable as td
from servers.postgres import scratch_schema

EVENTUALLY: Final = 30.0

app = td.App("queries-postgres")


@app.workflow()
async def tally(ctx: td.Context) -> int:
    total = [0]

    @ctx.query("total")
    def read() -> int:
        return total[0]

    @ctx.update("add")
    def add(n: int) -> int:
        total[0] += n
        return total[0]

    ctx.set_event("ready", True)
    await ctx.wait_signal("close", timeout=3600)
    ctx.set_event("closed", total[0])
    return total[0]


async def test_two_engines_and_a_client_on_one_database(
    real_server: Callable[[str], str],
) -> None:
    with trio.fail_after(EVENTUALLY):
        async with (
            scratch_schema(real_server("postgres")) as url,
            td.open_engine(app, store=url, engine_id="one", seed=1) as one,
            td.open_engine(app, store=url, engine_id="two", seed=2) as two,
            td.open_client(url, app=app) as client,
        ):
            await one.start(tally, run_id="t")
            assert await client.get_event("t", "ready") is True
            assert await two.update("t", "add", 2) == 2
            assert await client.update("t", "add", 3) == 5
            assert await one.query("t", "total") == 5
            assert await client.query("t", "total") == 5
            await client.signal("t", "close")
            assert await two.get_event("t", "closed") == 5
            assert await client.result("t") == 5
