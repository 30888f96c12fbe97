"""``trio-durable runs list`` and ``runs count``: the filters they share,
``--top-level`` and ``--id-prefix`` among them, run ids kept whole in
tables however narrow, ``--wide``, and bad filters refused with nothing
written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from rich.console import Console

from cli_families_store import env_of, filled, refused, unchanged
from test_cli import invoke
from trio_durable._cli import _common

__all__ = ["filled"]


def _ids(path: Path, *args: str) -> list[str]:
    with unchanged(path):
        result = invoke(["runs", "list", "--json", *args], env=env_of(path))
    assert result.exit_code == 0, result.output
    return [run["id"] for run in json.loads(result.stdout)["runs"]]


def _counts(path: Path, *args: str) -> dict[str, object]:
    with unchanged(path):
        result = invoke(["runs", "count", "--json", *args], env=env_of(path))
    assert result.exit_code == 0, result.output
    counted: dict[str, object] = json.loads(result.stdout)
    return counted


def test_top_level_leaves_out_children_and_handlers(filled: Path) -> None:
    every = _ids(filled)
    assert {"parent-1.child.1", "parent-1.child.2", "failing-1.onError.0"} <= set(every)
    top = _ids(filled, "--top-level")
    assert [i for i in every if not i.startswith(("parent-1.", "failing-1."))] == top
    assert _counts(filled, "--top-level") == {
        "total": len(top),
        "by_status": {"completed": len(top) - 1, "suspended": 1},
    }
    assert _counts(filled) == {"total": len(every), "by_status": {"completed": 9, "suspended": 1}}


def test_id_prefix_finds_runs_by_the_start_of_their_id(filled: Path) -> None:
    assert _ids(filled, "--id-prefix", "parent-1") == [
        "parent-1.child.2",
        "parent-1.child.1",
        "parent-1",
    ]
    assert _ids(filled, "--id-prefix", "parent-1", "--top-level") == ["parent-1"]
    assert _ids(filled, "--id-prefix", "order-", "--status", "suspended") == ["order-1"]
    assert _ids(filled, "--id-prefix", "ORDER") == []
    assert _counts(filled, "--id-prefix", "order-") == {
        "total": 2,
        "by_status": {"completed": 1, "suspended": 1},
    }
    assert _counts(filled, "--id-prefix", "nobody") == {"total": 0, "by_status": {}}


def test_count_for_people(filled: Path) -> None:
    with unchanged(filled):
        result = invoke(["runs", "count", "--workflow", "order"], env=env_of(filled))
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0] == "2 runs match"
    assert any("completed" in line and "1" in line for line in lines)
    none = invoke(["runs", "count", "--workflow", "nothing"], env=env_of(filled))
    assert none.stdout == "No runs match.\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "sleeping"], "'sleeping' is not a status"),
        (["--top-level", "--parent", "parent-1"], "--top-level lists runs without a parent"),
        (["--id-prefix", ""], "give a prefix of one character or more"),
        (["--created-after", "yesterday-ish"], "--created-after"),
        (["--where", "nothing=1"], "nothing"),
    ],
)
@pytest.mark.parametrize("command", ["list", "count"])
def test_bad_filters_exit_2(filled: Path, command: str, args: list[str], message: str) -> None:
    assert message in refused(filled, ["runs", command, *args], 2)


@pytest.mark.parametrize(
    ("args", "ids"),
    [
        (["runs", "list"], ["parent-1.child.2", "failing-1.onError.0", "evt-1.on_placed"]),
        (["runs", "show", "parent-1"], ["parent-1.child.1", "parent-1.child.2"]),
        (["runs", "history", "failing-1"], ["failing-1.onError.0"]),
        (["events", "list"], ["evt-1.on_placed"]),
    ],
)
def test_run_ids_are_never_folded(
    filled: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], ids: list[str]
) -> None:
    # A terminal as narrow as 60 columns: other columns fold, ids stay whole.
    monkeypatch.setattr(
        _common, "stdout_console", lambda: Console(file=sys.stdout, width=60, soft_wrap=False)
    )
    with unchanged(filled):
        result = invoke(args, env=env_of(filled))
    assert result.exit_code == 0, result.output
    for run_id in ids:
        assert run_id in result.stdout, result.stdout


def test_wide_folds_no_cell(filled: Path) -> None:
    narrow = invoke(["runs", "list", "--id-prefix", "failing-1"], env=env_of(filled))
    wide = invoke(["runs", "list", "--id-prefix", "failing-1", "--wide"], env=env_of(filled))
    assert wide.exit_code == 0
    # Every run a line of its own: nothing folded.
    rows = [line for line in wide.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 2, wide.stdout
    assert "onError:declined" in wide.stdout
    assert len(max(wide.stdout.splitlines(), key=len)) >= len(
        max(narrow.stdout.splitlines(), key=len)
    )


def test_a_run_handed_to_its_handler_shows_failed_handled_by_it(filled: Path) -> None:
    env = env_of(filled)
    with unchanged(filled):
        listed = invoke(["runs", "list", "--id-prefix", "failing-1", "--wide"], env=env)
        shown = invoke(["runs", "show", "failing-1", "--wide"], env=env)
    assert listed.exit_code == 0, listed.output
    [handled] = [line for line in listed.stdout.splitlines() if "│ failing-1 " in line]
    assert "│ failed, handled " in handled
    assert "completed" not in handled
    [handler] = [line for line in listed.stdout.splitlines() if "│ failing-1.onError.0 " in line]
    assert "│ completed " in handler
    assert shown.exit_code == 0, shown.output
    assert (
        "failed, handled by failing-1.onError.0 (the handler's outcome: completed)" in shown.stdout
    )
