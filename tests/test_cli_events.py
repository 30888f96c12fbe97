"""``trio-durable events send|list|show``: sending starts the subscribers'
runs, reading needs no App, and bad input (an unknown event, bad JSON, a
payload that fits no subscriber) is refused with the file left
byte-identical."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_families_store import env_of, filled, refused, unchanged
from test_cli import invoke

__all__ = ["filled"]


def test_list_and_show_need_no_app(filled: Path) -> None:
    with unchanged(filled):
        listed = invoke(["events", "list", "--json"], env=env_of(filled, None))
        shown = invoke(["events", "show", "evt-1"], env=env_of(filled, None))
    assert listed.exit_code == 0, listed.output
    [event] = json.loads(listed.stdout)["events"]
    assert (event["event_id"], event["name"], event["payload"], event["run_ids"]) == (
        "evt-1",
        "order.placed",
        {"sku": "pen"},
        ["evt-1.on_placed"],
    )
    assert json.loads(listed.stdout)["next_after"] is None
    assert shown.exit_code == 0
    assert "order.placed" in shown.stdout
    assert "evt-1.on_placed" in shown.stdout


def test_send_starts_the_subscribers_runs_once(filled: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    args = ["events", "send", "order.placed", "--payload", '{"sku": "ink"}', "--event-id", "e-2"]
    first = invoke(args, env=env_of(path))
    assert first.exit_code == 0, first.output
    assert first.stdout == "sent: event e-2 (order.placed); runs: e-2.on_placed\n"
    # Idempotent by its id.
    again = invoke([*args, "--json"], env=env_of(path))
    assert json.loads(again.stdout)["run_ids"] == ["e-2.on_placed"]
    listed = invoke(["events", "list", "--limit", "1"], env=env_of(path))
    assert "More: add --after e-2" in listed.stdout
    unheard = invoke(["events", "send", "nobody.listens"], env=env_of(path))
    assert unheard.exit_code == 0
    assert "no workflow of app 'cli-families' subscribes to 'nobody.listens'" in unheard.stderr


@pytest.mark.parametrize(
    ("args", "code", "message", "app"),
    [
        (["show", "nope"], 1, "Error: no event 'nope'", None),
        (["send", "order.placed", "--payload", "{"], 2, "is not JSON", "cli_families_app:app"),
        (["send", "order.placed", "--payload", "3"], 2, "on_placed", "cli_families_app:app"),
        (["send", "order.placed"], 2, "give the App that subscribes to events", None),
        (["list", "--limit", "0"], 2, "--limit", None),
    ],
)
def test_bad_input_writes_nothing(
    filled: Path, args: list[str], code: int, message: str, app: str | None
) -> None:
    assert message in refused(filled, ["events", *args], code, app=app)
