"""``trio-durable schedules ...``: each command on a store holding the
schedule ``nightly``, and bad input (an unknown schedule, a bad cron
expression or timezone, bad JSON) refused with the file left
byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from cli_families_store import env_of, filled, refused, unchanged
from test_cli import invoke

__all__ = ["filled"]


def _json(path: Path, *args: str) -> Any:
    result = invoke(["schedules", *args, "--json"], env=env_of(path))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_list_and_show(filled: Path) -> None:
    with unchanged(filled):
        listed = invoke(["schedules", "list"], env=env_of(filled))
        shown = _json(filled, "show", "nightly")
        assert [s["name"] for s in _json(filled, "list")] == ["nightly"]
    assert listed.exit_code == 0
    assert "nightly" in listed.stdout
    assert "0 3 * * * (UTC)" in listed.stdout
    assert shown == {
        **shown,
        "name": "nightly",
        "workflow": "greet",
        "cron": "0 3 * * *",
        "paused": True,
        "next_tick": None,
    }


def test_create_pause_resume_trigger_delete(filled: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    created = _json(path, "create", "hourly", "greet", "--cron", "0 * * * *", "--args", '["h"]')
    assert created["cron"] == "0 * * * *"
    assert created["paused"] is False
    assert _json(path, "pause", "hourly")["paused"] is True
    assert _json(path, "resume", "hourly")["paused"] is False
    run = _json(path, "trigger", "hourly")
    assert run["workflow"] == "greet"
    assert run["id"].startswith("hourly@trigger-1-")
    assert run["input"] == ["h"]
    assert _json(path, "show", "hourly")["triggered"] == 1
    deleted = invoke(["schedules", "delete", "hourly"], env=env_of(path))
    assert deleted.stdout == "deleted schedule 'hourly'\n"
    assert [s["name"] for s in _json(path, "list")] == ["nightly"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["show", "nope"], 1, "Error: no schedule 'nope'"),
        (["pause", "nope"], 1, "Error: no schedule 'nope'"),
        (["resume", "nope"], 1, "Error: no schedule 'nope'"),
        (["trigger", "nope"], 1, "Error: no schedule 'nope'"),
        (["delete", "nope"], 1, "Error: no schedule 'nope'"),
        (["create", "x", "greet", "--args", '["x"]', "--cron", "every day"], 2, "cron"),
        (["create", "x", "greet", "--args", '["x"]', "--cron", "61 * * * *"], 2, "cron"),
        (["create", "x", "greet", "--args", '["x"]', "--timezone", "Mars/Olympus"], 2, "Mars"),
        (["create", "x", "greet", "--args", "[1"], 2, "is not JSON"),
        (["create", "x", "greet"], 2, "takes 1 positional input"),
        (["create", "x", "greet", "--overlap", "sometimes"], 2, "--overlap"),
    ],
)
def test_bad_input_writes_nothing(filled: Path, args: list[str], code: int, message: str) -> None:
    assert message in refused(filled, ["schedules", *args], code)
