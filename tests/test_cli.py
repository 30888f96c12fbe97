"""The ``trio-durable`` command in process (click's `CliRunner`): usage
errors, bad ``MODULE:APP``, unreachable stores and brokers, exit codes,
``workers`` over the memory broker, ``simulate`` and its progress bar.
Engines and workers as real processes: tests/test_cli_processes.py and
tests/integration/test_cli_fleet.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs
import click
import pytest
import trio
from click.testing import CliRunner, Result
from rich.console import Console

import cli_app
import trio_durable as td
from cli_processes import ROOT, TESTS, read_terminal
from trio_durable._cli import _common, _fleet, cli, main
from trio_durable._cli._common import command_error, exit_code_of
from trio_durable._cli._fleet import print_report, report_json
from trio_durable._front._fleet_report import fleet_report
from trio_durable._front._open_worker import open_worker

SECRET = "s3cret-Pa55"


def invoke(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """Run the command in this process, from the tests folder (where
    ``cli_app`` is), with no store or broker in the environment."""
    environment: dict[str, str | None] = {"TRIO_DURABLE_STORE": None, "TRIO_DURABLE_BROKER": None}
    environment.update(env or {})
    runner = CliRunner(env=environment)
    cwd = os.getcwd()
    os.chdir(TESTS)
    try:
        return runner.invoke(cli, list(args), prog_name="trio-durable")
    finally:
        os.chdir(cwd)


def one_error_line(result: Result) -> str:
    """The error the command printed: one line on stderr, no traceback."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert "Traceback" not in result.stderr
    return lines[-1]


# -- usage ------------------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    result = invoke(["--help"])
    assert result.exit_code == 0
    for command in ("engine", "worker", "workers", "simulate", "runs", "migrate"):
        assert re.search(rf"^  {command} ", result.stdout, re.M), result.stdout


def test_no_command_prints_the_help_and_exits_2() -> None:
    result = invoke([])
    assert result.exit_code == 2
    assert "Usage: trio-durable" in result.output


def test_an_unknown_flag_is_a_usage_error() -> None:
    result = invoke(["engine", "cli_app:app", "--store", "memory://", "--frobnicate"])
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: No such option '--frobnicate'."


def test_an_unknown_command_is_a_usage_error() -> None:
    result = invoke(["nonsense"])
    assert result.exit_code == 2
    assert "No such command 'nonsense'" in one_error_line(result)


def test_an_engine_needs_a_store() -> None:
    result = invoke(["engine", "cli_app:app"])
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: no store: give --store URL or set TRIO_DURABLE_STORE"


def test_a_worker_needs_a_shared_broker() -> None:
    result = invoke(["worker", "cli_app:app", "--groups", "cli"])
    assert result.exit_code == 2
    assert (
        one_error_line(result) == "Error: no broker: give --broker URL or set TRIO_DURABLE_BROKER"
    )
    result = invoke(["worker", "cli_app:app", "--groups", "cli", "--broker", "memory://"])
    assert result.exit_code == 2
    assert "the memory broker lives inside one process" in one_error_line(result)


def test_a_worker_needs_groups_its_app_has() -> None:
    broker = ["--broker", "amqp://guest:guest@127.0.0.1:1/"]
    result = invoke(["worker", "cli_app:app", *broker])
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: give the group routes to serve: --groups GROUP"
    result = invoke(["worker", "cli_app:app", *broker, "--groups", "cli,nowhere"])
    assert result.exit_code == 2
    assert "groups names the group 'nowhere', which no step or workflow of app 'cli-test' has" in (
        one_error_line(result)
    )


def test_a_bad_option_value_of_the_engine_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    result = invoke(
        ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--lease-ttl", "-1"]
    )
    assert result.exit_code == 2
    assert "--lease-ttl" in one_error_line(result)
    result = invoke(["engine", "cli_app:app", "--store", store, "--serve", "cli,nowhere"])
    assert result.exit_code == 2
    assert "serve names the group 'nowhere'" in one_error_line(result)


# -- MODULE:APP ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "no_such_module_here:app",
            "Error: no module named 'no_such_module_here' in the current directory or on sys.path",
        ),
        ("cli_app:missing", "Error: module 'cli_app' has no attribute 'missing'"),
        (
            "cli_app:not_an_app",
            "Error: cli_app:not_an_app is str 'a string, not a td.App', not a td.App",
        ),
        (":app", "Error: ':app' is not MODULE:APP"),
        ("cli_app:", "Error: 'cli_app:' is not MODULE:APP"),
        ("missing/file.py:app", "Error: no file 'missing/file.py'"),
    ],
)
def test_a_bad_app_is_a_usage_error(spec: str, message: str) -> None:
    result = invoke(["engine", spec, "--store", "memory://"])
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)


def test_without_app_the_attribute_is_app() -> None:
    result = invoke(
        ["workers", "--listen", "0", "--broker", "memory://", "--app", "cli_app", "--json"]
    )
    assert result.exit_code == 0, result.output


def test_a_file_named_like_an_imported_module_is_refused(tmp_path: Path) -> None:
    (tmp_path / "trio.py").write_text("app = None\n")
    result = invoke(["engine", f"{tmp_path}/trio.py:app", "--store", "memory://"])
    assert result.exit_code == 2
    assert one_error_line(result).startswith(
        f"Error: '{tmp_path}/trio.py' would be imported as module 'trio', which is already imported"
    )
    # The file of a module already imported is that module.
    result = invoke(
        ["workers", "--listen", "0", "--broker", "memory://", "--app", f"{TESTS}/cli_app.py"]
    )
    assert result.exit_code == 0, result.output


def test_a_module_that_fails_to_import_is_named_with_where(tmp_path: Path) -> None:
    (tmp_path / "broken_app.py").write_text("import trio_durable\n\nraise RuntimeError('boom')\n")
    (tmp_path / "bad_syntax.py").write_text("app = (\n")
    (tmp_path / "bad_import.py").write_text("import no_such_dependency_anywhere\n")
    result = invoke(["engine", f"{tmp_path}/broken_app.py:app", "--store", "memory://"])
    assert result.exit_code == 2
    assert one_error_line(result) == (
        f"Error: importing '{tmp_path}/broken_app.py' failed: RuntimeError: boom"
        f" ({tmp_path}/broken_app.py, line 3)"
    )
    result = invoke(["engine", f"{tmp_path}/bad_syntax.py", "--store", "memory://"])
    assert result.exit_code == 2
    assert one_error_line(result).startswith(
        f"Error: importing '{tmp_path}/bad_syntax.py' failed: SyntaxError:"
    )
    result = invoke(["engine", f"{tmp_path}/bad_import.py", "--store", "memory://"])
    assert result.exit_code == 2
    assert one_error_line(result) == (
        f"Error: importing '{tmp_path}/bad_import.py' failed: ModuleNotFoundError:"
        f" No module named 'no_such_dependency_anywhere' ({tmp_path}/bad_import.py, line 1)"
    )


# -- unreachable servers ------------------------------------------------------------


def test_an_unreachable_store_exits_3_with_the_password_masked() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/nowhere"
    result = invoke(["engine", "cli_app:app", "--store", url, "--serve", "cli"])
    assert result.exit_code == 3
    line = one_error_line(result)
    assert line.startswith(
        "Error: cannot open the PostgreSQL store at postgresql://postgres:***@127.0.0.1:1/nowhere"
    )
    assert SECRET not in result.output


def test_an_unreachable_store_from_the_environment_too() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/nowhere"
    result = invoke(["engine", "cli_app:app", "--serve", "cli"], env={"TRIO_DURABLE_STORE": url})
    assert result.exit_code == 3
    assert SECRET not in result.output
    assert "postgres:***@127.0.0.1:1" in one_error_line(result)


def test_an_unreachable_broker_exits_3_with_the_password_masked() -> None:
    url = f"amqp://guest:{SECRET}@127.0.0.1:1/"
    for args in (
        ["worker", "cli_app:app", "--groups", "cli", "--broker", url],
        ["workers", "--broker", url],
    ):
        result = invoke(args)
        assert result.exit_code == 3, result.output
        assert one_error_line(result).startswith("Error: RabbitMQ")
        assert SECRET not in result.output


def test_a_malformed_url_is_a_usage_error() -> None:
    result = invoke(["engine", "cli_app:app", "--store", "bogus://x", "--serve", "cli"])
    assert result.exit_code == 2
    assert "no store is registered for the scheme 'bogus'" in one_error_line(result)


# -- exit codes ---------------------------------------------------------------------


def test_exit_codes_by_error() -> None:
    assert exit_code_of(td.StoreError("x")) == 3
    assert exit_code_of(td.BrokerUnavailable("x")) == 3
    assert exit_code_of(td.RunNotFoundError("x")) == 1
    assert exit_code_of(td.UnknownWorkflowError("x")) == 1
    assert exit_code_of(td.InvalidRunStateError("x")) == 1
    assert exit_code_of(td.RunConflictError("x")) == 1
    assert exit_code_of(td.RunFailed("run-1", "x")) == 1
    assert exit_code_of(td.UsageError("x")) == 2
    assert exit_code_of(td.InvalidURLError("x")) == 2
    assert exit_code_of(td.RegistrationError("x")) == 2
    assert exit_code_of(ValueError("x")) is None


def test_errors_from_a_nursery_become_one_line_without_secrets() -> None:
    url = f"postgresql://user:{SECRET}@db/x"
    group = BaseExceptionGroup(
        "nursery",
        [td.StoreError(f"lost {url}\n  twice"), ExceptionGroup("inner", [td.UsageError("bad")])],
    )
    error = command_error(group, [url])
    assert error is not None
    assert error.exit_code == 3
    assert error.message == "lost postgresql://user:***@db/x twice; bad"
    # A bug keeps its traceback.
    assert command_error(ExceptionGroup("x", [td.StoreError("a"), KeyError("b")])) is None


def test_main_returns_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["engine", "cli_app:nope", "--store", "memory://"]) == 2
    assert main(["--help"]) == 0
    assert main(["--bogus"]) == 2
    err = capsys.readouterr().err
    assert "Error: module 'cli_app' has no attribute 'nope'\n" in err
    assert "Error: No such option '--bogus'.\n" in err


def test_python_dash_m_trio_durable() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trio_durable", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Usage: python -m trio_durable [OPTIONS] COMMAND")
    done = subprocess.run(
        [sys.executable, "-m", "trio_durable", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.stdout.strip() == f"trio-durable, version {td.__version__}"


# -- workers ------------------------------------------------------------------------


async def test_workers_reports_disagreements_and_gaps_over_the_memory_broker(
    capsys: pytest.CaptureFixture[str],
) -> None:
    broker = td.MemoryBroker()
    async with (
        open_worker(cli_app.app, broker=broker, groups=["cli"], instance_id="w-old"),
        open_worker(
            cli_app.rollout,
            broker=broker,
            groups=["cli"],
            instance_id="w-new",
            capabilities=["cpu"],
        ),
    ):
        report = await fleet_report(broker)
        with_app = await fleet_report(broker, cli_app.rollout)
    document = report_json(report, "memory://")
    assert [w["instance_id"] for w in document["workers"]] == ["w-new", "w-old"]
    assert document["workers"][1]["groups"] == ["cli"]
    # Announced once on the memory broker, until withdrawn: no heartbeat.
    assert [w["held"] for w in document["workers"]] == [True, True]
    assert len(document["deploys"]) == 2
    assert {(d["kind"], d["subject"]) for d in document["disagreements"]} == {
        ("requires", "double"),
        ("on_error", "doubled"),
    }
    requires = next(d for d in document["disagreements"] if d["kind"] == "requires")
    assert requires["values"] == [
        {"value": ["gpu"], "workers": ["w-new"]},
        {"value": [], "workers": ["w-old"]},
    ]
    gap = {"route": "cli", "step": "double", "requires": ["gpu"], "offered": ["cpu"]}
    assert document["capability_gaps"] == [gap]
    unserved = {"workflow": "doubled", "code": None, "handler": "page_oncall"}
    assert document["unserved_on_error_routes"] == [{**unserved, "declared_by": ["w-new"]}]
    # With --app, the App's own routes count too, as its engine checks them.
    assert [attrs.asdict(u) for u in with_app.unserved] == [
        {**unserved, "declared_by": ("w-new", "--app")}
    ]

    print_report(report, "memory://")
    out = capsys.readouterr().out
    for text in (
        "Live workers on memory://",
        "Deploys (a rollout is in progress)",
        "Disagreements",
        '["gpu"]',
        "Capability gaps (these steps wait as blocked)",
        "Unserved on-error routes",
        "page_oncall",
        " s ago, held",
    ):
        assert text in out, out


async def test_workers_wide_folds_no_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    broker = td.MemoryBroker()
    async with open_worker(
        cli_app.rollout, broker=broker, groups=["cli"], instance_id="w-new", capabilities=["cpu"]
    ):
        report = await fleet_report(broker)

    async def read_report(*_: object) -> object:
        return report

    monkeypatch.setattr(_fleet, "_read_report", read_report)
    # A terminal of 40 columns: without --wide the table folds its cells.
    monkeypatch.setattr(
        _common, "stdout_console", lambda: Console(file=sys.stdout, width=40, soft_wrap=False)
    )
    args = ["workers", "--listen", "0", "--broker", "memory://"]
    narrow = await trio.to_thread.run_sync(invoke, args)
    wide = await trio.to_thread.run_sync(invoke, [*args, "--wide"])
    assert wide.exit_code == 0, wide.output
    assert max(map(len, wide.stdout.splitlines())) > 40
    assert max(map(len, narrow.stdout.splitlines())) <= 40
    assert len(wide.stdout.splitlines()) < len(narrow.stdout.splitlines())


def test_workers_with_no_live_worker() -> None:
    result = invoke(["workers", "--listen", "0", "--broker", "memory://"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "No live worker announces itself on memory://.\n"
    result = invoke(
        ["workers", "--listen", "0", "--json"], env={"TRIO_DURABLE_BROKER": "memory://"}
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["workers"] == []
    assert document["disagreements"] == []


def test_workers_with_an_app_reports_its_gaps_without_workers() -> None:
    result = invoke(
        ["workers", "--listen", "0", "--broker", "memory://", "--app", "cli_app:rollout", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["capability_gaps"] == [
        {"route": "cli", "step": "double", "requires": ["gpu"], "offered": []}
    ]
    assert document["unserved_on_error_routes"] == [
        {"workflow": "doubled", "code": None, "handler": "page_oncall", "declared_by": ["--app"]}
    ]


# -- simulate -------------------------------------------------------------------------


_SEED_LINE = re.compile(r"^seed +(\d+) (ok  |FAIL) trace ([0-9a-f]{16}) faults +\d+ simulated ")


def test_simulate_prints_a_line_per_seed_then_a_summary() -> None:
    result = invoke(["simulate", "--seeds", "1..2", "--duration", "600"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [m.group(1, 2) for m in map(_SEED_LINE.match, lines[:2]) if m] == [
        ("1", "ok  "),
        ("2", "ok  "),
    ]
    assert re.fullmatch(
        r"2 passed, 0 failed \(\d+\.\d simulated hours, [\d.e+-]+ seeds/s\)", lines[2]
    )
    # Not a terminal: no progress bar.
    assert result.stderr == ""


def test_simulate_json_is_one_document() -> None:
    text = invoke(["simulate", "--seeds", "1..2", "--duration", "600"]).stdout
    hashes = [m.group(3) for m in map(_SEED_LINE.match, text.splitlines()) if m]
    result = invoke(["simulate", "--seeds", "1..2", "--duration", "600", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert [s["trace_hash"] for s in document["seeds"]] == hashes
    assert (document["passed"], document["failed"], document["replay"]) == (2, 0, None)


def test_simulate_refuses_bad_seeds() -> None:
    result = invoke(["simulate", "--seeds", "one..two"])
    assert result.exit_code == 2
    assert "'one..two' is not like 1..200, 7 or 1,5,9" in one_error_line(result)


def test_simulate_draws_progress_on_a_terminal(tmp_path: Path) -> None:
    # stderr on a pseudo-terminal, stdout on a pipe: the bar goes to the
    # terminal, and stdout keeps exactly the lines it has without one.
    leader, follower = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_durable", "simulate", "--seeds", "1..2", "--duration", "600"],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=ROOT,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"},
    )
    os.close(follower)
    terminal = read_terminal(leader, process)
    os.close(leader)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    assert process.wait(timeout=120) == 0
    assert "simulating seeds" in terminal.decode(errors="replace")
    assert len(out.splitlines()) == 3
    assert out.splitlines()[2].startswith("2 passed, 0 failed")


def test_engine_and_worker_share_the_drain_timeout_option() -> None:
    from trio_durable._cli._processes import engine_command, worker_command

    def drain(command: click.Command) -> click.Option:
        (option,) = [p for p in command.params if p.name == "drain_timeout"]
        assert isinstance(option, click.Option)
        return option

    engine, worker = drain(engine_command), drain(worker_command)
    for option in (engine, worker):
        assert option.opts == ["--drain-timeout"]
        assert option.default == 30.0
        assert isinstance(option.type, click.FloatRange)
        assert option.type.min == 0
    assert engine.help != worker.help


def test_an_engine_on_the_memory_broker_serves_its_remote_groups_or_refuses(
    tmp_path: Path,
) -> None:
    # cli_app's `double` runs on workers of group `cli`: on the in-process
    # broker only the engine itself can run it.
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for broker in ([], ["--broker", "memory://"], ["--broker", "memory://named"]):
        result = invoke(["engine", "cli_app:app", "--store", store, *broker])
        assert result.exit_code == 2, result.output
        shown_broker = broker[1] if broker else "memory://"
        assert one_error_line(result) == (
            "Error: app 'cli-test' has remote steps or remote workflows of the groups cli,"
            f" and nothing runs them on the broker {shown_broker}, which lives inside this"
            " process: serve them in the engine (--serve cli), or give the broker their"
            " workers use (--broker amqp://... or nats://...)"
        )
    # Nothing was opened: no store file was created.
    assert not (tmp_path / "x.db").exists()
