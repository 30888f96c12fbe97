"""Serving the console: the engine's ``console=`` option over a real socket,
``trio-durable console`` as a real process, `ConsoleOptions` checks, and
``import trio_durable`` loading none of starlette, hypercorn and jinja2."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import attrs
import httpx
import pytest

import trio_durable as td
from cli_processes import ROOT, WITHIN, cli_process
from test_cli import invoke

app = td.App("console-serving")


@app.step()
async def double(n: int) -> int:
    return 2 * n


@app.workflow()
async def doubled(ctx: td.Context, n: int) -> int:
    return await ctx.step(double, n)


async def test_the_engine_serves_its_console_and_metrics(tmp_path: Path) -> None:
    options = td.ConsoleOptions(port=0, token="t0ken")
    store = f"sqlite:///{tmp_path / 'engine.db'}"
    async with td.open_engine(app, store=store, console=options) as engine:
        url = engine.console_url
        assert url is not None
        assert url.startswith("http://127.0.0.1:")
        assert await engine.result((await engine.start(doubled, 21, run_id="d")).id) == 42
        async with httpx.AsyncClient(base_url=url) as client:
            detail = await client.get("/api/runs/d")
            assert detail.status_code == 200
            assert detail.json()["run"]["output"] == 42
            cached = await client.get(
                "/api/runs/d", headers={"If-None-Match": detail.headers["etag"]}
            )
            assert cached.status_code == 304
            metrics = await client.get("/metrics")
            assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
            assert "trio_durable_" in metrics.text
            refused = await client.post("/api/runs/d/cancel")
            assert refused.status_code == 401
    # Leaving the block stopped the server.
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=url) as client:
            await client.get("/api/runs")
    async with td.open_engine(app) as engine:
        assert engine.console_url is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"port": -1},
        {"port": 65536},
        {"port": "8080"},
        {"port": True},
        {"host": ""},
        {"host": "local host"},
        {"token": ""},
        {"token": "  "},
        {"token": 3},
        {"cors_origins": "https://a.example"},
        {"cors_origins": [""]},
        {"token": " t0ken"},
        {"token": "t0ken\n"},
        {"token": "t0 ken"},
        {"token": "t\u00f6ken"},
        {"max_body": 0},
        {"max_body": 1.5},
        {"max_body": True},
        {"max_body": 2**41},
        {"read_timeout": 0},
        {"read_timeout": float("inf")},
        {"idle_timeout": -1.0},
        {"idle_timeout": "5"},
        {"webhooks": "yes"},
        {"allowed_hosts": "localhost"},
        {"allowed_hosts": [""]},
        {"allowed_hosts": ["a host"]},
        {"allowed_hosts": ["*.example"]},
    ],
)
def test_console_options_refuse_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(td.UsageError, match="ConsoleOptions"):
        td.ConsoleOptions(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (" t0ken", "leading or trailing spaces"),
        ("t0ken ", "leading or trailing spaces"),
        ("t0 ken", "outside visible ASCII"),
        ("t\u00f6ken", "outside visible ASCII"),
    ],
)
def test_a_token_no_request_could_match_is_refused_with_the_reason(token: str, reason: str) -> None:
    with pytest.raises(td.UsageError, match=reason):
        td.ConsoleOptions(token=token)


def test_console_options_defaults() -> None:
    options = td.ConsoleOptions()
    assert options.max_body == 1024 * 1024
    assert (options.read_timeout, options.idle_timeout) == (30.0, 10.0)
    assert options.hosts == ("127.0.0.1", "localhost", "::1")
    assert options.delivers_webhooks is False
    assert td.ConsoleOptions(token="t").delivers_webhooks is True
    assert td.ConsoleOptions(token="t", webhooks=False).delivers_webhooks is False
    assert td.ConsoleOptions(webhooks=True).delivers_webhooks is True
    named = td.ConsoleOptions(host="Console.Example", allowed_hosts=None)
    assert named.hosts == ("console.example", "localhost", "127.0.0.1", "::1")
    assert td.ConsoleOptions(host="::1").hosts == ("::1", "localhost", "127.0.0.1")
    given = td.ConsoleOptions(allowed_hosts=["A.example", "[::1]"])
    assert given.hosts == ("a.example", "::1")


async def test_open_engine_refuses_a_console_that_is_no_options() -> None:
    with pytest.raises(td.UsageError, match="console="):
        async with td.open_engine(app, console={"port": 0}):  # type: ignore[arg-type]
            pass


def test_import_trio_durable_loads_no_web_framework() -> None:
    code = (
        "import sys, trio_durable as td; td.ConsoleOptions(port=0);"
        " print(sorted(m for m in ('starlette', 'hypercorn', 'jinja2', 'httpx')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=WITHIN
    )
    assert out.stdout.strip() == "[]"


async def test_the_console_command_serves_until_sigint(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    async with td.open_engine(app, store=store) as engine:
        await engine.result((await engine.start(doubled, 5, run_id="five")).id)
    args = ["console", "--store", store, "--port", "0", "--app", "cli_app:app"]
    async with cli_process(args, env={"TRIO_DURABLE_CONSOLE_TOKEN": "tok"}) as console:
        line = await console.wait_for("http://127.0.0.1:")
        url = line.strip()
        await console.wait_for("console ready")
        async with httpx.AsyncClient(base_url=url) as client:
            runs = (await client.get("/api/runs")).json()
            assert [run["id"] for run in runs["runs"]] == ["five"]
            assert (await client.get("/api/runs/five")).json()["run"]["output"] == 10
            fleet = await client.get("/api/fleet")
            assert fleet.status_code == 503
            assert (await client.get("/api/queues")).json() == {
                "queues": [],
                "group_backlogs": None,
            }
            # The token came from the environment: a wrong one is refused.
            wrong = await client.post(
                "/api/runs/five/retry", headers={"Authorization": "Bearer nope"}
            )
            assert wrong.status_code == 401
            right = await client.post(
                "/api/runs/five/retry", headers={"Authorization": "Bearer tok"}
            )
            assert right.status_code == 409
        assert await console.stop(signal.SIGINT) == 0
        assert "console stopped" in console.output


async def test_the_console_command_says_when_it_cannot_listen(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'cli.db'}"
    # A documentation address (RFC 5737): never one of this machine's.
    args = ["console", "--store", store, "--host", "203.0.113.7", "--port", "0"]
    async with cli_process(args) as console:
        await console.wait_for("cannot listen on 203.0.113.7:0")
        assert await console.exited() == 1
        assert "Traceback" not in console.output


def test_the_configuration_page_lists_every_console_option() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text()
    section = page.split("\n## ConsoleOptions\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| .* \| (`--[^|]*)\|$", section, re.MULTILINE)
    assert [name for name, _ in rows] == [field.name for field in attrs.fields(td.ConsoleOptions)]
    # And the command's option for each exists.
    usage = invoke(["console", "--help"]).output
    for _, options in rows:
        for option in re.findall(r"`(--[a-z-]+)`", options):
            assert option in usage, option
