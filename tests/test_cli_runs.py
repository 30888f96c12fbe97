"""``trio-durable runs ...`` in process, on a SQLite file holding runs of
examples/ops_app.py in known states: what each command prints, and the bad
input each refuses with a clear message, its exit status, and nothing
written. (End to end, with engine and worker processes:
tests/integration/test_cli_operations.py.)"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import trio_durable as td
from cli_processes import ROOT, read_terminal
from test_cli import SECRET, invoke, one_error_line
from trio_durable._cli._apps import load_app

APP = f"{ROOT}/examples/ops_app.py:app"


def _dump(path: Path) -> str:
    """Everything the file holds, to compare before and after a command."""
    connection = sqlite3.connect(path)
    try:
        return "\n".join(connection.iterdump())
    finally:
        connection.close()


async def _fill(store: str, flag: Path) -> None:
    """approval-1 waits for its signal, doubled-1 completed, needs-1 failed,
    fan-1 (a fan of 3 remote steps) completed."""
    app = load_app(APP)
    async with td.open_engine(app, store=store, serve=["ops"]) as engine:
        await engine.start("approval", "order-1", run_id="approval-1", tags=["vip"])
        doubled = await engine.start("doubled", 21, run_id="doubled-1")
        needs = await engine.start("needs_file", str(flag), run_id="needs-1")
        fan = await engine.start("fan_out", 3, run_id="fan-1")
        assert await engine.result(fan.id) == 6
        assert await engine.result(doubled.id) == 42
        with pytest.raises(td.RunFailed):
            await engine.result(needs.id)
        await engine.drain()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("runs")
    path = folder / "ops.db"
    trio.run(_fill, f"sqlite:///{path}", folder / "flag")
    return path, _dump(path)


@pytest.fixture
def store(filled: tuple[Path, str]) -> Iterator[dict[str, str]]:
    """The environment of a command on the filled store; afterwards, the
    store is checked to hold exactly what it held (nothing written)."""
    path, before = filled
    yield {"TRIO_DURABLE_STORE": f"sqlite:///{path}", "TRIO_DURABLE_APP": APP}
    assert _dump(path) == before, "the command wrote to the store"


# -- bad input: unknown run or workflow ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["show", "nope"],
        ["history", "nope"],
        ["result", "nope"],
        ["result", "nope", "--wait"],
        ["signal", "nope", "approve"],
        ["cancel", "nope"],
        ["retry", "nope"],
    ],
)
def test_an_unknown_run_exits_1(store: dict[str, str], args: list[str]) -> None:
    result = invoke(["runs", *args], env=store)
    assert result.exit_code == 1, result.output
    assert one_error_line(result) == "Error: no run 'nope'"


def test_a_run_of_another_namespace_counts_as_unknown(store: dict[str, str]) -> None:
    result = invoke(["runs", "signal", "approval-1", "approve", "--namespace", "other"], env=store)
    assert result.exit_code == 1
    assert one_error_line(result) == "Error: no run 'approval-1' in namespace 'other'"


def test_an_unknown_workflow_exits_1(store: dict[str, str]) -> None:
    result = invoke(["runs", "start", "nope", "--input", "[]"], env=store)
    assert result.exit_code == 1
    assert one_error_line(result) == (
        "Error: no workflow 'nope' in app 'ops' (known: approval, doubled, fan_out, needs_file)"
    )


def test_start_needs_the_app_or_a_broker(store: dict[str, str]) -> None:
    result = invoke(["runs", "start", "approval"], env={**store, "TRIO_DURABLE_APP": ""})
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "Error: give the App that registers 'approval' (--app MODULE:APP or set"
        " TRIO_DURABLE_APP), or a --broker whose live workers announce it"
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_such_module_here:app", "Error: no module named 'no_such_module_here'"),
        ("cli_app:not_an_app", "Error: cli_app:not_an_app is str"),
    ],
)
def test_a_bad_app_exits_2(store: dict[str, str], spec: str, message: str) -> None:
    result = invoke(["runs", "start", "approval", "--app", spec], env=store)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)


# -- bad input: malformed JSON -------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["start", "approval", "--input", "[1"],
            "Error: Invalid value for '--input': '[1' is not JSON (Expecting ',' delimiter:",
        ),
        (
            ["start", "approval", "--input", '{"order": 1}'],
            """Error: Invalid value for '--input': '{"order": 1}' is not a JSON array""",
        ),
        (
            ["signal", "approval-1", "approve", "--payload", "ada"],
            "Error: Invalid value for '--payload': 'ada' is not JSON (Expecting value:",
        ),
    ],
)
def test_malformed_json_exits_2(store: dict[str, str], args: list[str], message: str) -> None:
    result = invoke(["runs", *args], env=store)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(message)


def test_inputs_that_do_not_fit_the_workflow_exit_2(store: dict[str, str]) -> None:
    result = invoke(["runs", "start", "approval", "--input", '["a", "b"]'], env=store)
    assert result.exit_code == 2
    assert one_error_line(result) == (
        "Error: workflow 'approval' takes 1 positional input after the context (order),"
        " but 2 were given"
    )


# -- bad input: runs that ended ------------------------------------------------------


def test_signalling_or_cancelling_an_ended_run_exits_1(store: dict[str, str]) -> None:
    result = invoke(["runs", "signal", "doubled-1", "approve"], env=store)
    assert result.exit_code == 1
    assert one_error_line(result) == "Error: run 'doubled-1' is completed; it takes no signals"
    result = invoke(["runs", "cancel", "needs-1"], env=store)
    assert result.exit_code == 1
    assert one_error_line(result) == "Error: run 'needs-1' is failed; it cannot be cancelled"
    result = invoke(["runs", "retry", "doubled-1"], env=store)
    assert result.exit_code == 1
    assert one_error_line(result) == (
        "Error: run 'doubled-1' is completed; only failed or dead runs,"
        " or suspended runs waiting on remote steps, can be retried"
    )


# -- bad input: the store ------------------------------------------------------------


def test_an_unreachable_store_exits_3_with_the_password_masked() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/nowhere"
    for args in (
        ["list"],
        ["show", "x"],
        ["start", "approval", "--app", APP],
        ["prune", "--dead", "1d"],
    ):
        result = invoke(["runs", *args], env={"TRIO_DURABLE_STORE": url})
        assert result.exit_code == 3, result.output
        assert one_error_line(result).startswith(
            "Error: cannot open the PostgreSQL store at postgresql://postgres:***@127.0.0.1:1/nowhere"
        )
        assert SECRET not in result.output


def test_a_store_that_does_not_exist_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    result = invoke(["runs", "list", "--store", f"sqlite:///{path}"])
    assert result.exit_code == 3
    assert one_error_line(result) == (
        f"Error: sqlite:///{path} holds no trio-durable store (it has no schema): check the URL,"
        " or create the store with `trio-durable migrate`"
    )
    assert not path.exists()
    result = invoke(["runs", "list", "--store", "memory://"])
    assert result.exit_code == 2
    assert "the memory store lives inside one process" in one_error_line(result)
    result = invoke(["runs", "list"])
    assert result.exit_code == 2
    assert one_error_line(result) == "Error: no store: give --store URL or set TRIO_DURABLE_STORE"


# -- bad options -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["list", "--status", "done"], "'done' is not a status"),
        (["list", "--created-after", "yesterday"], "'yesterday' is not a time"),
        (["prune"], "give an age for at least one status"),
        (["prune", "--completed", "soon"], "'soon' is not an age like 90s, 15m, 12h, 7d or 2w"),
        (["result", "approval-1", "--timeout", "1"], "--timeout goes with --wait"),
        (["show", "approval-1", "--failed"], "--offset, --limit and --failed page a fan"),
        (["list", "--cursor", "garbage"], "malformed cursor 'garbage'"),
        (["list", "--limit", "501"], "501 is not in the range 1<=x<=500"),
        (["show", "fan-1", "--fan", "99"], "run 'fan-1' has no fan starting at seq 99"),
    ],
)
def test_bad_options_exit_2(store: dict[str, str], args: list[str], message: str) -> None:
    result = invoke(["runs", *args], env=store)
    assert result.exit_code == 2, result.output
    assert message in one_error_line(result)


# -- what the commands print -----------------------------------------------------------


def test_result_of_a_run_that_has_not_ended(store: dict[str, str]) -> None:
    result = invoke(["runs", "result", "approval-1"], env=store)
    assert result.exit_code == 1
    assert result.stdout == "run approval-1 (approval, namespace default) is suspended\n"
    assert (
        one_error_line(result)
        == "Error: run 'approval-1' has not ended (it is suspended): add --wait"
    )
    result = invoke(
        ["runs", "result", "approval-1", "--wait", "--timeout", "0.2", "--json"], env=store
    )
    assert result.exit_code == 1
    assert json.loads(result.stdout)["status"] == "suspended"
    assert (
        one_error_line(result)
        == "Error: run 'approval-1' did not end within 0.2 s (it is suspended)"
    )


def test_result_of_ended_runs(store: dict[str, str]) -> None:
    result = invoke(["runs", "result", "doubled-1"], env=store)
    assert result.exit_code == 0
    assert result.stdout == "run doubled-1 (doubled, namespace default) is completed: output 42\n"
    result = invoke(["runs", "result", "needs-1", "--json"], env=store)
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert (document["status"], document["error"]["code"]) == ("failed", "missing_file")
    assert document["input"] == [document["input"][0]]


def test_list_show_and_history(store: dict[str, str]) -> None:
    result = invoke(["runs", "list", "--facets", "--json"], env=store)
    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    assert [r["id"] for r in page["runs"]] == ["fan-1", "needs-1", "doubled-1", "approval-1"]
    assert page["facets"] == {"completed": 2, "failed": 1, "suspended": 1}
    assert page["runs"][2]["input"] == [21]
    assert page["runs"][2]["output"] == 42
    result = invoke(["runs", "list", "--tag", "vip", "--status", "suspended,failed"], env=store)
    assert result.exit_code == 0, result.output
    assert "approval-1" in result.stdout
    assert "doubled-1" not in result.stdout
    result = invoke(["runs", "list", "--limit", "1"], env=store)
    assert "More: add --cursor " in result.stdout
    result = invoke(["runs", "list", "--created-before", "2000-01-01"], env=store)
    assert result.stdout == "No runs match.\n"
    # An age counts back from now: the runs were made moments ago.
    result = invoke(["runs", "list", "--created-before", "1h"], env=store)
    assert result.stdout == "No runs match.\n"
    result = invoke(["runs", "list", "--created-after", "1h", "--json"], env=store)
    assert len(json.loads(result.stdout)["runs"]) == 4

    result = invoke(["runs", "history", "needs-1", "--json"], env=store)
    assert result.exit_code == 0, result.output
    history = json.loads(result.stdout)
    (entry,) = history["entries"]
    assert (entry["kind"], entry["name"], entry["status"]) == ("local", "read_file", "failed")
    assert entry["error"]["code"] == "missing_file"
    assert "Traceback" in entry["error"]["traceback"]
    # Its one attempt, with its times (on its error too).
    (attempt,) = entry["attempt_log"]
    assert (attempt["number"], attempt["status"]) == (1, "failed")
    assert attempt["started_at"] <= attempt["finished_at"]
    assert entry["errors"][0]["started_at"] == attempt["started_at"]
    result = invoke(["runs", "history", "needs-1"], env=store)
    assert re.search(r"│ 1 +│ local +│ read_file +│ failed +│ 1 \(\d+(ms|\.\d+s)\)", result.stdout)
    result = invoke(["runs", "history", "approval-1"], env=store)
    assert "│ 1   │ signal │ approve │ pending" in result.stdout

    result = invoke(["runs", "show", "doubled-1"], env=store)
    assert result.exit_code == 0, result.output
    assert "Run doubled-1" in result.stdout
    assert "│ 1   │ remote │ double │ completed │ 1" in result.stdout


def _on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the command with stderr on a pseudo-terminal: its exit status,
    stdout, and what the terminal showed."""
    leader, follower = os.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_durable", *args],
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=ROOT,
        env={**os.environ, **env, "TERM": "xterm-256color", "COLUMNS": "100"},
    )
    os.close(follower)
    terminal = read_terminal(leader, process)
    os.close(leader)
    assert process.stdout is not None
    out = process.stdout.read().decode()
    process.stdout.close()
    return process.wait(timeout=120), out, terminal.decode(errors="replace")


def test_result_wait_shows_progress_on_a_terminal(store: dict[str, str]) -> None:
    status, out, terminal = _on_a_terminal(
        ["runs", "result", "approval-1", "--wait", "--timeout", "1"], store
    )
    assert status == 1
    assert out == "run approval-1 (approval, namespace default) is suspended\n"
    assert "waiting for run approval-1: suspended" in terminal
    assert "did not end within 1 s" in terminal


def test_prune_counts_on_a_terminal(filled: tuple[Path, str], tmp_path: Path) -> None:
    copy = tmp_path / "ops.db"
    shutil.copy(filled[0], copy)
    env = {"TRIO_DURABLE_STORE": f"sqlite:///{copy}"}
    status, out, terminal = _on_a_terminal(["runs", "prune", "--completed", "0"], env)
    assert status == 0
    assert (
        out
        == "pruned 2 runs (completed older than 0s; kept: failed, cancelled, terminated, dead)\n"
    )
    assert "pruning runs" in terminal
    result = invoke(["runs", "list", "--json"], env=env)
    assert [r["id"] for r in json.loads(result.stdout)["runs"]] == ["needs-1", "approval-1"]
    result = invoke(["runs", "prune", "--failed", "1d", "--dead", "2w", "--json"], env=env)
    assert json.loads(result.stdout) == {
        "pruned": 0,
        "ages": {
            "completed": None,
            "failed": 86400.0,
            "cancelled": None,
            "terminated": None,
            "dead": 1209600.0,
            "events": None,
        },
    }
    # Event records alone.
    result = invoke(["runs", "prune", "--events", "7d"], env=env)
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "pruned 0 runs (events older than 7d; kept: completed, failed, cancelled, terminated, dead)\n"
    )


def test_show_pages_a_fan(store: dict[str, str]) -> None:
    result = invoke(["runs", "show", "fan-1", "--json"], env=store)
    assert result.exit_code == 0, result.output
    detail = json.loads(result.stdout)
    (fan,) = detail["fans"]
    assert (fan["first_seq"], fan["size"], fan["counts"]) == (1, 3, {"completed": 3})
    # Narrower than 21: not folded.
    assert [entry["seq"] for entry in detail["timeline"]] == [1, 2, 3]
    result = invoke(
        ["runs", "show", "fan-1", "--fan", "1", "--offset", "1", "--limit", "1"], env=store
    )
    assert result.exit_code == 0, result.output
    assert "Fan at seq 1 of run fan-1: members 2..2 of 3" in result.stdout
    assert "double [2 of 3]" in result.stdout
    result = invoke(["runs", "show", "fan-1", "--fan", "1", "--failed"], env=store)
    assert result.stdout == "Fan at seq 1 of run fan-1: no failed members from 1 on (0 in all).\n"
    result = invoke(["runs", "show", "fan-1", "--fan", "1", "--json"], env=store)
    page = json.loads(result.stdout)
    assert (page["total"], [m["seq"] for m in page["members"]]) == (3, [1, 2, 3])
