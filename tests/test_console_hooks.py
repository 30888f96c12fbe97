"""The console's webhook and breakpoint routes: ``POST /hooks/{token}``
(no bearer: the token is the credential) and the breakpoint actions
(behind the bearer token), over an engine and over a client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio

import trio_durable as td
from conftest import fixed_wall
from trio_durable.console import console_app

app = td.App("console-hooks")

TOKENS: dict[str, str] = {}
_ARRIVED: dict[str, trio.Event] = {}


@app.step()
async def work(n: int) -> int:
    return n * 2


@app.workflow()
async def hooked(ctx: td.Context) -> Any:
    TOKENS[ctx.run_id] = await ctx.webhook("reply")
    _ARRIVED.setdefault(ctx.run_id, trio.Event()).set()
    return await ctx.wait_signal("reply")


@app.workflow()
async def stepped(ctx: td.Context) -> int:
    doubled = await ctx.step(work, 21)
    return doubled


SECRET = "s3cret-token"
AUTH = {"Authorization": f"Bearer {SECRET}"}


@asynccontextmanager
async def console(source: td.Engine | td.Client) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=console_app(source, token=SECRET))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as http:
        yield http


async def _token(run_id: str) -> str:
    await _ARRIVED.setdefault(run_id, trio.Event()).wait()
    return TOKENS[run_id]


@pytest.mark.parametrize("through", ["engine", "client"])
async def test_post_hooks_delivers_once(autojump_clock: trio.abc.Clock, through: str) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=1, wall_clock=fixed_wall) as engine,
        td.open_client(store, wall_clock=fixed_wall) as client,
    ):
        source = engine if through == "engine" else client
        run_id = f"hook-{through}"
        handle = await engine.start(hooked, run_id=run_id)
        with trio.fail_after(30):
            token = await _token(run_id)
        async with console(source) as http:
            missing = await http.post("/hooks/not-a-token", json={"x": 1})
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "webhook_not_found"
            bad = await http.post(f"/hooks/{token}", content=b"{not json")
            assert bad.status_code == 400
            assert bad.json()["error"]["code"] == "bad_json"
            # No bearer needed.
            delivered = await http.post(f"/hooks/{token}", json={"approved": True})
            assert delivered.status_code == 202
            assert delivered.json() == {"delivered": True}
            with trio.fail_after(30):
                assert await handle.result() == {"approved": True}
            used = await http.post(f"/hooks/{token}", json={"approved": False})
            assert used.status_code == 409
            assert used.json()["error"]["code"] == "webhook_used"


async def test_an_empty_body_delivers_null(autojump_clock: trio.abc.Clock) -> None:
    async with td.open_engine(app, seed=2, wall_clock=fixed_wall) as engine:
        handle = await engine.start(hooked, run_id="empty")
        with trio.fail_after(30):
            token = await _token("empty")
        async with console(engine) as http:
            assert (await http.post(f"/hooks/{token}")).status_code == 202
        with trio.fail_after(30):
            assert await handle.result() is None


async def test_breakpoint_routes(autojump_clock: trio.abc.Clock) -> None:
    store = td.MemoryStore()
    async with (
        td.open_engine(app, store=store, seed=3, wall_clock=fixed_wall) as engine,
        td.open_client(store, wall_clock=fixed_wall) as client,
        console(client) as http,
    ):
        body = {"workflow": "stepped", "step": "work"}
        # Actions need the bearer token; reading does not.
        assert (await http.post("/api/breakpoints", json=body)).status_code == 401
        created = await http.post("/api/breakpoints", json=body, headers=AUTH)
        assert created.status_code == 201
        bp = created.json()
        assert (bp["workflow"], bp["step"]) == ("stepped", "work")
        bad = await http.post("/api/breakpoints", json={"workflow": "stepped"}, headers=AUTH)
        assert bad.status_code == 400
        listed = (await http.get("/api/breakpoints")).json()
        assert listed == {"breakpoints": [bp], "paused": []}

        first = await engine.start(stepped, run_id="s1")
        second = await engine.start(stepped, run_id="s2")
        with trio.fail_after(30):
            # As a console polls.
            while True:
                paused = (await http.get("/api/breakpoints")).json()["paused"]
                if len(paused) == 2:
                    break
                await trio.sleep(0.1)
        assert [(p["run_id"], p["seq"], p["step"]) for p in paused] == [
            ("s1", 1, "work"),
            ("s2", 1, "work"),
        ]
        assert (await http.post("/api/runs/s1/continue")).status_code == 401
        assert (await http.post("/api/runs/s1/continue", headers=AUTH)).json() == {
            "continued": True
        }
        skipped = await http.post("/api/runs/s2/skip", json={"output": 7}, headers=AUTH)
        assert skipped.json() == {"skipped": True}
        with trio.fail_after(30):
            assert await first.result() == 42
            assert await second.result() == 7
        again = await http.post("/api/runs/s1/continue", headers=AUTH)
        assert again.status_code == 409
        assert again.json()["error"]["code"] == "invalid_run_state"
        assert (await http.post("/api/runs/nope/skip", headers=AUTH)).status_code == 404

        assert (await http.delete(f"/api/breakpoints/{bp['id']}")).status_code == 401
        cleared = await http.delete(f"/api/breakpoints/{bp['id']}", headers=AUTH)
        assert cleared.json() == {"cleared": True}
        gone = await http.delete(f"/api/breakpoints/{bp['id']}", headers=AUTH)
        assert gone.status_code == 404
        assert gone.json()["error"]["code"] == "breakpoint_not_found"


async def test_breakpoint_actions_are_refused_without_a_configured_token(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with td.open_engine(app, seed=4, wall_clock=fixed_wall) as engine:
        transport = httpx.ASGITransport(app=console_app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://c") as http:
            refused = await http.post("/api/breakpoints", json={"workflow": "w", "step": "s"})
            assert refused.status_code == 403
            assert (await http.get("/api/breakpoints")).status_code == 200
        assert await engine.breakpoints() == []
