"""Events and debounce on PostgreSQL: two engines, each with its own
connection to one database as separate processes would have, coalesce a
burst of 50 events into one run per debounced workflow, and store an event
sent through both at once under one id once. Real time (the store's calls
go to threads): the window is a few seconds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

import trio_durable as td
from servers.postgres import scratch_schema

DEBOUNCE = 2.0
TEXTS = [f"t{index:02}" for index in range(50)]

app = td.App("events-postgres")


@app.workflow(events=["typed"], debounce=DEBOUNCE)
async def latest(ctx: td.Context, text: str) -> str:
    return text


@app.workflow(events=["typed"], debounce=DEBOUNCE, debounce_collect="all")
async def collect(ctx: td.Context, texts: list[str]) -> list[str]:
    return texts


@app.workflow(events=["placed"])
async def placed(ctx: td.Context, order: str) -> str:
    return f"placed {order}"


@asynccontextmanager
async def two_engines(
    real_server: Callable[[str], str],
) -> AsyncIterator[tuple[td.Engine, td.Engine]]:
    async with (
        scratch_schema(real_server("postgres")) as url,
        td.open_engine(app, store=url, engine_id="one", seed=1) as one,
        td.open_engine(app, store=url, engine_id="two", seed=2) as two,
    ):
        yield one, two


async def test_a_burst_of_fifty_events_through_two_engines_is_one_run(
    real_server: Callable[[str], str],
) -> None:
    async with two_engines(real_server) as engines:
        receipts = [
            await engines[index % 2].send_event("typed", text, key="doc")
            for index, text in enumerate(TEXTS)
        ]
        last_sent = trio.current_time()
        assert len({r.run_ids for r in receipts}) == 1
        latest_run, collect_run = receipts[0].run_ids
        assert await engines[1].result(collect_run) == TEXTS
        assert await engines[0].result(latest_run) == "t49"
        # Started once the window after the last event had passed.
        assert trio.current_time() - last_sent >= DEBOUNCE * 0.9
        runs = await engines[0].list_runs()
        assert sorted(run.id for run in runs.runs) == [collect_run, latest_run]
        assert len(await engines[1].list_events(limit=100)) == 50


async def test_fifty_events_sent_at_once_through_two_engines_are_one_run(
    real_server: Callable[[str], str],
) -> None:
    async with two_engines(real_server) as engines:
        receipts: list[td.EventReceipt] = []

        async def send(engine: td.Engine, text: str) -> None:
            receipts.append(await engine.send_event("typed", text, key="doc"))

        async with trio.open_nursery() as nursery:
            for index, text in enumerate(TEXTS):
                nursery.start_soon(send, engines[index % 2], text)
        assert len({r.run_ids for r in receipts}) == 1
        latest_run, collect_run = receipts[0].run_ids
        collected = await engines[0].result(collect_run)
        assert sorted(collected) == TEXTS
        assert await engines[1].result(latest_run) == collected[-1]
        runs = await engines[0].list_runs()
        assert len(runs.runs) == 2


async def test_one_event_id_sent_through_two_engines_at_once_is_one_event(
    real_server: Callable[[str], str],
) -> None:
    async with two_engines(real_server) as engines:
        receipts: list[td.EventReceipt] = []

        async def send(engine: td.Engine) -> None:
            receipts.append(await engine.send_event("placed", "o-1", event_id="o-1"))

        async with trio.open_nursery() as nursery:
            for engine in engines * 5:
                nursery.start_soon(send, engine)
        assert {r.run_ids for r in receipts} == {("o-1.placed",)}
        assert await engines[0].result("o-1.placed") == "placed o-1"
        assert [run.id for run in (await engines[1].list_runs()).runs] == ["o-1.placed"]
