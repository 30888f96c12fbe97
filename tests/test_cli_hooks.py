"""``trio-durable breakpoints ...``, ``runs continue|skip`` and ``hooks
deliver`` in process, on a SQLite file an engine writes between commands
(so each command's effect outlives the engine that saw it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio
from rich.console import Console

import trio_durable as td
from test_breakpoints import CALLS
from test_breakpoints import app as bp_app
from test_cli import invoke, one_error_line
from test_webhooks import _handed, quiet
from test_webhooks import app as hook_app
from trio_durable._cli import _common
from trio_durable._features.hooks._webhooks import token_hash
from trio_durable._stores._hook_ops import CreateWebhook


async def _run_until_paused(url: str, run_id: str, start: bool) -> list[td.PausedStep]:
    async with td.open_engine(bp_app, store=url) as engine:
        if start:
            await engine.start("order", 5, run_id=run_id)
        with trio.fail_after(10):
            while not (paused := await engine.paused_steps(run_id)):  # noqa: ASYNC110
                await trio.sleep(0.01)
            await engine.drain()
        return paused


async def _finish(url: str, run_id: str) -> list[str]:
    async with td.open_engine(bp_app, store=url) as engine:
        with trio.fail_after(10):
            result: list[str] = await engine.result(run_id)
        return result


def test_breakpoint_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    CALLS.clear()
    url = f"sqlite:///{tmp_path / 'bp.db'}"
    trio.run(_finish_nothing, url)
    created = invoke(
        ["breakpoints", "set", "--workflow", "order", "--step", "charge", "--json"],
        {"TRIO_DURABLE_STORE": url},
    )
    assert created.exit_code == 0, created.stderr
    bp = json.loads(created.stdout)
    assert (bp["workflow"], bp["step"]) == ("order", "charge")

    [paused] = trio.run(_run_until_paused, url, "cli-1", True)
    assert paused.seq == 1
    listed = invoke(["breakpoints", "list", "--store", url, "--json"])
    assert json.loads(listed.stdout)["breakpoints"] == [bp]
    assert [p["run_id"] for p in json.loads(listed.stdout)["paused"]] == ["cli-1"]
    table = invoke(["breakpoints", "list", "--store", url])
    assert bp["id"] in table.stdout
    assert "cli-1" in table.stdout
    # On a terminal of 30 columns, --wide still draws each row on one line.
    monkeypatch.setattr(
        _common, "stdout_console", lambda: Console(file=sys.stdout, width=30, soft_wrap=False)
    )
    narrow = invoke(["breakpoints", "list", "--store", url])
    assert not any("order" in line and "charge" in line for line in narrow.stdout.splitlines())
    wide = invoke(["breakpoints", "list", "--store", url, "--wide"])
    assert wide.exit_code == 0, wide.stderr
    rows = wide.stdout.splitlines()
    assert any(bp["id"] in row and "order" in row and "charge" in row for row in rows), rows
    assert any("cli-1" in row and "charge" in row and bp["id"] in row for row in rows), rows
    monkeypatch.undo()

    history = invoke(["runs", "history", "cli-1", "--store", url])
    assert "paused" in history.stdout, history.stdout
    resumed = invoke(["runs", "continue", "cli-1", "--store", url])
    assert resumed.exit_code == 0, resumed.stderr
    assert "continued" in resumed.stdout
    refused = invoke(["runs", "continue", "cli-1", "--store", url])
    assert refused.exit_code == 1
    assert "not paused" in one_error_line(refused)

    [paused] = trio.run(_run_until_paused, url, "cli-1", False)
    assert paused.seq == 2
    assert CALLS == ["charge 5"]
    bad = invoke(["runs", "skip", "cli-1", "--store", url, "--output", "{nope"])
    assert bad.exit_code == 2
    skipped = invoke(["runs", "skip", "cli-1", "--store", url, "--output", '"by hand"'])
    assert skipped.exit_code == 0, skipped.stderr
    assert trio.run(_finish, url, "cli-1") == ["charged 5", "by hand"]

    cleared = invoke(["breakpoints", "clear", bp["id"], "--store", url])
    assert cleared.exit_code == 0, cleared.stderr
    again = invoke(["breakpoints", "clear", bp["id"], "--store", url])
    assert again.exit_code == 1
    assert "no breakpoint" in one_error_line(again)
    assert json.loads(invoke(["breakpoints", "list", "--store", url, "--json"]).stdout) == {
        "breakpoints": [],
        "paused": [],
    }


async def _finish_nothing(url: str) -> None:
    """Create the store (the commands refuse a file without a schema)."""
    async with td.open_store(url):
        pass


async def _hooked(url: str) -> str:
    async with td.open_engine(hook_app, store=url) as engine:
        await engine.start(quiet, run_id="cli-hook")
        with trio.fail_after(10):
            token = await _handed("cli-hook")
            await engine.drain()
        return token


async def _hook_result(url: str) -> str:
    async with td.open_engine(hook_app, store=url) as engine:
        with trio.fail_after(10):
            result: str = await engine.result("cli-hook")
        return result


def test_hooks_deliver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hooks.db'}"
    token = trio.run(_hooked, url)
    unknown = invoke(["hooks", "deliver", "nope", "--store", url])
    assert unknown.exit_code == 1
    assert "no webhook" in one_error_line(unknown)
    delivered = invoke(["hooks", "deliver", token, "--store", url, "--payload", '"ok"'])
    assert delivered.exit_code == 0, delivered.stderr
    used = invoke(["hooks", "deliver", token, "--store", url])
    assert used.exit_code == 1
    assert "delivered already" in one_error_line(used)
    assert trio.run(_hook_result, url) == "ok"


DASHED = "-Kd3vGtq0yQ2xLmW8pZr5sNfAe7uJbHcT1oVgXiYk4E"
"""A token that begins with '-', as about 1 in 64 that versions before
tokens stopped beginning with '-' made."""


async def _hooked_with_a_dashed_token(url: str) -> None:
    async with td.open_engine(hook_app, store=url) as engine:
        await engine.start(quiet, run_id="cli-dash")
        with trio.fail_after(10):
            await _handed("cli-dash")
            await engine.drain()
        # The run's webhook, kept under a token an older version made.
        await engine.store.apply([CreateWebhook(token_hash(DASHED), "cli-dash", "approval", 0.0)])


async def _dash_result(url: str) -> str:
    async with td.open_engine(hook_app, store=url) as engine:
        with trio.fail_after(10):
            result: str = await engine.result("cli-dash")
        return result


def test_a_token_that_begins_with_a_dash_is_delivered_after_double_dash(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'dash.db'}"
    trio.run(_hooked_with_a_dashed_token, url)
    # Read as an option, it is refused with a pointer to '--'.
    misread = invoke(["hooks", "deliver", DASHED, "--store", url])
    assert misread.exit_code == 2
    assert "a TOKEN that begins with '-' goes after '--'" in one_error_line(misread)
    delivered = invoke(["hooks", "deliver", "--store", url, "--payload", '"ok"', "--", DASHED])
    assert delivered.exit_code == 0, delivered.stderr
    assert delivered.stdout == "delivered\n"
    used = invoke(["hooks", "deliver", "--store", url, "--", DASHED])
    assert used.exit_code == 1
    assert "delivered already" in one_error_line(used)
    assert trio.run(_dash_result, url) == "ok"
