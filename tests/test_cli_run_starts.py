"""``trio-durable runs start``, ``runs execute`` and ``runs signal
--start``: starting without ``--app`` when live workers announce the
workflow, starting and waiting (with the run's stream), signal-with-start,
and bad input refused with the file left byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

import cli_families_app
import trio_durable as td
from cli_families_store import env_of, filled, refused, unchanged
from cli_processes import cli_process
from test_cli import invoke, one_error_line
from trio_durable._front._client import Client
from trio_durable._front._descriptor import describe
from trio_durable._kernel._fleet import Fleet, aggregate
from trio_durable.brokers import descriptor_from_json, descriptor_to_json

__all__ = ["filled"]


@pytest.fixture
def copy(filled: Path, tmp_path: Path) -> Path:
    """A copy of the filled file, for commands that write."""
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    return path


async def _run(path: Path, run_id: str) -> td.Run:
    async with td.open_client(f"sqlite:///{path}") as client:
        return await client.get(run_id)


# -- start without --app ------------------------------------------------------------


def test_start_without_the_app_needs_a_worker_that_announces_it(filled: Path) -> None:
    message = refused(
        filled,
        ["runs", "start", "greet", "--broker", "memory://", "--listen", "0"],
        1,
        app=None,
    )
    assert message == (
        "Error: no live worker on memory:// announces the workflow 'greet' (announced: none);"
        " start it with --app MODULE:APP"
    )


def test_start_without_the_app_by_the_announcements(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fleet(self: Client) -> Fleet:
        # What a live worker of the app announces: its workflows by name.
        return aggregate([describe(cli_families_app.app, "worker-1", [], [], 0.0)])

    monkeypatch.setattr(Client, "fleet", fleet)
    args = ["runs", "start", "greet", "--broker", "memory://", "--listen", "0"]
    unknown = refused(copy, [*args[:2], "nope", *args[3:]], 1, app=None)
    assert "no live worker on memory:// announces the workflow 'nope' (announced:" in unknown
    assert "is not a JSON array" in refused(copy, [*args, "--input", "{}"], 2, app=None)

    result = invoke([*args, "--input", '["ada"]', "--run-id", "g-1"], env=env_of(copy, None))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("started: run g-1 (greet, namespace default) is pending")
    run = trio.run(_run, copy, "g-1")
    # By name: the engine that first runs it picks the version.
    assert (run.workflow, run.version, json.loads(run.input)) == ("greet", "", ["ada"])


def _announced(monkeypatch: pytest.MonkeyPatch, *apps: tuple[str, td.App]) -> None:
    """Make the client's fleet what live workers of ``apps`` (instance id,
    app) announce, as `describe` writes it."""

    async def fleet(self: Client) -> Fleet:
        return aggregate([describe(app, instance, [], [], 0.0) for instance, app in apps])

    monkeypatch.setattr(Client, "fleet", fleet)


WITHOUT_APP = ["--broker", "memory://", "--listen", "0"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["runs", "start", "greet", "--input", "[]"],
            "Error: workflow 'greet' takes 1 positional input after the context (name),"
            " but 0 were given (announced: greet(name: string))",
        ),
        (
            ["runs", "start", "greet", "--input", '["ada", "bo"]'],
            "Error: workflow 'greet' takes 1 positional input after the context (name),"
            " but 2 were given (announced: greet(name: string))",
        ),
        (
            ["runs", "start", "parent", "--input", '["3"]', "--run-id", "p-9"],
            "Error: workflow 'parent': input 'n' must be an integer, not a string (\"3\")"
            " (announced: parent(n: integer))",
        ),
        (
            ["runs", "execute", "greet", "--input", "[7]"],
            "Error: workflow 'greet': input 'name' must be a string, not an integer (7)"
            " (announced: greet(name: string))",
        ),
        (
            ["runs", "signal", "fresh-1", "submit", "--start", "order", "--input", "[null]"],
            "Error: workflow 'order': input 'order_id' must be a string, not null"
            " (announced: order(order_id: string))",
        ),
    ],
)
def test_start_without_the_app_checks_the_input_against_the_announced_signature(
    filled: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], message: str
) -> None:
    _announced(monkeypatch, ("worker-1", cli_families_app.app))
    # Refused as a usage error, and the file is left byte-identical.
    assert refused(filled, [*command, *WITHOUT_APP], 2, app=None) == message


def _greet_v2() -> td.App:
    """A newer deploy of `cli_families_app`'s greet: it takes a count too."""
    app = td.App("families", version="2")

    @app.workflow(name="greet")
    async def greet(ctx: td.Context, name: str, times: int) -> str:
        return name * times

    return app


def test_start_without_the_app_during_a_rollout_takes_an_input_any_signature_fits(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _announced(monkeypatch, ("worker-1", cli_families_app.app), ("worker-2", _greet_v2()))
    args = ["runs", "start", "greet", *WITHOUT_APP, "--run-id", "g-2"]
    result = invoke([*args, "--input", '["ada", 2]'], env=env_of(copy, None))
    assert result.exit_code == 0, result.output
    assert result.stderr == (
        "note: live workers announce 2 signatures (greet(name: string) by worker-1;"
        " greet(name: string, times: integer) by worker-2); the input fits"
        " greet(name: string, times: integer)\n"
    )
    assert json.loads(trio.run(_run, copy, "g-2").input) == ["ada", 2]
    message = refused(copy, [*args, "--input", "[1]"], 2, app=None)
    assert message == (
        "Error: the input fits none of the 2 signatures live workers announce"
        " (greet(name: string) by worker-1; greet(name: string, times: integer) by"
        " worker-2): greet(name: string): workflow 'greet': input 'name' must be a string,"
        " not an integer (1); greet(name: string, times: integer): workflow 'greet' takes"
        " 2 positional inputs after the context (name, times), but 1 was given"
    )


def test_start_without_the_app_by_older_workers_checks_only_the_array(
    copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fleet(self: Client) -> Fleet:
        # A worker older than the announced parameters: no "params".
        plain = descriptor_to_json(describe(cli_families_app.app, "worker-old", [], [], 0.0))
        for entry in plain["workflows"].values():
            del entry["params"]
        return aggregate([descriptor_from_json(json.loads(json.dumps(plain)))])

    monkeypatch.setattr(Client, "fleet", fleet)
    args = ["runs", "start", "greet", *WITHOUT_APP, "--input", "[1, 2]", "--run-id", "g-3"]
    result = invoke(args, env=env_of(copy, None))
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(trio.run(_run, copy, "g-3").input) == [1, 2]


# -- execute -------------------------------------------------------------------------


async def test_execute_waits_for_the_run_and_follows_its_stream(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    env = {"TRIO_DURABLE_APP": "cli_families_app:app"}
    async with td.open_engine(cli_families_app.app, store=store) as engine:
        args = ["runs", "execute", "greet", "--store", store, "--input", '["ada"]']
        async with cli_process([*args, "--follow", "--run-id", "x-1"], env=env) as execute:
            assert await execute.exited() == 0
        assert execute.lines == [
            '{"hello": "ada"}',
            '"done"',
            'run x-1 (greet, namespace default) is completed: output "hello ada"',
        ]
        failing = ["runs", "execute", "refuse", "--store", store, "--input", '["no"]', "--json"]
        async with cli_process(failing, env=env) as execute:
            assert await execute.exited() == 1
        ended = json.loads("\n".join(execute.lines))
        assert (ended["workflow"], ended["status"]) == ("refuse", "failed")
        assert ended["error"]["code"] == "refused"
        await engine.drain()


def test_execute_gives_up_after_its_timeout(copy: Path) -> None:
    # No engine runs it: the run is started and goes on.
    args = ["runs", "execute", "greet", "--input", '["bo"]', "--run-id", "late-1"]
    result = invoke([*args, "--timeout", "0"], env=env_of(copy))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        "Error: run 'late-1' did not end within 0 s (it is pending; it goes on)"
    )
    assert trio.run(_run, copy, "late-1").status == "pending"


def test_execute_refuses_bad_input(filled: Path) -> None:
    assert "no workflow 'nope'" in refused(filled, ["runs", "execute", "nope"], 1)
    assert "takes 1 positional input" in refused(filled, ["runs", "execute", "greet"], 2)


# -- signal --start ------------------------------------------------------------------


def test_signal_with_start_starts_the_run_once_and_signals_it(copy: Path) -> None:
    args = ["runs", "signal", "order-9", "submit", "--start", "order", "--input", '["o-9"]']
    result = invoke(args, env=env_of(copy))
    assert result.exit_code == 0, result.output
    assert (
        result.stdout == "signal 'submit' sent: run order-9 (order, namespace default) is pending\n"
    )

    async def run_it() -> object:
        async with td.open_engine(cli_families_app.app, store=f"sqlite:///{copy}") as engine:
            return await engine.result("order-9")

    # The run took the signal kept for its first wait.
    assert trio.run(run_it) == {}
    # A run that exists is signalled, not started again; one that ended
    # takes no signal, and nothing is written.
    assert refused(copy, args, 1) == "Error: run 'order-9' is completed; it takes no signals"
    again = ["runs", "signal", "order-1", "submit", "--start", "order", "--input", '["o-1"]']
    result = invoke(again, env=env_of(copy))
    assert result.exit_code == 0, result.output
    assert "run order-1 (order, namespace default)" in result.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--start", "greet", "--input", '["x"]'], 1, "run id 'order-1' belongs to"),
        (["--start", "order", "--input", "[1"], 2, "is not JSON"),
        (["--start", "order", "--payload", "{"], 2, "is not JSON"),
        (["--start", "order"], 2, "takes 1 positional input"),
        (["--start", "nope"], 1, "no workflow 'nope'"),
        (["--input", '["x"]'], 2, "--input go with --start WORKFLOW"),
    ],
)
def test_signal_with_start_refuses_bad_input(
    filled: Path, args: list[str], code: int, message: str
) -> None:
    assert message in refused(filled, ["runs", "signal", "order-1", "submit", *args], code)


def test_signal_with_start_of_a_new_id_writes_nothing_when_refused(filled: Path) -> None:
    args = ["runs", "signal", "fresh-1", "", "--start", "order", "--input", '["x"]']
    assert "signal name" in refused(filled, args, 2)
    with unchanged(filled):
        assert invoke(["runs", "show", "fresh-1"], env=env_of(filled)).exit_code == 1
