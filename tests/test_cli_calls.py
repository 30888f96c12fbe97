"""``trio-durable runs query`` and ``runs update``: a run's handlers called
from the command line; a query answered here with nothing written, an
update applied by a live engine, and bad input (an unknown handler, bad
JSON, an update the run rejects) refused with the file left
byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import cli_families_app
import trio_durable as td
from cli_families_store import APP, env_of, filled, refused, unchanged
from cli_processes import cli_process
from test_cli import invoke, one_error_line

__all__ = ["filled"]


def test_query_answers_from_the_runs_history(filled: Path) -> None:
    with unchanged(filled):
        result = invoke(["runs", "query", "order-1", "lines"], env=env_of(filled))
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"apple": 2}
    # An ended run answers from where it ended.
    ended = invoke(["runs", "query", "order-2", "lines"], env=env_of(filled))
    assert json.loads(ended.stdout) == {}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["query", "order-1", "nope"], 1, "run 'order-1' has no query handler 'nope'"),
        (["query", "nobody", "lines"], 1, "no run 'nobody'"),
        (["query", "order-1", "lines", "--args", "[1"], 2, "is not JSON"),
        (["query", "order-1", "lines", "--args", "[1]"], 2, "lines"),
        (["update", "order-1", "add_line", "--args", '["pear", 0]'], 1, "quantity must be"),
        (["update", "order-1", "nope"], 1, "run 'order-1' has no update handler 'nope'"),
        (["update", "order-1", "add_line", "--args", '{"sku": 1}'], 2, "not a JSON array"),
        (["update", "order-1", "add_line", "--args", '["pear"]'], 2, "add_line"),
        (["update", "order-2", "add_line", "--args", '["pear", 1]'], 1, "completed"),
    ],
)
def test_bad_calls_write_nothing(filled: Path, args: list[str], code: int, message: str) -> None:
    assert message in refused(filled, ["runs", *args], code)


@pytest.mark.parametrize("command", ["query", "update"])
def test_calls_need_the_app(filled: Path, command: str) -> None:
    message = refused(filled, ["runs", command, "order-1", "lines"], 2, app=None)
    assert message == (
        "Error: give the App that registers the run's workflow: --app MODULE:APP"
        " or set TRIO_DURABLE_APP"
    )


async def test_an_update_is_applied_by_a_live_engine(filled: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    store = f"sqlite:///{path}"
    args = ["runs", "update", "order-1", "add_line", "--store", store, "--app", APP]
    async with td.open_engine(cli_families_app.app, store=store) as engine:
        update = [*args, "--args", '["pear", 3]', "--update-id", "u-1"]
        async with cli_process(update) as process:
            assert await process.exited() == 0
        assert process.lines == ["5"]
        # Sent again with its id, it is not applied twice.
        async with cli_process(update) as process:
            assert await process.exited() == 0
        assert process.lines == ["5"]
        assert await engine.query("order-1", "lines") == {"apple": 2, "pear": 3}
        await engine.signal("order-1", "submit")
        assert await engine.result("order-1") == {"apple": 2, "pear": 3}


def test_an_update_no_engine_applies_times_out(filled: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    args = ["runs", "update", "order-1", "add_line", "--args", '["fig", 1]']
    result = invoke([*args, "--update-id", "u-9", "--timeout", "0"], env=env_of(path))
    assert result.exit_code == 1
    assert one_error_line(result) == (
        "Error: update 'u-9' of run 'order-1' was not applied within 0 s (is an engine of the"
        " store running?); if it was accepted, it stays stored: send it again with"
        " --update-id u-9 for its outcome"
    )
