"""``trio-durable queues list``: the flow-control queues' depths as the
store counts them, with the App's limits, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import trio_durable as td
from cli_families_store import env_of, unchanged
from test_cli import invoke

app = td.App("cli-queues")
app.queue("mail", concurrency=1)
app.queue("idle", concurrency=4, priority=2)


@app.step(group="mailers", queue="mail")
async def send(to: str) -> str:
    return to


@app.workflow()
async def mailing(ctx: td.Context, to: str) -> str:
    return await ctx.step(send, to)


async def _fill(store: str) -> None:
    # Three runs for a queue of one, and no worker of the group: one step
    # holds the slot, sent to the broker, and two wait.
    async with td.open_engine(app, store=store) as engine:
        for to in ("a", "b", "c"):
            await engine.start(mailing, to, run_id=f"mail-{to}")
        await engine.drain()


def test_queues_list(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    trio.run(_fill, f"sqlite:///{path}")
    with unchanged(path):
        plain = invoke(["queues", "list", "--json"], env=env_of(path, None))
        with_app = invoke(
            ["queues", "list", "--app", "test_cli_queues:app"], env=env_of(path, None)
        )
    assert json.loads(plain.stdout) == {
        "queues": [{"queue": "mail", "limit": None, "priority": None, "admitted": 1, "waiting": 2}]
    }
    assert with_app.exit_code == 0, with_app.output
    assert "idle" in with_app.stdout
    assert "mail" in with_app.stdout


def test_queues_list_with_the_brokers_backlog(tmp_path: Path) -> None:
    """With --broker, the backlog per group route: here a memory broker of
    the command's own, so nothing waits, and the route comes from --app."""
    path = tmp_path / "q.db"
    trio.run(_fill, f"sqlite:///{path}")
    env = env_of(path, None)
    args = ["queues", "list", "--app", "test_cli_queues:app", "--broker", "memory://"]
    with unchanged(path):
        as_json = invoke([*args, "--listen", "0", "--json"], env=env)
        plain = invoke([*args, "--listen", "0"], env=env)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["group_backlogs"] == [
        {"group": "mailers", "workers": 0, "backlog": 0}
    ]
    assert "Broker backlog per group" in plain.stdout
    assert "mailers" in plain.stdout


def test_runs_show_says_the_place_of_a_step_in_its_queues_line(tmp_path: Path) -> None:
    path = tmp_path / "q.db"
    trio.run(_fill, f"sqlite:///{path}")
    shown = {}
    with unchanged(path):
        for to in ("a", "b", "c"):
            result = invoke(["runs", "show", f"mail-{to}", "--wide"], env=env_of(path, None))
            assert result.exit_code == 0, result.output
            shown[to] = result.stdout
    # One holds the slot; the two others wait, one behind the other.
    places = sorted(
        text.split("queued at position ")[1][0]
        for text in shown.values()
        if "queued at position " in text
    )
    assert places == ["1", "2"]
    assert sum("waiting for a slot of queue 'mail'" in text for text in shown.values()) == 2
