"""Every bad input the security probe found answered 500 (or accepted) is a
4xx now, over a real socket: numbers past what a store compares (a cursor
holding 10**400, a fan offset of 10**30, a 5,000-digit ``from_seq``), JSON
nested 100,000 deep (on ``/hooks`` with no credential too), and names of a
megabyte (signals, breakpoints, tags)."""

from __future__ import annotations

import base64
import json
from typing import Any, Final

import pytest

import trio_durable as td
from raw_http import request

app = td.App("console-bad-input")
TOKEN: Final = "bad-input-t0ken"
AUTH: Final = {"Authorization": f"Bearer {TOKEN}"}
HOOKS: dict[str, str] = {}

DEEP: Final = ("[" * 100_000 + "]" * 100_000).encode()
HUGE: Final = "1" + "0" * 30
ENORMOUS: Final = "1" + "0" * 400
DIGITS_5000: Final = "9" * 5000


@app.step(group="g")
async def member(n: int) -> int:
    if n == 1:
        raise td.FatalError("one fails")
    return n


@app.workflow()
async def fanned(ctx: td.Context) -> list[Any]:
    return await ctx.all_settled(member, [0, 1, 2])


@app.workflow()
async def hooked(ctx: td.Context) -> Any:
    HOOKS[ctx.run_id] = await ctx.webhook("reply")
    return await ctx.wait_signal("reply")


def cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


ENORMOUS_CURSOR: Final = cursor("[" + ENORMOUS + ', "x"]')
INFINITE_CURSOR: Final = cursor('[Infinity, "x"]')


def body(value: object) -> bytes:
    return json.dumps(value).encode()


# (method, path, headers, body, status, code): ``{token}`` is a live
# webhook's token. The code is the JSON error's; None for an HTML page.
CASES: Final[dict[str, tuple[str, str, dict[str, str], bytes, int, str | None]]] = {
    "cursor holding 10**400": (
        "GET",
        f"/api/runs?cursor={ENORMOUS_CURSOR}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "cursor holding Infinity": (
        "GET",
        f"/api/runs?cursor={INFINITE_CURSOR}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "runs page cursor holding 10**400": (
        "GET",
        f"/?cursor={ENORMOUS_CURSOR}",
        {},
        b"",
        400,
        None,
    ),
    "fan offset of 10**30": (
        "GET",
        f"/api/runs/r/fans/1?offset={HUGE}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "fan seq of 10**30": ("GET", f"/api/runs/r/fans/{HUGE}", {}, b"", 400, "bad_parameter"),
    "fan seq of -10**30": ("GET", f"/api/runs/r/fans/-{HUGE}", {}, b"", 400, "bad_parameter"),
    "fan seq of 5,000 digits": (
        "GET",
        f"/api/runs/r/fans/{DIGITS_5000}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "run page fan offset of 10**30": ("GET", f"/runs/r?fan=1&offset={HUGE}", {}, b"", 400, None),
    "run page fan of 10**30": ("GET", f"/runs/r?fan={HUGE}", {}, b"", 400, None),
    "stream from offset 10**30": (
        "GET",
        f"/api/runs/r/stream?from_offset={HUGE}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "created_after of 10**400": (
        "GET",
        f"/api/runs?created_after={ENORMOUS}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
    "signal JSON 100,000 deep": ("POST", "/api/runs/r/signal", AUTH, DEEP, 400, "bad_json"),
    "webhook JSON 100,000 deep": ("POST", "/hooks/{token}", {}, DEEP, 400, "bad_json"),
    "unknown webhook JSON 100,000 deep": (
        "POST",
        "/hooks/nope",
        {},
        DEEP,
        404,
        "webhook_not_found",
    ),
    "retry from_seq of 5,000 digits": (
        "POST",
        "/api/runs/r/retry",
        AUTH,
        b'{"from_seq": ' + DIGITS_5000.encode() + b"}",
        400,
        "bad_json",
    ),
    "fork from_seq of 5,000 digits": (
        "POST",
        "/api/runs/r/fork",
        AUTH,
        b'{"from_seq": ' + DIGITS_5000.encode() + b"}",
        400,
        "bad_json",
    ),
    "fork from_seq of 4,000 digits": (
        "POST",
        "/api/runs/r/fork",
        AUTH,
        b'{"from_seq": ' + b"9" * 4000 + b"}",
        400,
        "bad_request",
    ),
    "signal name of a megabyte": (
        "POST",
        "/api/runs/r/signal",
        AUTH,
        body({"name": "s" * 1_000_000}),
        400,
        "bad_request",
    ),
    "breakpoint step of a megabyte": (
        "POST",
        "/api/breakpoints",
        AUTH,
        body({"workflow": "fanned", "step": "s" * 1_000_000}),
        400,
        "bad_request",
    ),
    "tag filter of 201 characters": (
        "GET",
        f"/api/runs?tag={'t' * 201}",
        {},
        b"",
        400,
        "bad_parameter",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_input_is_a_4xx(case: str) -> None:
    method, path, headers, sent, status, code = CASES[case]
    console = td.ConsoleOptions(port=0, token=TOKEN)
    async with td.open_engine(app, console=console, serve=["g"]) as engine:
        await engine.start(fanned, run_id="r")
        await engine.start(hooked, run_id="h")
        await engine.drain()
        assert engine.console_url is not None
        answer = await request(
            engine.console_url,
            method,
            path.replace("{token}", HOOKS["h"]),
            headers=headers,
            body=sent,
        )
        assert answer.status == status, answer.body[:300]
        if code is None:
            assert answer.headers["content-type"].startswith("text/html")
        else:
            assert answer.json()["error"]["code"] == code
        # The console goes on answering, and nothing was changed.
        assert (await request(engine.console_url, "GET", "/api/runs/r")).status == 200
        assert (await engine.get("h")).status == "suspended"
        assert await engine.breakpoints() == []


@app.workflow()
async def sleeps_past_the_calendar(ctx: td.Context) -> int:
    await ctx.sleep(1e300)
    return 1


async def test_a_wake_time_past_the_calendar_renders() -> None:
    console = td.ConsoleOptions(port=0)
    async with td.open_engine(app, console=console) as engine:
        await engine.start(sleeps_past_the_calendar, run_id="far")
        await engine.drain()
        assert engine.console_url is not None
        page = await request(engine.console_url, "GET", "/runs/far")
        assert page.status == 200
        assert b"1e+300 s after the epoch" in page.body
