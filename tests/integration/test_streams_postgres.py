"""Run streams on PostgreSQL, each engine and client with its own
connection to one database, as separate processes would have: a client
reads 1,000 small emits once each, told of them by ``LISTEN``/``NOTIFY``;
an engine that dies in the middle of a turn that emitted is replaced by
another, whose replay writes no offset twice. Real time (the store's calls
go to threads)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import trio

import trio_durable as td
from servers.postgres import scratch_schema
from trio_durable._features.messages._streams import stream_scope
from trio_durable._front._engine import crash

EVENTUALLY: Final = 60.0

app = td.App("streams-postgres")
entered = trio.Event()
hang = trio.Event()


@app.workflow()
async def tokens(ctx: td.Context, count: int) -> int:
    for index in range(count):
        ctx.emit(f"t{index}")
        if index % 250 == 249:
            await ctx.sleep(0.01)  # four turns, each replaying the ones before
    return count


@app.step()
async def slow() -> str:
    if not hang.is_set():
        entered.set()
        await trio.sleep_forever()  # the engine dies here
    return "ok"


@app.workflow()
async def emitter(ctx: td.Context) -> str:
    ctx.emit("a")
    await ctx.sleep(0.01)
    ctx.emit("b")
    result = await ctx.step(slow)  # the first engine's turn never commits
    ctx.emit("c")
    return result


async def test_a_client_reads_a_thousand_emits_once_each(
    real_server: Callable[[str], str],
) -> None:
    async with scratch_schema(real_server("postgres")) as url:
        with trio.fail_after(EVENTUALLY):
            async with (
                td.open_engine(app, store=url, seed=1) as engine,
                td.open_client(url) as client,
            ):
                run = await engine.start(tokens, 1000, run_id="t-1")
                items = [item async for item in client.stream(run.id)]
                assert await client.result(run.id) == 1000
                rows: list[Any] = []
                while page := await client.store.list_values(
                    stream_scope(run.id), after=rows[-1].key if rows else None, limit=500
                ):
                    rows.extend(page)
    assert items == [(index, f"t{index}") for index in range(1000)]
    assert len(rows) == 1000
    assert {row.version for row in rows} == {1}


async def test_a_replacement_engine_writes_no_offset_twice(
    real_server: Callable[[str], str],
) -> None:
    async with scratch_schema(real_server("postgres")) as url:
        with trio.fail_after(EVENTUALLY):
            async with td.open_client(url) as client:
                items: list[tuple[int, Any]] = []
                async with trio.open_nursery() as nursery:
                    async with td.open_engine(
                        app, store=url, engine_id="first", lease_ttl=1.0, seed=1
                    ) as first:
                        run = await first.start(emitter, run_id="e-1")

                        async def read() -> None:
                            items.extend([item async for item in client.stream(run.id)])

                        nursery.start_soon(read)
                        await entered.wait()
                        crash(first)
                        hang.set()
                    async with td.open_engine(
                        app, store=url, engine_id="second", lease_ttl=1.0, seed=2
                    ) as second:
                        assert await second.result(run.id) == "ok"
                rows = await client.store.list_values(stream_scope(run.id))
    assert items == [(0, "a"), (1, "b"), (2, "c")]
    assert [(row.value, row.version) for row in rows] == [('"a"', 1), ('"b"', 1), ('"c"', 1)]
