"""The console's JSON API (docs/http-api.md), through httpx's ASGI transport
over a real engine running real workflows, on the memory and SQLite stores:
runs and their filters, a run's detail with a wide fan folded and its
lineage, fan pages, history, ETags and 304s, the bearer token, CORS, the
fleet, the queues, /metrics, bad input, and the app mounted in another."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from starlette.applications import Starlette
from starlette.routing import Mount

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable.console import console_app

app = td.App("console-api")
app.queue("gate", concurrency=2)
TOKEN = "s3cret-token"
WIDTH = 30
FAILING = [n for n in range(WIDTH) if n % 7 == 3]
flags = {"fail": True}


@app.step(group="g")
async def work(n: int) -> int:
    if n % 7 == 3:
        raise td.FatalError(f"member {n} refused", code="refused")
    return n


@app.step()
async def local(n: int) -> int:
    return n + 1


@app.step(group="g", queue="gate")
async def gated(n: float) -> float:
    return n


@app.workflow()
async def small(ctx: td.Context, n: int) -> int:
    return await ctx.step(local, n)


@app.workflow()
async def big(ctx: td.Context, width: int) -> int:
    await ctx.step(local, 0)
    settled = await ctx.all_settled(work, list(range(width)))
    child = await ctx.child(small, 1)
    return child + sum(1 for item in settled if item["status"] == "fulfilled")


@app.workflow()
async def handler(ctx: td.Context, info: dict[str, Any]) -> str:
    return f"handled {info['run_id']}"


@app.workflow(on_error=[td.OnError(workflow="handler")])
async def doomed(ctx: td.Context) -> str:
    raise td.FatalError("it had to fail", code="doom")


@app.workflow()
async def waiter(ctx: td.Context) -> str:
    got = await ctx.wait_signal("go", type=str)
    return f"got {got}"


@app.workflow()
async def sleeper(ctx: td.Context, seconds: float) -> float:
    await ctx.sleep(seconds)
    return await ctx.step(gated, seconds)


@app.step()
async def fickle() -> str:
    if flags["fail"]:
        raise td.FatalError("not yet")
    return "now"


@app.workflow()
async def retried(ctx: td.Context) -> str:
    return await ctx.step(fickle)


StoreUrl = Callable[[], str]


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'console.db'}"


@asynccontextmanager
async def api(
    source: td.Engine | td.Client, *, token: str | None = TOKEN, **kwargs: Any
) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=console_app(source, token=token, **kwargs))
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        yield client


@asynccontextmanager
async def engine_and_api(
    open_test_engine: EngineFactory, store_url: str, **kwargs: Any
) -> AsyncIterator[tuple[td.Engine, httpx.AsyncClient]]:
    async with (
        open_test_engine(app, store=store_url, serve=["g"]) as engine,
        api(engine, **kwargs) as client,
    ):
        yield engine, client


def error_of(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["message"], str)
    code: str = body["error"]["code"]
    return code


# -- runs ----------------------------------------------------------------------


async def test_runs_list_with_filters_facets_and_cursor(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        for i in range(5):
            await engine.start(small, i, run_id=f"s{i}", tags=("odd",) if i % 2 else ("even",))
            await trio.sleep(1.0)
        await engine.start(waiter, run_id="w", namespace="blue")
        await engine.drain()

        async def ids(**params: Any) -> list[str]:
            response = await client.get("/api/runs", params=params)
            assert response.status_code == 200, response.text
            return [run["id"] for run in response.json()["runs"]]

        assert await ids() == ["w", "s4", "s3", "s2", "s1", "s0"]
        assert await ids(status="suspended") == ["w"]
        assert await ids(status="suspended,completed", limit=2) == ["w", "s4"]
        assert await ids(status=["suspended", "completed"], limit=2) == ["w", "s4"]
        assert await ids(namespace="blue") == ["w"]
        assert await ids(tag="odd") == ["s3", "s1"]
        assert await ids(tag=["odd", "even"]) == []
        assert await ids(workflow="small", created_after=WALL_START + 2) == ["s4", "s3", "s2"]
        assert await ids(created_before="2023-11-14T22:13:22+00:00") == ["s1", "s0"]
        first = (await client.get("/api/runs", params={"limit": 4, "facets": "true"})).json()
        assert [run["id"] for run in first["runs"]] == ["w", "s4", "s3", "s2"]
        assert first["facets"] == {"completed": 5, "suspended": 1}
        run = first["runs"][1]
        assert run["status"] == "completed"
        assert run["created_at"] == WALL_START + 4.0
        assert run["href"] == "/api/runs/s4"
        assert "input" not in run
        assert "output" not in run
        assert await ids(cursor=first["next_cursor"]) == ["s1", "s0"]
        plain = (await client.get("/api/runs")).json()
        assert plain["facets"] is None
        assert plain["next_cursor"] is None


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"status": "sleepy"}, "bad_parameter"),
        ({"status": ","}, "bad_parameter"),
        ({"limit": "0"}, "bad_parameter"),
        ({"limit": "501"}, "bad_parameter"),
        ({"limit": "ten"}, "bad_parameter"),
        ({"cursor": "not-a-cursor"}, "bad_parameter"),
        ({"facets": "maybe"}, "bad_parameter"),
        ({"top_level": "maybe"}, "bad_parameter"),
        ({"id_prefix": ["a", "b"]}, "bad_parameter"),
        ({"created_after": "yesterday"}, "bad_parameter"),
        ({"created_after": "2026-01-01T00:00:00"}, "bad_parameter"),
        ({"created_after": "nan"}, "bad_parameter"),
        ({"namespace": "no spaces"}, "bad_parameter"),
        ({"workflow": ["a", "b"]}, "bad_parameter"),
        ({"colour": "blue"}, "unknown_parameter"),
    ],
)
async def test_runs_list_refuses_bad_filters(
    open_test_engine: EngineFactory, params: dict[str, Any], code: str
) -> None:
    async with engine_and_api(open_test_engine, "memory://") as (_, client):
        response = await client.get("/api/runs", params=params)
        assert response.status_code == 400
        assert error_of(response) == code


async def test_runs_list_by_id_prefix_and_top_level(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        await engine.start(doomed, run_id="order-1")
        await engine.result("order-1")
        await engine.start(small, 2, run_id="order-2")
        await engine.result("order-2")
        await engine.start(small, 3, run_id="other")
        await engine.result("other")

        async def ids(**params: Any) -> list[str]:
            response = await client.get("/api/runs", params=params)
            assert response.status_code == 200
            return [run["id"] for run in response.json()["runs"]]

        assert await ids(id_prefix="order-") == ["order-2", "order-1.onError.0", "order-1"]
        assert await ids(id_prefix="order-1") == ["order-1.onError.0", "order-1"]
        assert await ids(top_level="true") == ["other", "order-2", "order-1"]
        assert await ids(id_prefix="order-1", top_level="true") == ["order-1"]
        assert await ids(id_prefix="ORDER") == []


# -- a run's detail, lineage, fan pages and history ------------------------------


async def test_run_detail_folds_the_wide_fan_and_links_the_lineage(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        run = await engine.start(big, WIDTH, run_id="p")
        assert await engine.result(run.id) == 2 + WIDTH - len(FAILING)
        response = await client.get("/api/runs/p")
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == "application/json"
        detail = response.json()
        assert detail["run"]["status"] == "completed"
        assert detail["run"]["input"] == [WIDTH]
        assert detail["run"]["output"] == 2 + WIDTH - len(FAILING)
        kinds = [item["type"] for item in detail["timeline"]]
        assert kinds == ["operation", "fan", "operation"]
        head, fan, child = detail["timeline"]
        assert (head["name"], head["status"], head["seq"]) == ("local", "completed", 1)
        assert (fan["first_seq"], fan["size"], fan["name"]) == (2, WIDTH, "work")
        assert fan["counts"] == {"completed": WIDTH - len(FAILING), "failed": len(FAILING)}
        assert [m["seq"] for m in fan["first_failures"]] == [2 + n for n in FAILING][:5]
        assert fan["first_failures"][0]["error"]["code"] == "refused"
        assert fan["href"] == "/api/runs/p/fans/2"
        assert detail["fans"] == [fan]
        child_id = f"p.child.{2 + WIDTH}"
        assert child["kind"] == "child"
        assert child["child"] == {"id": child_id, "href": f"/api/runs/{child_id}"}
        assert detail["lineage"] == {
            "parent": None,
            "ancestors": [],
            "children": [{"id": child_id, "href": f"/api/runs/{child_id}"}],
            "handlers": [],
            "handles": None,
        }
        assert detail["links"] == {"history": "/api/runs/p/history"}
        # The child names its parent.
        child_detail = (await client.get(f"/api/runs/{child_id}")).json()
        assert child_detail["lineage"]["parent"] == {"id": "p", "href": "/api/runs/p"}
        assert child_detail["lineage"]["ancestors"] == [{"id": "p", "href": "/api/runs/p"}]

        # Fan pages: offset, limit, the failed members only.
        page = (await client.get("/api/runs/p/fans/2", params={"limit": 10})).json()
        assert (page["total"], page["offset"], page["limit"]) == (WIDTH, 0, 10)
        assert [m["seq"] for m in page["members"]] == list(range(2, 12))
        assert page["next"] == "/api/runs/p/fans/2?offset=10&limit=10"
        assert page["previous"] is None
        deep = (await client.get("/api/runs/p/fans/2?offset=25&limit=10")).json()
        assert [m["seq"] for m in deep["members"]] == list(range(27, 32))
        assert deep["next"] is None
        assert deep["previous"] == "/api/runs/p/fans/2?offset=15&limit=10"
        failed = (await client.get("/api/runs/p/fans/2?failed=true&limit=2&offset=1")).json()
        assert failed["total"] == len(FAILING)
        assert [m["seq"] for m in failed["members"]] == [2 + n for n in FAILING[1:3]]
        assert failed["members"][0]["status"] == "failed"
        assert failed["next"] == "/api/runs/p/fans/2?offset=3&limit=2&failed=true"

        history = (await client.get("/api/runs/p/history")).json()
        assert [e["seq"] for e in history["entries"]] == list(range(1, 3 + WIDTH))
        assert history["run"]["id"] == "p"
        assert history["lineage"]["children"] == [{"id": child_id, "href": f"/api/runs/{child_id}"}]


async def test_lineage_of_an_on_error_handler_and_the_run_it_handles(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        await engine.start(doomed, run_id="d")
        # The handler's outcome is the run's.
        assert await engine.result("d") == "handled d"
        handler_id = "d.onError.0"
        detail = (await client.get("/api/runs/d")).json()
        assert detail["run"]["status"] == "completed"
        [handoff] = detail["timeline"]
        assert (handoff["kind"], handoff["name"]) == ("child", "handler")
        assert handoff["child"] == {"id": handler_id, "href": f"/api/runs/{handler_id}"}
        assert detail["lineage"]["handlers"] == [
            {"id": handler_id, "href": f"/api/runs/{handler_id}"}
        ]
        assert detail["lineage"]["handles"] is None
        handled = (await client.get(f"/api/runs/{handler_id}")).json()
        assert handled["lineage"]["handles"] == {"id": "d", "href": "/api/runs/d"}
        assert handled["lineage"]["ancestors"] == [{"id": "d", "href": "/api/runs/d"}]
        # The list says which run was handed off, and to which handler.
        listed = (await client.get("/api/runs")).json()["runs"]
        assert {run["id"]: run["handled_by"] for run in listed} == {
            "d": handler_id,
            handler_id: None,
        }


async def test_unknown_runs_and_fans_and_bad_fan_parameters(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, "memory://") as (engine, client):
        await engine.result((await engine.start(big, WIDTH, run_id="p")).id)
        await engine.start(waiter, run_id="w", namespace="blue")
        for path in (
            "/api/runs/nope",
            "/api/runs/nope/history",
            "/api/runs/nope/fans/2",
            "/api/runs/p?namespace=blue",
            "/api/runs/w/history?namespace=default",
        ):
            response = await client.get(path)
            assert (response.status_code, error_of(response)) == (404, "run_not_found"), path
        for action in ("signal", "cancel", "retry"):
            response = await client.post(
                f"/api/runs/nope/{action}",
                json={"name": "go"},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert (response.status_code, error_of(response)) == (404, "run_not_found")
        response = await client.get("/api/runs/p/fans/3")
        assert (response.status_code, error_of(response)) == (404, "fan_not_found")
        assert (await client.get("/api/runs/w?namespace=blue")).status_code == 200
        for query in (
            "offset=-1",
            "limit=0",
            "limit=501",
            "limit=many",
            "failed=perhaps",
            "offset=1&offset=2",
        ):
            response = await client.get(f"/api/runs/p/fans/2?{query}")
            assert (response.status_code, error_of(response)) == (400, "bad_parameter"), query
        response = await client.get("/api/runs/p/fans/two")
        assert (response.status_code, error_of(response)) == (400, "bad_parameter")
        response = await client.get("/api/runs/p/fans/2?page=3")
        assert (response.status_code, error_of(response)) == (400, "unknown_parameter")
        response = await client.get("/api/runs/p/fans/2?limit=500")
        assert response.status_code == 200
        response = await client.get("/api/nothing-here")
        assert response.status_code == 404
        assert error_of(response) == "http_error"


# -- ETags ---------------------------------------------------------------------


async def test_etags_answer_304_until_a_step_settles(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        await engine.result((await engine.start(big, WIDTH, run_id="p")).id)
        run = await engine.start(sleeper, 10.0, run_id="s")
        await trio.testing.wait_all_tasks_blocked()
        first = await client.get("/api/runs/s")
        tag = first.headers["etag"]
        assert tag.startswith('"')
        assert tag.endswith('"')
        # Same state, same tag; If-None-Match in every form RFC 9110 allows.
        assert (await client.get("/api/runs/s")).headers["etag"] == tag
        for given in (tag, f"W/{tag}", f'"other", {tag}', "*"):
            again = await client.get("/api/runs/s", headers={"If-None-Match": given})
            assert again.status_code == 304, given
            assert again.headers["etag"] == tag
            assert again.content == b""
        assert (
            await client.get("/api/runs/s", headers={"If-None-Match": '"other"'})
        ).status_code == 200
        # The timer fires, the step settles: the run changed, so its tag.
        await engine.result(run.id)
        changed = await client.get("/api/runs/s", headers={"If-None-Match": tag})
        assert changed.status_code == 200
        assert changed.headers["etag"] != tag
        assert changed.json()["run"]["status"] == "completed"
        # Fan pages: the tag covers the query too.
        page = await client.get("/api/runs/p/fans/2?limit=5")
        page_tag = page.headers["etag"]
        assert page_tag != (await client.get("/api/runs/p/fans/2?limit=6")).headers["etag"]
        assert (
            page_tag != (await client.get("/api/runs/p/fans/2?limit=5&failed=true")).headers["etag"]
        )
        assert page_tag != (await client.get("/api/runs/p/fans/2?limit=5&offset=5")).headers["etag"]
        assert page_tag != (await client.get("/api/runs/p")).headers["etag"]
        cached = await client.get("/api/runs/p/fans/2?limit=5", headers={"If-None-Match": page_tag})
        assert cached.status_code == 304
        # An unknown run is a 404 even with a tag given.
        missing = await client.get("/api/runs/nope", headers={"If-None-Match": "*"})
        assert missing.status_code == 404


async def test_a_304_reads_no_payload(
    open_test_engine: EngineFactory,
    store_url: str,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        await engine.result((await engine.start(big, WIDTH, run_id="p")).id)
        detail = await client.get("/api/runs/p")
        page = await client.get("/api/runs/p/fans/2?failed=true")
        store = engine.store
        calls: list[str] = []
        # Every method of the store that returns a run's or a checkpoint's
        # payload records its call.
        for name in (
            "get_run",
            "get_checkpoints",
            "find_checkpoints",
            "find_runs",
            "list_runs",
            "begin_turn",
            "fan_counts",
        ):
            method = getattr(store, name)

            def spy(*args: Any, _name: str = name, _method: Any = method, **kw: Any) -> Any:
                calls.append(_name)
                return _method(*args, **kw)

            monkeypatch.setattr(store, name, spy)
        stats = store.statistics()
        before = (stats.run_rows_read, stats.checkpoint_rows_read)
        for path, response in (("/api/runs/p", detail), ("/api/runs/p/fans/2?failed=true", page)):
            cached = await client.get(path, headers={"If-None-Match": response.headers["etag"]})
            assert cached.status_code == 304
        assert calls == []
        # One stamp row per request, no checkpoint row.
        assert (stats.run_rows_read, stats.checkpoint_rows_read) == (before[0] + 2, before[1])
        # Without the tag, the payloads are read.
        assert (await client.get("/api/runs/p")).status_code == 200
        assert "get_run" in calls


# -- actions, the token, CORS ----------------------------------------------------


async def test_actions_need_the_bearer_token(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        await engine.start(waiter, run_id="w")
        await engine.start(waiter, run_id="c")
        await trio.testing.wait_all_tasks_blocked()
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            response = await client.post(
                "/api/runs/w/signal", json={"name": "go", "payload": "x"}, headers=headers
            )
            assert (response.status_code, error_of(response)) == (401, "unauthorized")
            assert response.headers["www-authenticate"] == "Bearer"
        assert (await engine.get("w")).status == "suspended"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        response = await client.post(
            "/api/runs/w/signal", json={"name": "go", "payload": "now"}, headers=auth
        )
        assert response.status_code == 202
        assert response.json() == {"run_id": "w", "signalled": "go"}
        assert await engine.result("w") == "got now"
        bad = await client.post("/api/runs/c/signal", json={"payload": 1}, headers=auth)
        assert (bad.status_code, error_of(bad)) == (400, "bad_request")
        bad = await client.post("/api/runs/c/cancel", content=b"[1]", headers=auth)
        assert (bad.status_code, error_of(bad)) == (400, "bad_json")
        response = await client.post("/api/runs/c/cancel", json={"compensate": True}, headers=auth)
        assert response.status_code == 202
        assert response.json() == {"run_id": "c", "cancelled": True, "compensate": True}
        with pytest.raises(td.RunCancelled):
            await engine.result("c")
        again = await client.post("/api/runs/c/cancel", headers=auth)
        assert (again.status_code, error_of(again)) == (409, "invalid_run_state")
        flags["fail"] = True
        await engine.start(retried, run_id="r")
        with pytest.raises(td.RunFailed):
            await engine.result("r")
        flags["fail"] = False
        response = await client.post("/api/runs/r/retry", headers=auth)
        assert response.status_code == 202
        assert response.json()["run_id"] == "r"
        assert await engine.result("r") == "now"
        async with api(engine, token=None) as read_only:
            for action in ("signal", "cancel", "retry"):
                response = await read_only.post(f"/api/runs/w/{action}", json={"name": "go"})
                assert (response.status_code, error_of(response)) == (403, "read_only")
            assert (await read_only.get("/api/runs/w")).status_code == 200


async def test_cors_is_off_unless_origins_are_given(open_test_engine: EngineFactory) -> None:
    origin = {"Origin": "https://ops.example"}
    async with open_test_engine(app) as engine:
        async with api(engine) as client:
            response = await client.get("/api/runs", headers=origin)
            assert response.status_code == 200
            assert "access-control-allow-origin" not in response.headers
            preflight = await client.options(
                "/api/runs", headers={**origin, "Access-Control-Request-Method": "GET"}
            )
            assert "access-control-allow-origin" not in preflight.headers
        async with api(engine, cors_origins=["https://ops.example"]) as client:
            response = await client.get("/api/runs", headers=origin)
            assert response.headers["access-control-allow-origin"] == "https://ops.example"
            assert "etag" in response.headers["access-control-expose-headers"].lower()
            other = await client.get("/api/runs", headers={"Origin": "https://evil.example"})
            assert "access-control-allow-origin" not in other.headers


# -- the fleet, the queues, /metrics ------------------------------------------------


async def test_fleet_queues_and_metrics_of_an_engine(
    open_test_engine: EngineFactory, store_url: str, autojump_clock: trio.testing.MockClock
) -> None:
    capable = td.App("capable")

    @capable.step(group="gpu", requires=["cuda"])
    async def render(n: int) -> int:
        return n

    async with engine_and_api(open_test_engine, store_url) as (engine, client):
        async with td.open_worker(capable, broker=engine.broker, groups=["gpu"]):
            fleet = await client.get("/api/fleet")
            assert fleet.status_code == 200, fleet.text
            body = fleet.json()
            workers = {w["instance_id"]: w for w in body["workers"]}
            own = f"{engine.engine_id}.worker"
            assert own in workers
            assert body["groups"]["g"] == [own]
            # Both announced on the memory broker: held, with no heartbeat.
            assert [w["held"] for w in workers.values()] == [True, True]
            assert len(body["groups"]["gpu"]) == 1
            assert body["capability_gaps"] == [
                {"route": "gpu", "step": "render", "requires": ["cuda"], "offered": []}
            ]
            assert body["unserved_on_error_routes"] == []
            assert isinstance(body["disagreements"], list)
        await engine.start(sleeper, 1.0, run_id="q")
        await engine.result("q")
        queues = (await client.get("/api/queues")).json()
        assert queues["queues"] == [{"name": "gate", "limit": 2, "admitted": 0, "waiting": 0}]
        # The broker's backlog per group route: nothing waits.
        assert {b["route"]: b["backlog"] for b in queues["group_backlogs"]} == {"g": 0}
        metrics = await client.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "trio_durable_" in metrics.text


async def test_a_client_console_without_broker_or_metrics(
    open_test_engine: EngineFactory, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    url = f"sqlite:///{tmp_path / 'client.db'}"
    async with open_test_engine(app, store=url, serve=["g"]) as engine:
        await engine.result((await engine.start(small, 3, run_id="one")).id)
    async with td.open_client(url) as client_source, api(client_source) as client:
        response = await client.get("/api/fleet")
        assert (response.status_code, error_of(response)) == (503, "no_broker")
        response = await client.get("/metrics")
        assert (response.status_code, error_of(response)) == (404, "no_metrics")
        # Without an app, no queue limits are known.
        assert (await client.get("/api/queues")).json() == {"queues": [], "group_backlogs": None}
        assert [r["id"] for r in (await client.get("/api/runs")).json()["runs"]] == ["one"]
        detail = (await client.get("/api/runs/one")).json()
        assert detail["run"]["output"] == 4


# -- mounting ------------------------------------------------------------------------


async def test_the_app_mounted_under_a_prefix(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app, serve=["g"]) as engine:
        await engine.result((await engine.start(big, WIDTH, run_id="p")).id)
        outer = Starlette(routes=[Mount("/ops", app=console_app(engine, token=TOKEN))])
        transport = httpx.ASGITransport(app=outer)
        async with httpx.AsyncClient(transport=transport, base_url="http://host") as client:
            detail = await client.get("/ops/api/runs/p")
            assert detail.status_code == 200
            fan = detail.json()["fans"][0]
            assert fan["href"] == "/ops/api/runs/p/fans/2"
            page = await client.get(fan["href"], params={"limit": 3})
            assert page.json()["next"] == "/ops/api/runs/p/fans/2?offset=3&limit=3"
            listed = (await client.get("/ops/api/runs")).json()
            assert {run["href"] for run in listed["runs"]} >= {"/ops/api/runs/p"}
            missing = await client.get("/ops/api/runs/nope")
            assert (missing.status_code, error_of(missing)) == (404, "run_not_found")
            assert (await client.get("/ops/metrics")).status_code == 200
            assert (await client.get("/api/runs")).status_code == 404


def test_json_is_plain_json() -> None:
    # What the encoders make goes through json.dumps as it is.
    from trio_durable._console._json import plain

    error = td.ErrorInfo(message="m", code="c")
    assert json.loads(json.dumps(plain({"e": error, "t": (1, 2)}))) == {
        "e": {"message": "m", "code": "c"},
        "t": [1, 2],
    }


# -- schedules -------------------------------------------------------------------


async def test_schedules_are_listed_paused_resumed_and_triggered(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with engine_and_api(open_test_engine, "memory://") as (engine, client):
        await engine.create_schedule("nightly", small, cron="0 3 * * *", args=(7,))
        [listed] = (await client.get("/api/schedules")).json()["schedules"]
        assert (listed["name"], listed["workflow"], listed["cron"]) == (
            "nightly",
            "small",
            "0 3 * * *",
        )
        assert listed["paused"] is False
        assert listed["next_tick"] is not None
        # Actions need the token; reading does not.
        refused = await client.post("/api/schedules/nightly/pause")
        assert refused.status_code == 401
        paused = await client.post("/api/schedules/nightly/pause", headers=auth)
        assert paused.status_code == 200
        assert (paused.json()["paused"], paused.json()["next_tick"]) == (True, None)
        triggered = await client.post("/api/schedules/nightly/trigger", headers=auth)
        assert triggered.status_code == 202
        run_id = triggered.json()["run_id"]
        assert await engine.result(run_id) == 8
        shown = (await client.get("/api/schedules/nightly")).json()
        assert (shown["triggered"], shown["last_run_id"], shown["paused"]) == (1, run_id, True)
        resumed = await client.post("/api/schedules/nightly/resume", headers=auth)
        assert resumed.json()["paused"] is False
        missing = await client.get("/api/schedules/nope")
        assert (missing.status_code, error_of(missing)) == (404, "schedule_not_found")
        missing = await client.post("/api/schedules/nope/trigger", headers=auth)
        assert (missing.status_code, error_of(missing)) == (404, "schedule_not_found")
        assert (await client.get("/api/schedules", params={"x": "1"})).status_code == 400
