"""``trio-durable console`` and the console's options on the command line
(--max-body, --read-timeout, --idle-timeout, --webhooks, --allowed-host,
a token checked at start), and the numbers every command reads bounded to
what a store keeps: a usage error (exit status 2), never a traceback."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import trio_durable as td
from cli_processes import cli_process
from raw_http import request
from test_cli import invoke, one_error_line

app = td.App("cli-console")
HOOKS: dict[str, str] = {}
HUGE = "1" + "0" * 30


@app.workflow()
async def hooked(ctx: td.Context) -> Any:
    HOOKS[ctx.run_id] = await ctx.webhook("reply")
    return await ctx.wait_signal("reply")


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (["--token", " t0ken"], {}, "--token cannot be used: it has leading or trailing spaces"),
        (["--token", "t0 ken"], {}, "--token cannot be used: it holds characters outside"),
        ([], {"TRIO_DURABLE_CONSOLE_TOKEN": "t\u00f6ken"}, "TRIO_DURABLE_CONSOLE_TOKEN cannot"),
        ([], {"TRIO_DURABLE_CONSOLE_TOKEN": "t0ken\n"}, "leading or trailing spaces"),
        (["--max-body", "0"], {}, "--max-body"),
        (["--max-body", "2199023255553"], {}, "--max-body"),
        (["--read-timeout", "inf"], {}, "--read-timeout"),
        (["--idle-timeout", "0"], {}, "--idle-timeout"),
        (["--allowed-host", "a host"], {}, "allowed_hosts"),
    ],
)
def test_the_console_refuses_bad_options_at_start(
    tmp_path: Path, args: list[str], env: dict[str, str], said: str
) -> None:
    store = f"sqlite:///{tmp_path / 'c.db'}"
    result = invoke(["console", "--store", store, "--port", "0", *args], env=env)
    assert result.exit_code == 2
    assert said in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "show", "r", "--fan", HUGE],
        ["runs", "show", "r", "--fan", "1", "--offset", HUGE],
        ["runs", "retry", "r", "--from-seq", HUGE],
        ["runs", "retry", "r", "--from-seq", "9" * 5000],
        ["runs", "fork", "r", "--from-seq", HUGE],
        ["stream", "r", "--from-offset", HUGE],
        ["runs", "prune", "--completed", "1" + "0" * 400 + "d"],
        ["runs", "list", "--created-after", "1" + "0" * 400 + "d"],
        ["worker", "cli_app:app", "--groups", "cli", "--concurrency", "70000"],
        ["engine", "cli_app:app", "--concurrency", HUGE],
    ],
    ids=lambda args: " ".join(a[:12] for a in args),
)
def test_numbers_out_of_range_are_usage_errors(tmp_path: Path, args: list[str]) -> None:
    where = [] if args[0] == "worker" else ["--store", f"sqlite:///{tmp_path / 'c.db'}"]
    result = invoke([*args, *where])
    assert result.exit_code == 2, result.output
    assert "Invalid value" in one_error_line(result)


async def test_the_console_command_takes_the_options(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    async with td.open_engine(app, store=store) as engine:
        await engine.start(hooked, run_id="h")
        await engine.drain()
        token = HOOKS["h"]
        args = [
            "console",
            *("--store", store, "--port", "0"),
            *("--webhooks", "--max-body", "64", "--allowed-host", "console.example"),
        ]
        # No bearer token: read-only, but delivering webhooks.
        async with cli_process(args) as console:
            url = (await console.wait_for("http://127.0.0.1:")).strip()
            ready = await console.wait_for("console ready")
            assert "read-only, webhooks on" in ready
            assert (await request(url, "GET", "/api/runs")).status == 421
            answered = await request(url, "GET", "/api/runs", host="console.example")
            assert [run["id"] for run in answered.json()["runs"]] == ["h"]
            hook = f"/hooks/{token}"
            big = await request(url, "POST", hook, host="console.example", body=b" " * 65)
            assert big.status == 413
            delivered = await request(url, "POST", hook, host="console.example", body=b'"yes"')
            assert delivered.status == 202
            refused = await request(url, "POST", "/api/runs/h/cancel", host="console.example")
            assert refused.status == 403
            assert await console.stop(signal.SIGINT) == 0
        assert await engine.result("h") == "yes"


async def test_the_console_command_refuses_webhooks_when_read_only(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    async with cli_process(["console", "--store", store, "--port", "0"]) as console:
        url = (await console.wait_for("http://127.0.0.1:")).strip()
        await console.wait_for("console ready")
        async with httpx.AsyncClient(base_url=url) as client:
            refused = await client.post("/hooks/anything", json=1)
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "webhooks_off"
        assert await console.stop(signal.SIGINT) == 0


@app.workflow()
async def sleeps_past_the_calendar(ctx: td.Context) -> int:
    await ctx.sleep(1e300)
    return 1


def test_a_wake_time_past_the_calendar_is_shown(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'far.db'}"

    async def start() -> None:
        async with td.open_engine(app, store=store) as engine:
            await engine.start(sleeps_past_the_calendar, run_id="far")
            await engine.drain()

    trio.run(start)
    result = invoke(["runs", "show", "far", "--store", store])
    assert result.exit_code == 0, result.output
    assert "1e+300 s after the epoch" in result.output
