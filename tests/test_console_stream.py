"""``GET /api/runs/{run_id}/stream``: the console follows a run's stream,
one JSON line per value, until the run ends; from an offset; 404 for a
missing run and 400 for a bad offset, before the response starts."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable.console import console_app

app = td.App("console-streams")


@app.workflow()
async def chat(ctx: td.Context) -> str:
    ctx.emit("hello")
    reply = await ctx.wait_signal("reply")
    ctx.emit({"reply": reply})
    return "bye"


@asynccontextmanager
async def api(source: td.Engine) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=console_app(source))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        yield client


async def test_the_console_follows_a_stream_until_the_run_ends(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, store=td.MemoryStore()) as engine, api(engine) as client:
        run = await engine.start(chat, run_id="chat-1")
        answered: list[httpx.Response] = []
        async with trio.open_nursery() as nursery:

            async def follow() -> None:
                answered.append(await client.get(f"/api/runs/{run.id}/stream"))

            nursery.start_soon(follow)
            await trio.sleep(30)
            assert answered == []  # still following: the run waits for its signal
            await engine.signal(run.id, "reply", "hi")
        [response] = answered
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-ndjson"
        assert [json.loads(line) for line in response.text.splitlines()] == [
            {"offset": 0, "value": "hello"},
            {"offset": 1, "value": {"reply": "hi"}},
        ]
        again = await client.get(f"/api/runs/{run.id}/stream", params={"from_offset": 1})
        assert again.text == '{"offset": 1, "value": {"reply": "hi"}}\n'
        missing = await client.get("/api/runs/nobody/stream")
        assert missing.status_code == 404
        bad = await client.get(f"/api/runs/{run.id}/stream", params={"from_offset": -1})
        assert bad.status_code == 400
        unknown = await client.get(f"/api/runs/{run.id}/stream", params={"offset": 1})
        assert unknown.status_code == 400


@app.workflow()
async def chatty(ctx: td.Context, n: int) -> int:
    for i in range(n):
        ctx.emit({"token": i})
        await ctx.sleep(1)
    await ctx.wait_signal("done")
    return n


async def test_the_run_page_shows_the_streams_last_values_and_changes_with_them(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, store=td.MemoryStore()) as engine, api(engine) as client:
        quiet = await engine.start(chat, run_id="quiet")
        await engine.signal(quiet.id, "reply", "x")
        await engine.result(quiet.id)
        page = await client.get("/runs/quiet")
        assert 'id="stream"' in page.text
        assert "2 values" in page.text
        run = await engine.start(chatty, 60, run_id="chatty")
        await trio.sleep(5)
        first = await client.get(f"/runs/{run.id}")
        assert first.status_code == 200
        tag = first.headers["etag"]
        await trio.sleep(60)
        # Each emit changes the run's stamp: the live refresh gets a new page.
        again = await client.get(f"/runs/{run.id}", headers={"If-None-Match": tag})
        assert again.status_code == 200
        assert "60 values" in again.text
        assert "The last 50" in again.text
        assert "{&#34;token&#34;:59}" in again.text
        assert "{&#34;token&#34;:10}" in again.text
        assert "{&#34;token&#34;:9}" not in again.text
        await engine.signal(run.id, "done")
        assert await engine.result(run.id) == 60
