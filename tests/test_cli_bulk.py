"""``trio-durable runs cancel|retry|terminate`` with filters (bulk actions)
and ``runs terminate RUN``, in process, on a SQLite file of
examples/ops_app.py's runs: a dry run, a confirmation declined and bad
input leave the file byte-identical; a bulk action acts on every run it
matches, once. (Resumed after SIGINT, in processes of their own:
tests/test_bulk_retry_processes.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner

import trio_durable as td
from test_cli import invoke, one_error_line
from test_cli_runs import APP, _dump, _fill
from trio_durable._cli import cli, main


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bulk")
    path = folder / "ops.db"
    trio.run(_fill, f"sqlite:///{path}", folder / "flag")
    return path


@pytest.fixture
def copy(filled: Path, tmp_path: Path) -> Path:
    path = tmp_path / "ops.db"
    shutil.copyfile(filled, path)
    return path


def _env(path: Path) -> dict[str, str]:
    return {"TRIO_DURABLE_STORE": f"sqlite:///{path}", "TRIO_DURABLE_APP": APP}


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["retry", "--status", "failed", "--dry-run"], 0, None),
        (["cancel", "--workflow", "approval", "--dry-run", "--json"], 0, None),
        (["retry"], 2, "Error: give RUN, or at least one filter to retry every run it matches"),
        (["cancel", "approval-1", "--workflow", "approval"], 2, "Error: give RUN, or filters"),
        (["terminate", "--status", "nope"], 2, "Error: Invalid value for '--status': 'nope'"),
        (["retry", "--code", "x", "--from-seq", "2"], 2, "Error: --from-seq retries one RUN"),
        (["terminate", "doubled-1"], 1, "Error: run 'doubled-1' is completed; it cannot be"),
        (["terminate", "nope"], 1, "Error: no run 'nope'"),
        (["retry", "--status", "failed", "--batch", "0"], 2, "Error: Invalid value for '--batch'"),
        (["retry", "--id-prefix", ""], 2, "Error: Invalid value for '--id-prefix'"),
        (["cancel", "--top-level", "--dry-run"], 0, None),
    ],
)
def test_a_dry_run_and_bad_input_write_nothing(
    copy: Path, args: list[str], status: int, message: str | None
) -> None:
    before = _dump(copy)
    result = invoke(["runs", *args], env=_env(copy))
    assert result.exit_code == status, result.output
    if message is not None:
        assert one_error_line(result).startswith(message)
    assert _dump(copy) == before


def test_a_dry_run_shows_the_count_and_the_first_ids(copy: Path) -> None:
    result = invoke(["runs", "retry", "--status", "failed", "--dry-run"], env=_env(copy))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("1 runs to retry (operation retry-")
    assert lines[1] == "first: needs-1"
    document = invoke(
        ["runs", "cancel", "--workflow", "approval", "--dry-run", "--json"], env=_env(copy)
    )
    shown = json.loads(document.stdout)
    assert (shown["matched"], shown["first_ids"], shown["dry_run"]) == (1, ["approval-1"], True)


def test_a_declined_confirmation_changes_nothing(copy: Path) -> None:
    before = _dump(copy)
    result = CliRunner(env=_env(copy)).invoke(
        cli, ["runs", "cancel", "--workflow", "approval"], input="n\n"
    )
    assert result.exit_code == 1
    assert "cancel 1 runs? [y/N]" in result.stderr
    assert one_error_line(result) == "Error: nothing changed"
    assert _dump(copy) == before


def test_bulk_retry_then_again_acts_on_nothing_twice(copy: Path) -> None:
    result = invoke(["runs", "retry", "--code", "missing_file", "--yes"], env=_env(copy))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("retried 1 runs (operation retry-")

    async def status() -> str:
        async with td.open_client(f"sqlite:///{copy}") as client:
            return (await client.get("needs-1")).status

    assert trio.run(status) == "pending"
    again = invoke(["runs", "retry", "--code", "missing_file", "--yes", "--json"], env=_env(copy))
    assert json.loads(again.stdout)["matched"] == 0


def test_terminate_one_run_and_many(copy: Path) -> None:
    result = invoke(["runs", "terminate", "approval-1", "--reason", "obsolete"], env=_env(copy))
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "terminate requested: run approval-1 (approval, namespace default) is cancelling\n"
    )
    result = invoke(["runs", "terminate", "approval-1"], env=_env(copy))
    assert result.exit_code == 1
    assert one_error_line(result) == "Error: run 'approval-1' is being terminated already"
    many = invoke(
        ["runs", "terminate", "--workflow", "approval", "--yes", "--json"], env=_env(copy)
    )
    assert json.loads(many.stdout)["matched"] == 0


def test_top_level_and_id_prefix_narrow_a_bulk_action(copy: Path) -> None:
    def matched(*args: str) -> list[str]:
        result = invoke(["runs", *args, "--dry-run", "--json"], env=_env(copy))
        assert result.exit_code == 0, result.output
        return list(json.loads(result.stdout)["first_ids"])

    assert matched("terminate", "--top-level") == ["approval-1"]
    assert matched("terminate", "--id-prefix", "appr") == ["approval-1"]
    assert matched("terminate", "--id-prefix", "needs") == []
    assert matched("retry", "--id-prefix", "needs-") == ["needs-1"]


@pytest.mark.parametrize("where", ["main task", "another task"])
def test_ctrl_c_in_any_task_exits_130(
    copy: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    # Trio raises KeyboardInterrupt in whichever task runs when SIGINT
    # comes: the command's own, or one of the client's or the store's
    # (their watch, their thread's), from whose nursery it leaves in an
    # exception group. Either is an interruption, exit status 130.
    async def interrupted(self: td.Client, *args: object, **kwargs: object) -> None:
        if where == "main task":
            raise KeyboardInterrupt

        async def elsewhere() -> None:
            raise KeyboardInterrupt

        async with trio.open_nursery() as nursery:
            nursery.start_soon(elsewhere)
            await trio.sleep_forever()

    monkeypatch.setattr(td.Client, "retry_many", interrupted)
    for name, value in _env(copy).items():
        monkeypatch.setenv(name, value)
    before = _dump(copy)
    assert main(["runs", "retry", "--code", "missing_file", "--yes"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "Aborted."
    assert _dump(copy) == before


# -- runs prune with filters -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (["--status", "completed", "--dry-run"], 0, None),
        (["--workflow", "approval", "--dry-run", "--json"], 0, None),
        (["--completed", "1d", "--status", "failed"], 2, "Error: give ages per status (--comp"),
        (["--dead", "0", "--namespace", "x"], 2, "Error: give ages per status (--dead) or"),
        (["--completed", "1d", "--dry-run"], 2, "Error: --dry-run, --operation and --namespace"),
        (["--operation", "x", "--yes"], 2, "Error: --dry-run, --operation and --namespace"),
        (["--namespace", "default"], 2, "Error: --dry-run, --operation and --namespace"),
        ([], 2, "Error: give an age for at least one status"),
        (["--yes"], 2, "Error: give an age for at least one status"),
        (["--status", "nope"], 2, "Error: Invalid value for '--status': 'nope'"),
        (["--code", "x", "--batch", "5000"], 2, "Error: Invalid value for '--batch': 5000 runs"),
        (["--id-prefix", ""], 2, "Error: Invalid value for '--id-prefix'"),
        (["--created-after", "yesterday"], 2, "Error: Invalid value for '--created-after'"),
        (["--where", "nope"], 2, "Error: "),
    ],
)
def test_a_prune_dry_run_and_bad_input_write_nothing(
    copy: Path, args: list[str], status: int, message: str | None
) -> None:
    before = _dump(copy)
    result = invoke(["runs", "prune", *args], env=_env(copy))
    assert result.exit_code == status, result.output
    if message is not None:
        assert one_error_line(result).startswith(message)
    assert _dump(copy) == before


def test_a_prune_dry_run_shows_the_ended_runs_it_would_delete(copy: Path) -> None:
    result = invoke(["runs", "prune", "--status", "completed", "--dry-run"], env=_env(copy))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 runs to prune (operation prune-")
    assert lines[1] == "first: fan-1 doubled-1"
    # A run that has not ended is never pruned.
    result = invoke(
        ["runs", "prune", "--workflow", "approval", "--dry-run", "--json"], env=_env(copy)
    )
    shown = json.loads(result.stdout)
    assert (shown["action"], shown["matched"], shown["dry_run"]) == ("prune", 0, True)


def test_a_declined_prune_changes_nothing(copy: Path) -> None:
    before = _dump(copy)
    result = CliRunner(env=_env(copy)).invoke(
        cli, ["runs", "prune", "--top-level", "--code", "missing_file"], input="n\n"
    )
    assert result.exit_code == 1
    assert "prune 1 runs? [y/N]" in result.stderr
    assert one_error_line(result) == "Error: nothing changed"
    assert _dump(copy) == before


def test_prune_deletes_the_ended_runs_the_filters_match(copy: Path) -> None:
    result = CliRunner(env=_env(copy)).invoke(
        cli, ["runs", "prune", "--status", "completed,failed", "--id-prefix", "d"], input="y\n"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith("pruned 1 runs (operation prune-")
    result = invoke(["runs", "prune", "--code", "missing_file", "--yes", "--json"], env=_env(copy))
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert (shown["matched"], shown["acted"], shown["first_ids"]) == (1, 1, ["needs-1"])
    listed = invoke(["runs", "list", "--json"], env=_env(copy))
    assert [r["id"] for r in json.loads(listed.stdout)["runs"]] == ["fan-1", "approval-1"]
    # Run again, it finds nothing left to delete.
    again = invoke(["runs", "prune", "--code", "missing_file", "--yes", "--json"], env=_env(copy))
    assert json.loads(again.stdout)["matched"] == 0
    # Pruning by age is as it was (and takes --yes, which changes nothing).
    result = invoke(["runs", "prune", "--completed", "0", "--yes", "--json"], env=_env(copy))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["pruned"] == 1
