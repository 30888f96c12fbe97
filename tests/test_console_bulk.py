"""Bulk actions through the console's JSON API (``POST /api/bulk/{action}``,
``GET /api/bulk/{operation}``, ``GET /api/bulk``), over httpx's ASGI
transport with the application's lifespan running, on the memory and
SQLite stores: a dry run counts without the token and writes nothing, an
operation needs the token, runs in the console's nursery and reports its
progress; leaving the lifespan stops it and starting it again resumes it;
bad input and a console without its lifespan are refused. (In Chromium:
tests/integration/test_console_browser.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable.console import console_app

app = td.App("console-bulk")
TOKEN = "bulk-t0ken"
flags = {"fixed": False}


@app.step(retry=td.Retry(attempts=1))
async def ship(order: int) -> int:
    if not flags["fixed"]:
        raise td.FatalError(f"order {order} is stuck", code="stuck")
    return order


@app.workflow()
async def shipping(ctx: td.Context, order: int) -> int:
    return await ctx.step(ship, order)


@app.workflow()
async def waits(ctx: td.Context) -> str:
    return str(await ctx.wait_signal("go"))


@pytest.fixture(autouse=True)
def _broken() -> None:
    flags["fixed"] = False


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'bulk.db'}"


@asynccontextmanager
async def api(
    source: td.Engine | td.Client, *, lifespan: bool = True, token: str | None = TOKEN
) -> AsyncIterator[httpx.AsyncClient]:
    application = console_app(source, token=token)
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        if not lifespan:
            yield client
            return
        async with application.router.lifespan_context(application):
            yield client


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _failed(engine: td.Engine, count: int = 6) -> None:
    for i in range(count):
        await engine.start(shipping, i, run_id=f"ship-{i}")
    await engine.start(waits, run_id="waiting")
    await engine.drain()


async def _followed(client: httpx.AsyncClient, progress: str) -> dict[str, Any]:
    with trio.fail_after(60):
        while True:
            state: dict[str, Any] = (await client.get(progress)).json()
            if state["state"] != "running":
                return state
            await trio.sleep(0.1)


async def test_a_dry_run_counts_and_an_operation_reports_its_progress(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store_url) as engine, api(engine) as client:
        await _failed(engine)
        selection = {"workflow": "shipping", "top_level": True}
        counted = await client.post(
            "/api/bulk/retry", json={"selection": selection, "dry_run": True}
        )
        assert counted.status_code == 200, counted.text
        report = counted.json()
        assert (report["matched"], report["dry_run"], report["acted"]) == (6, True, 0)
        assert report["first_ids"] == [f"ship-{i}" for i in range(5, -1, -1)]
        # Acting needs the token; nothing changed without it.
        refused = await client.post("/api/bulk/retry", json={"selection": selection})
        assert refused.status_code == 401
        assert (await engine.count_runs(status="failed")) == {"failed": 6}

        flags["fixed"] = True
        started = await client.post(
            "/api/bulk/retry", json={"selection": selection, "batch_size": 4}, headers=AUTH
        )
        assert started.status_code == 202, started.text
        body = started.json()
        name = body["operation"]
        assert body["progress"] == f"/api/bulk/{name}"
        assert (body["action"], body["total"]) == ("retry", 6)
        done = await _followed(client, body["progress"])
        assert (done["state"], done["done"], done["total"]) == ("finished", 6, 6)
        assert done["report"]["acted"] == 6
        assert done["report"]["operation"] == f"{name}.1"
        await engine.drain()
        assert await engine.count_runs(workflow="shipping") == {"completed": 6}
        listed = (await client.get("/api/bulk")).json()["operations"]
        assert [op["operation"] for op in listed] == [name]
        # The runs list shows the operation.
        page = (await client.get("/?workflow=shipping")).text
        assert f'data-operation="{name}"' in page
        assert '<td class="bulk-state">finished</td>' in page
        assert """data-selection='{"top_level": true, "workflow": "shipping"}'""" in page


async def test_cancel_and_terminate_with_their_options(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine, api(engine) as client:
        await _failed(engine, 2)
        for i in range(2):
            await engine.start(waits, run_id=f"held-{i}")
        await engine.drain()
        cancel = await client.post(
            "/api/bulk/cancel",
            json={"selection": {"id_prefix": "held-"}, "compensate": True},
            headers=AUTH,
        )
        assert cancel.status_code == 202, cancel.text
        assert (await _followed(client, cancel.json()["progress"]))["report"]["acted"] == 2
        terminate = await client.post(
            "/api/bulk/terminate",
            json={"selection": {"workflow": "waits"}, "reason": "tidy"},
            headers=AUTH,
        )
        assert (await _followed(client, terminate.json()["progress"]))["report"]["acted"] == 1
        with pytest.raises(td.RunTerminated, match="tidy"):
            await engine.result("waiting")


async def test_leaving_the_lifespan_stops_an_operation_and_starting_it_again_resumes(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, store=store_url) as engine:
        await _failed(engine)
        flags["fixed"] = True
        request = {"selection": {"code": "stuck"}, "batch_size": 2}
        async with api(engine) as client:
            started = await client.post("/api/bulk/retry", json=request, headers=AUTH)
            name = started.json()["operation"]
            again = await client.post("/api/bulk/retry", json=request, headers=AUTH)
            assert again.status_code == 409
            assert again.json()["error"]["code"] == "bulk_running"
        # Left before its task ran: stopped, nothing retried.
        assert (await engine.list_runs(status="failed")).runs.__len__() == 6
        async with api(engine) as client:
            resumed = await client.post("/api/bulk/retry", json=request, headers=AUTH)
            assert resumed.json()["operation"] == name
            done = await _followed(client, resumed.json()["progress"])
        assert done["report"]["acted"] == 6
        await engine.drain()
        assert await engine.count_runs(workflow="shipping") == {"completed": 6}


@pytest.mark.parametrize(
    ("path", "body", "status", "code"),
    [
        ("/api/bulk/delete", {}, 404, "no_such_action"),
        ("/api/bulk/retry", {"selection": {"nope": 1}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": []}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"status": 3}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"status": "nope"}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"tags": [1]}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"workflow": 5}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"where": ["x"]}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"created_after": "yesterday"}}, 400, "bad_request"),
        ("/api/bulk/retry", {"selection": {"top_level": "yes"}}, 400, "bad_request"),
        ("/api/bulk/retry", {"compensate": True}, 400, "bad_request"),
        ("/api/bulk/retry", {"dry_run": "yes"}, 400, "bad_request"),
        ("/api/bulk/retry", {"batch_size": 0}, 400, "bad_request"),
        ("/api/bulk/terminate", {"reason": 3}, 400, "bad_request"),
    ],
)
async def test_bad_input_is_refused_and_changes_nothing(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    path: str,
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    async with open_test_engine(app) as engine, api(engine) as client:
        await _failed(engine, 1)
        response = await client.post(path, json=body, headers=AUTH)
        assert response.status_code == status, response.text
        assert response.json()["error"]["code"] == code
        assert (await client.get("/api/bulk")).json() == {"operations": []}
        assert (await engine.get("ship-0")).status == "failed"


async def test_refused_without_a_lifespan_a_token_or_a_known_operation(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        await _failed(engine, 1)
        async with api(engine, lifespan=False) as client:
            # Counting needs no nursery; acting does.
            counted = await client.post("/api/bulk/retry", json={"dry_run": True})
            assert counted.json()["matched"] == 1
            response = await client.post("/api/bulk/retry", json={}, headers=AUTH)
            assert (response.status_code, response.json()["error"]["code"]) == (
                503,
                "no_lifespan",
            )
        async with api(engine, token=None) as client:
            response = await client.post("/api/bulk/retry", json={})
            assert (response.status_code, response.json()["error"]["code"]) == (403, "read_only")
            missing = await client.get("/api/bulk/retry-0000")
            assert (missing.status_code, missing.json()["error"]["code"]) == (
                404,
                "bulk_not_found",
            )
        assert (await engine.get("ship-0")).status == "failed"
