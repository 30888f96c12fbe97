"""Stranded steps on the command line and in the console: ``trio-durable
engine --remote-redispatch SECONDS,MAXIMUM``, and ``runs show`` / ``runs
history`` and the console's run page and JSON API saying on which broker a
pending remote step is out and for how long, or that it waits for the
broker."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

import trio_durable as td
from cli_processes import cli_process, start_runs, wait_for_runs
from conftest import WALL_START, EngineFactory
from test_cli import invoke
from test_stranded_steps import Refusing, app, one
from trio_durable.console import console_app


@pytest.mark.parametrize("value", ["5", "5,", ",2", "-1,2", "0,1", "inf,1", "5,-1", "a,b", "5,1.5"])
def test_a_bad_remote_redispatch_is_a_usage_error(value: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    result = invoke(["engine", "cli_app:app", "--store", store, "--remote-redispatch", value])
    assert result.exit_code == 2
    assert "SECONDS,MAXIMUM" in result.stderr
    assert repr(value) in result.stderr


def test_the_engine_help_names_remote_redispatch() -> None:
    result = invoke(["engine", "--help"])
    assert result.exit_code == 0
    assert "--remote-redispatch SECONDS,MAXIMUM" in result.stdout


async def test_an_engine_process_applies_its_remote_redispatch(tmp_path: Path) -> None:
    # The step's result does not come (it runs for an hour): sent again
    # after half a second, once, then failed as lost.
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    # Scans every 0.2 s: it learns of the run another process started then.
    args = [
        "engine",
        "cli_app:app",
        "--store",
        store,
        "--serve",
        "cli",
        "--reconcile-interval",
        "0.2",
        "--remote-redispatch",
        "0.5,1",
        "--drain-timeout",
        "0",
    ]
    async with cli_process(args) as engine:
        await engine.wait_for("ready: app cli-test")
        await start_runs(store, [("lost-1", "hanging", (3600.0,))])
        runs = await wait_for_runs(store, ["lost-1"], statuses=("failed",))
        assert await engine.stop(signal.SIGTERM) == 0
    error = runs["lost-1"].error
    assert error is not None
    assert (error.code, error.step) == ("lost", "hang")
    assert error.message == "no result after 2 dispatches of step 'hang'"


def _fill(path: Path) -> None:
    """r-out: its step out on memory://stranded-cli (no worker); r-wait: its
    send refused (the broker is away)."""

    async def fill() -> None:
        store = f"sqlite:///{path}"
        async with td.open_engine(app, store=store, broker="memory://stranded-cli") as engine:
            await engine.start(one, 1, run_id="r-out")
            await engine.drain()
        async with td.open_engine(app, store=store, broker=Refusing(down=True)) as engine:
            await engine.start(one, 2, run_id="r-wait")
            await engine.drain()

    trio.run(fill)


def test_runs_show_says_where_a_pending_step_is_out_and_what_one_waits_for(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.db"
    _fill(path)
    env = {"TRIO_DURABLE_STORE": f"sqlite:///{path}"}
    for command in ("show", "history"):
        out = invoke(["runs", command, "r-out"], env=env)
        assert out.exit_code == 0, out.stderr
        assert "on memory://stranded-cli" in out.stdout
        assert "out " in out.stdout
        waiting = invoke(["runs", command, "r-wait"], env=env)
        assert waiting.exit_code == 0, waiting.stderr
        assert "waiting for the broker" in waiting.stdout
    history = json.loads(invoke(["runs", "history", "r-out", "--json"], env=env).stdout)
    [entry] = history["entries"]
    assert (entry["status"], entry["out_on"], entry["waiting"]) == (
        "pending",
        "memory://stranded-cli",
        None,
    )
    assert entry["started_at"] is not None
    history = json.loads(invoke(["runs", "history", "r-wait", "--json"], env=env).stdout)
    [entry] = history["entries"]
    assert entry["out_on"] is None
    assert entry["waiting"].startswith("waiting for the broker (Refusing): connection refused")


async def test_the_console_says_where_a_pending_step_is_out_and_for_how_long(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with (
        open_test_engine(app, broker="memory://stranded-console") as engine,
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=console_app(engine)), base_url="http://console"
        ) as http,
    ):
        await engine.start(one, 3, run_id="r")
        await engine.drain()
        await trio.sleep(245)
        page = (await http.get("/runs/r")).text
        # Out on its broker since the step was sent, with nobody to run it.
        assert "no live worker of group g: the task waits on memory://stranded-console" in page
        detail = (await http.get("/api/runs/r")).json()
        [entry] = detail["timeline"]
        assert (entry["status"], entry["out_on"], entry["started_at"]) == (
            "pending",
            "memory://stranded-console",
            WALL_START,
        )
        history = (await http.get("/api/runs/r/history")).json()
        assert history["entries"][0]["out_on"] == "memory://stranded-console"
