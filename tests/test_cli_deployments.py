"""``trio-durable deployments set-current|list`` in process, on a SQLite
file: deployments set (and ramped) by the command, bad input refused with
one line and nothing stored."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import trio_durable as td
from test_cli import invoke, one_error_line


async def _create(url: str) -> None:
    async with td.open_store(url):
        pass


def test_deployment_commands(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'deploy.db'}"
    trio.run(_create, url)
    env = {"TRIO_DURABLE_STORE": url}
    app = ["--app", "test_deployments:APP_A"]
    made = invoke(["deployments", "set-current", "once", "A", *app, "--json"], env)
    assert made.exit_code == 0, made.stderr
    assert json.loads(made.stdout)["current"] == "A"
    ramped = invoke(["deployments", "set-current", "once", "B", "--ramp", "25%", *app], env)
    assert ramped.exit_code == 0, ramped.stderr
    assert ramped.stdout.strip() == "once: 25% of new runs to B, the rest to A"

    for args, message in [
        (["nope", "A"], "unknown workflow 'nope'"),
        (["once", "a/b"], "broker-safe"),
        (["once", "A", "--ramp", "150%"], "ramp must be"),
        (["once", "A", "--ramp", "lots"], "give a percentage"),
    ]:
        refused = invoke(["deployments", "set-current", *args, *app], env)
        assert refused.exit_code == 2, refused.stdout
        assert message in one_error_line(refused)

    listed = invoke(["deployments", "list", "--json"], env)
    assert listed.exit_code == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert document["deployments"] == [
        {
            "workflow": "once",
            "current": "A",
            "ramping": "B",
            "ramp": 25.0,
            "updated_at": document["deployments"][0]["updated_at"],
        }
    ]
    assert [(b["build"], b["drained"], b["current_for"]) for b in document["builds"]] == [
        ("A", True, ["once"]),
        ("B", True, []),
    ]
    shown = invoke(["deployments", "list"], env)
    assert "drained" in shown.stdout


def test_a_build_no_live_worker_announces_is_set_with_a_note(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'deploy.db'}"
    trio.run(_create, url)
    env = {"TRIO_DURABLE_STORE": url}
    app = ["--app", "test_deployments:APP_A"]
    # With a broker to ask: none of its (no) workers is of build C.
    made = invoke(["deployments", "set-current", "once", "C", *app, "--broker", "memory://"], env)
    assert made.exit_code == 0, made.stderr
    assert made.stdout.strip() == "once: new runs to C"
    assert "note: no live worker announces build C: runs given it wait, blocked" in made.stderr
    # Without one, nothing is known of the workers, and nothing is said.
    quiet = invoke(["deployments", "set-current", "once", "C", *app], env)
    assert quiet.exit_code == 0, quiet.stderr
    assert quiet.stderr == ""
