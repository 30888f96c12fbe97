"""Fork and retry from a seq in the console (docs/console.md,
docs/fork-and-retry.md): the run page's forms, and the JSON API they post
to, with its refusals; over a real engine, through httpx's ASGI transport."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable.console import console_app

app = td.App("console-fork")
TOKEN = "fork-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
calls: list[str] = []
broken: set[str] = set()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    broken.clear()
    yield
    calls.clear()
    broken.clear()


@app.step()
async def load(n: int) -> int:
    calls.append("load")
    return n


@app.step()
async def score(n: int) -> int:
    calls.append("score")
    if "score" in broken:
        raise td.FatalError("score is broken", code="bug")
    return 10 * n


@app.workflow()
async def scoring(ctx: td.Context, n: int) -> int:
    loaded = await ctx.step(load, n)  # seq 1
    return await ctx.step(score, loaded)  # seq 2


@asynccontextmanager
async def console(
    open_test_engine: EngineFactory, token: str | None = TOKEN
) -> AsyncIterator[tuple[td.Engine, httpx.AsyncClient]]:
    async with (
        open_test_engine(app) as engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=console_app(engine, token=token)),
            base_url="http://console",
        ) as http,
    ):
        yield engine, http


def error_of(response: httpx.Response) -> tuple[int, str]:
    body: dict[str, Any] = response.json()
    return response.status_code, str(body["error"]["code"])


async def test_the_run_page_has_the_fork_and_retry_from_forms(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(scoring, 4, run_id="s")
        assert await engine.result("s") == 40
        text = (await http.get("/runs/s")).text
        assert 'data-action="fork" data-run="s"' in text
        assert 'data-action="retry-from" data-run="s"' in text
        assert '<input name="from_seq" type="number" min="1" required>' in text
        assert 'placeholder="s.fork.N"' in text
        script = (await http.get("/static/console.js")).text
        assert "`${run}/fork`" in script
        # The fork's page shows where it came from in its lineage.
        fork = await engine.fork("s", from_seq=2)
        await fork.result()
        page = (await http.get(f"/runs/{fork.id}")).text
        assert 'Forked from: <a class="forked_from" href="/runs/s">s</a> at seq 2' in page
        assert (await engine.run_detail(fork.id)).forked_from == ("s", 2)
        assert (await engine.run_detail("s")).forked_from is None


async def test_the_api_forks_and_retries_from_a_seq(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    broken.add("score")
    async with console(open_test_engine) as (engine, http):
        await engine.start(scoring, 3, run_id="s")
        with pytest.raises(td.RunFailed):
            await engine.result("s")
        broken.clear()
        calls.clear()
        response = await http.post(
            "/api/runs/s/fork", json={"from_seq": 2, "new_run_id": "s-fixed"}, headers=AUTH
        )
        assert response.status_code == 201
        assert response.json() == {
            "run_id": "s-fixed",
            "status": "pending",
            "forked_from": "s",
            "from_seq": 2,
        }
        assert await engine.result("s-fixed") == 30
        response = await http.post(
            "/api/runs/s/fork", json={"from_seq": 1, "new_run_id": None}, headers=AUTH
        )
        assert response.json()["run_id"] == "s.fork.1"
        assert await engine.result("s.fork.1") == 30
        assert calls == ["score", "load", "score"]
        assert (await engine.get("s")).status == "failed"
        response = await http.post("/api/runs/s/retry", json={"from_seq": 2}, headers=AUTH)
        assert response.status_code == 202
        assert response.json() == {"run_id": "s", "status": "pending"}
        assert await engine.result("s") == 30
        # A completed run takes a retry from a seq, not a plain one.
        plain = await http.post("/api/runs/s/retry", json={}, headers=AUTH)
        assert error_of(plain) == (409, "invalid_run_state")


async def test_the_api_refuses_bad_forks_and_writes_nothing(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with console(open_test_engine) as (engine, http):
        await engine.start(scoring, 1, run_id="s")
        await engine.result("s")
        ops = engine.store.statistics().ops
        cases: list[tuple[str, dict[str, Any], tuple[int, str]]] = [
            ("s/fork", {}, (400, "bad_request")),
            ("s/fork", {"from_seq": "2"}, (400, "bad_request")),
            ("s/fork", {"from_seq": True}, (400, "bad_request")),
            ("s/fork", {"from_seq": 9}, (400, "bad_request")),
            ("s/fork", {"from_seq": 1, "new_run_id": 7}, (400, "bad_request")),
            ("s/fork", {"from_seq": 1, "new_run_id": "s"}, (409, "run_conflict")),
            ("nope/fork", {"from_seq": 1}, (404, "run_not_found")),
            ("s/retry", {"from_seq": 0}, (400, "bad_request")),
            ("s/retry", {"from_seq": 1.5}, (400, "bad_request")),
        ]
        for path, body, expected in cases:
            response = await http.post(f"/api/runs/{path}", json=body, headers=AUTH)
            assert error_of(response) == expected, (path, body, response.json())
        message = (await http.post("/api/runs/s/fork", json={"from_seq": 9}, headers=AUTH)).json()
        assert "out of range" in message["error"]["message"]
        assert engine.store.statistics().ops == ops
        unauthorized = await http.post("/api/runs/s/fork", json={"from_seq": 1})
        assert error_of(unauthorized) == (401, "unauthorized")
    async with console(open_test_engine, token=None) as (engine, http):
        await engine.start(scoring, 1, run_id="s")
        await engine.result("s")
        response = await http.post("/api/runs/s/fork", json={"from_seq": 1})
        assert error_of(response) == (403, "read_only")
