"""``trio-durable entities show|call``: a key's state read, shared and
exclusive handlers called, and bad input (an unknown entity or handler, a
key of the wrong type, bad JSON) refused with the file left
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
from test_cli import invoke

__all__ = ["filled"]


def test_show_reads_a_keys_state(filled: Path) -> None:
    with unchanged(filled):
        cart = invoke(["entities", "show", "cart", "alice"], env=env_of(filled))
        counter = invoke(["entities", "show", "counter", "7"], env=env_of(filled))
        fresh = invoke(["entities", "show", "cart", "nobody"], env=env_of(filled))
        shared = invoke(["entities", "call", "cart", "alice", "count"], env=env_of(filled))
    assert json.loads(cart.stdout) == {"items": ["pen"]}
    assert json.loads(counter.stdout) == {"value": 1}
    assert json.loads(fresh.stdout) == {"items": []}
    assert json.loads(shared.stdout) == 1


async def test_an_exclusive_call_runs_on_a_live_engine(filled: Path, tmp_path: Path) -> None:
    path = tmp_path / "copy.db"
    shutil.copy(filled, path)
    store = f"sqlite:///{path}"
    call = ["entities", "call", "cart", "alice", "add", "--store", store, "--app", APP]
    async with td.open_engine(cli_families_app.app, store=store) as engine:
        async with cli_process([*call, "--args", '["ink"]', "--call-id", "c-1"]) as process:
            assert await process.exited() == 0
        assert process.lines == ["2"]
        assert await engine.entity("cart", "alice").count() == 2


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["show", "nope", "x"], 1, "no entity 'nope' in app 'cli-families' (known: cart, counter)"),
        (["call", "nope", "x", "add"], 1, "no entity 'nope'"),
        (["call", "cart", "alice", "remove"], 1, "entity 'cart' has no handler 'remove'"),
        (["show", "counter", "seven"], 2, "entity 'counter' takes int keys, not 'seven'"),
        (["call", "cart", "alice", "add", "--args", "[1"], 2, "is not JSON"),
        (["call", "cart", "alice", "add", "--args", "[1, 2]"], 2, "add"),
        (["call", "cart", "alice", "add", "--timeout", "0"], 2, "add"),
    ],
)
def test_bad_input_writes_nothing(filled: Path, args: list[str], code: int, message: str) -> None:
    assert message in refused(filled, ["entities", *args], code)


def test_entities_need_the_app(filled: Path) -> None:
    message = refused(filled, ["entities", "show", "cart", "alice"], 2, app=None)
    assert message == (
        "Error: give the App that registers the entity 'cart': --app MODULE:APP"
        " or set TRIO_DURABLE_APP"
    )
