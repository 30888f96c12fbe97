"""The console's guard over a real socket (hypercorn serving on loopback):
``Host`` checked before routing on every route, the security headers on
every answer, bodies bounded in size (413) and time (408), webhooks looked
up before their body is read, and early answers that drain a small body
(keep-alive) or close the connection on a large one.

The routes walked come from the application's route table, so a new
route is walked too. Timeouts are exact under Trio's MockClock where the
guard is driven directly; over sockets, the server may only answer late
(never early), which is what those tests assert.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from starlette.routing import Mount, Route

import trio_durable as td
from raw_http import Connection, head, request, stream_until_answered
from trio_durable.console import console_app

app = td.App("console-guard")
TOKEN = "guard-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
HOOKS: dict[str, str] = {}
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@app.step(group="g")
async def member(n: int) -> int:
    return n


@app.workflow()
async def hooked(ctx: td.Context) -> Any:
    HOOKS[ctx.run_id] = await ctx.webhook("reply")
    return await ctx.wait_signal("reply")


@app.workflow()
async def fanned(ctx: td.Context, width: int) -> int:
    return sum(await ctx.all(member, list(range(width))))


@asynccontextmanager
async def served(**options: Any) -> AsyncIterator[tuple[td.Engine, str]]:
    """An engine serving its console on a free loopback port."""
    console = td.ConsoleOptions(port=0, **options)
    async with td.open_engine(app, console=console, serve=["g"]) as engine:
        assert engine.console_url is not None
        yield engine, engine.console_url


async def webhook(engine: td.Engine, run_id: str) -> str:
    """Start a run that waits on a webhook; its token."""
    await engine.start(hooked, run_id=run_id)
    await engine.drain()
    return HOOKS[run_id]


def assert_guarded(answer: httpx.Response | Any, what: str) -> None:
    headers = {name.lower(): value for name, value in answer.headers.items()}
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, f"{what}: {name} is {headers.get(name)!r}"


async def test_every_route_refuses_a_foreign_host_and_every_answer_is_guarded() -> None:
    async with served(token=TOKEN) as (engine, url):
        await engine.start(fanned, 3, run_id="r")
        assert await engine.result("r") == 3
        token = await webhook(engine, "hook")
        breakpoint_id = (await engine.set_breakpoint(workflow="fanned", step="member")).id
        await engine.create_schedule("nightly", fanned, args=(1,))
        values = {
            "run_id": "r",
            "group": "1",
            "token": token,
            "breakpoint_id": breakpoint_id,
            "name": "nightly",
            "action": "retry",
            "operation": "retry-0000",
            "event_id": "e",
            "workflow": "fanned",
        }
        walked: list[tuple[str, str]] = []
        for route in console_app(engine).routes:
            if isinstance(route, Mount):
                paths = [f"{route.path}/console.js", f"{route.path}/console.css"]
                methods = {"GET", "HEAD"}
            else:
                assert isinstance(route, Route), f"a route of a new kind: {route!r}"
                missing = set(route.param_convertors) - set(values)
                assert not missing, f"give the walk a value for {missing} ({route.path})"
                paths = [route.path_format.format(**values)]
                methods = set(route.methods or ())
            for path in paths:
                for method in sorted(methods):
                    walked.append((method, path))
        # And what no route answers.
        walked += [("GET", "/nowhere"), ("POST", "/api/runs"), ("GET", "/static/nothing.js")]
        assert ("POST", f"/hooks/{token}") in walked
        for method, path in walked:
            for host in ("evil.example", "evil.example:80", "127.0.0.1.evil.example"):
                refused = await request(url, method, path, host=host, headers=AUTH)
                assert refused.status == 421, (method, path, host)
                if method != "HEAD":
                    assert refused.json()["error"]["code"] == "misdirected_request"
                assert_guarded(refused, f"{method} {path} from {host}")
            # Answered from a host of the console's own, whatever it says.
            answered = await request(url, method, path)
            assert answered.status != 421, (method, path)
            assert_guarded(answered, f"{method} {path}")
        # Nothing was acted on from the foreign host: the webhook is unused.
        delivered = await request(url, "POST", f"/hooks/{token}", body=b'"late"')
        # (The walk above delivered it from the console's own host.)
        assert delivered.status == 409


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "LOCALHOST", "[::1]"])
async def test_the_default_hosts_are_answered(host: str) -> None:
    async with served() as (_, url):
        port = url.rsplit(":", 1)[1]
        for given in (host, f"{host}:{port}"):
            assert (await request(url, "GET", "/api/runs", host=given)).status == 200


async def test_allowed_hosts_replace_the_default() -> None:
    async with served(allowed_hosts=["console.example"]) as (_, url):
        assert (await request(url, "GET", "/", host="console.example")).status == 200
        assert (await request(url, "GET", "/", host="Console.Example:443")).status == 200
        assert (await request(url, "GET", "/", host="127.0.0.1")).status == 421
    async with served(allowed_hosts=["*"]) as (_, url):
        assert (await request(url, "GET", "/", host="anything.example")).status == 200


async def test_a_body_over_the_limit_is_413_and_the_token_stays_unused() -> None:
    async with served(token=TOKEN, max_body=1024) as (engine, url):
        token = await webhook(engine, "big")
        path = f"/hooks/{token}"
        # By its Content-Length, before it is read.
        declared = await stream_until_answered(url, path, 10 * 1024 * 1024)
        assert declared.answer is not None
        assert declared.answer.status == 413
        assert declared.answer.json()["error"]["code"] == "body_too_large"
        assert declared.answer.headers["connection"] == "close"
        assert declared.sent < 10 * 1024 * 1024
        # As it streams in, with no Content-Length.
        streamed = await stream_until_answered(url, path, 10 * 1024 * 1024, chunked=True)
        assert streamed.answer is not None
        assert streamed.answer.status == 413
        # One byte over, whole.
        over = await request(url, "POST", path, body=b'"' + b"x" * 1023 + b'"')
        assert over.status == 413
        # The token was not used: it delivers now.
        exact = b'"' + b"x" * 1022 + b'"'
        assert (await request(url, "POST", path, body=exact)).status == 202
        assert await engine.result("big") == "x" * 1022
        # Every POST route has the same limit.
        refused = await request(url, "POST", "/api/runs/big/signal", headers=AUTH, body=b" " * 2000)
        assert refused.status == 413


async def test_an_unknown_or_used_token_is_answered_before_the_body_is_read() -> None:
    async with served(token=TOKEN) as (engine, url):
        token = await webhook(engine, "used")
        assert (await request(url, "POST", f"/hooks/{token}", body=b"1")).status == 202
        for path, status in (("/hooks/not-a-token", 404), (f"/hooks/{token}", 409)):
            for chunked in (False, True):
                upload = await stream_until_answered(url, path, 50 * 1024 * 1024, chunked=chunked)
                assert upload.answer is not None
                assert upload.answer.status == status
                # The answer came while the body was still on its way.
                assert upload.sent < 50 * 1024 * 1024
                assert upload.answer.headers["connection"] == "close"


async def test_webhooks_need_a_token_or_the_option() -> None:
    async with served() as (engine, url):
        token = await webhook(engine, "read-only")
        refused = await request(url, "POST", f"/hooks/{token}", body=b"1")
        assert refused.status == 403
        assert refused.json()["error"]["code"] == "webhooks_off"
        # Even an unknown token: a console that delivers none looks none up.
        assert (await request(url, "POST", "/hooks/nope", body=b"1")).status == 403
    async with served(webhooks=True) as (engine, url):
        token = await webhook(engine, "enabled")
        assert (await request(url, "POST", f"/hooks/{token}", body=b"1")).status == 202
        assert await engine.result("enabled") == 1
        # Other actions still need the token this console does not have.
        assert (await request(url, "POST", "/api/runs/enabled/retry")).status == 403
    async with served(token=TOKEN, webhooks=False) as (engine, url):
        token = await webhook(engine, "disabled")
        assert (await request(url, "POST", f"/hooks/{token}", body=b"1")).status == 403


async def test_an_early_answer_drains_a_small_body_and_keeps_the_connection() -> None:
    async with served(token=TOKEN) as (_, url):
        connection = await Connection.open(url)
        try:
            host = url.removeprefix("http://")
            body = json.dumps({"compensate": False}).encode()
            # The head alone: the 401 comes before the body is sent.
            await connection.send(
                head("POST", "/api/runs/x/cancel", host, {"Content-Length": str(len(body))})
            )
            refused = await connection.answer()
            assert refused.status == 401
            assert "connection" not in refused.headers
            # The server (in this process) is done with the answer and
            # waits: dropping the connection now would lose the next request.
            await trio.testing.wait_all_tasks_blocked()
            # Then the body, and the next request on the same connection.
            await connection.send(body + head("GET", "/api/runs", host))
            answered = await connection.answer()
            assert answered.status == 200
            assert answered.json()["runs"] == []
        finally:
            await connection.aclose()


async def test_stalled_uploads_are_dropped_after_the_idle_timeout() -> None:
    idle = 2.0
    async with served(token=TOKEN, idle_timeout=idle) as (engine, url):
        token = await webhook(engine, "stalled")
        host = url.removeprefix("http://")
        assert (await request(url, "GET", "/api/runs")).status == 200
        # 200 stall within their bodies, 100 within their headers.
        stalled: list[tuple[Connection, float, bool]] = []
        try:
            for i in range(300):
                # Before the server can have accepted it, and so started
                # any clock of its own.
                opened_at = trio.current_time()
                connection = await Connection.open(url)
                request_head = head("POST", f"/hooks/{token}", host, {"Content-Length": "1000"})
                in_body = i % 3 != 2
                await connection.send(request_head + b'"abc' if in_body else request_head[:-4])
                stalled.append((connection, opened_at, in_body))
            # A normal request answers while they stall.
            assert (await request(url, "GET", "/api/runs")).status == 200
            dropped: list[tuple[int | None, float, bool]] = []

            async def wait_dropped(connection: Connection, opened_at: float, in_body: bool) -> None:
                # Within a body: answered 408; within headers: no request to answer.
                status = (await connection.answer()).status if in_body else None
                closed = await connection.closed()
                dropped.append((status, trio.current_time() - opened_at, closed))

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    for connection, opened_at, in_body in stalled:
                        nursery.start_soon(wait_dropped, connection, opened_at, in_body)
        finally:
            for connection, _, _ in stalled:
                await connection.aclose()
        assert len(dropped) == 300
        assert sorted({status for status, _, _ in dropped}, key=str) == [408, None]
        assert sum(status == 408 for status, _, _ in dropped) == 200
        assert all(closed for _, _, closed in dropped)
        # Never before the timeout (the server counts from when it accepted
        # the connection, or got the last byte of a body: both after it
        # was opened).
        assert min(waited for _, waited, _ in dropped) >= idle
        # And still answering; the webhook was never used.
        assert (await request(url, "POST", f"/hooks/{token}", body=b'"late"')).status == 202
        assert await engine.result("stalled") == "late"


async def test_a_body_that_trickles_past_the_read_timeout_is_dropped() -> None:
    async with served(token=TOKEN, read_timeout=1.0, idle_timeout=30.0) as (engine, url):
        token = await webhook(engine, "trickle")
        host = url.removeprefix("http://")
        connection = await Connection.open(url)
        started = trio.current_time()
        try:
            await connection.send(
                head("POST", f"/hooks/{token}", host, {"Content-Length": "100000"})
            )
            async with trio.open_nursery() as nursery:

                async def trickle() -> None:
                    # A byte at a time, never pausing near the idle timeout.
                    while True:
                        await connection.send(b" ")
                        await trio.sleep(0.05)

                nursery.start_soon(trickle)
                with trio.fail_after(60):
                    answer = await connection.answer()
                nursery.cancel_scope.cancel()
        finally:
            await connection.aclose()
        assert answer.status == 408
        assert answer.json()["error"]["code"] == "body_timeout"
        assert trio.current_time() - started >= 1.0


# -- the guard's clock, driven directly under MockClock ------------------------------


async def _drive(
    receive_messages: list[dict[str, Any]], headers: list[tuple[bytes, bytes]], **options: Any
) -> tuple[int, float]:
    """Send one POST through the console app, its body's messages given
    and then nothing; the status and the virtual time it was answered at."""
    async with td.open_engine(app, seed=1) as engine:
        application = console_app(engine, token=TOKEN, **options)
        pending = list(receive_messages)
        answered: list[tuple[int, float]] = []

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop(0)
            await trio.sleep_forever()
            raise AssertionError

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answered.append((message["status"], trio.current_time()))

        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/api/runs/x/signal",
            "raw_path": b"/api/runs/x/signal",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"localhost"), *headers],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 2),
        }
        started = trio.current_time()
        await application(scope, receive, send)
        [(status, at)] = answered
        return status, at - started


async def test_the_idle_timeout_counts_from_the_last_piece(
    autojump_clock: trio.testing.MockClock,
) -> None:
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    pieces = [{"type": "http.request", "body": b"{", "more_body": True}]
    status, at = await _drive(
        pieces, [auth, (b"content-length", b"50")], idle_timeout=7.0, read_timeout=100.0
    )
    assert (status, at) == (408, 7.0)


async def test_the_read_timeout_counts_from_the_request(
    autojump_clock: trio.testing.MockClock,
) -> None:
    auth = (b"authorization", f"Bearer {TOKEN}".encode())
    status, at = await _drive([], [auth, (b"content-length", b"50")], read_timeout=3.0)
    assert (status, at) == (408, 3.0)
