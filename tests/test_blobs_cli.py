"""The ``trio-durable`` command reads the blob store's directory from
``TRIO_DURABLE_BLOBS``: its run commands read payloads kept there."""

from __future__ import annotations

import json
from pathlib import Path

import trio

import trio_durable as td
from test_blobs import app, echo
from test_cli import invoke


async def _fill(store: str, directory: Path) -> None:
    async with td.open_engine(app, store=store, blobs=directory) as engine:
        run = await engine.start(echo, "q" * 100_000, run_id="big-1")
        await engine.result(run.id)


def test_run_commands_read_payloads_from_the_blob_store(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    trio.run(_fill, store, tmp_path / "blobs")
    env = {"TRIO_DURABLE_STORE": store, "TRIO_DURABLE_BLOBS": str(tmp_path / "blobs")}
    result = invoke(["runs", "result", "big-1", "--json"], env=env)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["input"] == ["q" * 100_000]
    assert shown["output"] == "q" * 100_000
    blind = invoke(["runs", "result", "big-1", "--json"], env={"TRIO_DURABLE_STORE": store})
    # Without it, the payloads show as what their marks say.
    assert blind.exit_code == 0, blind.output
    reference = json.loads(blind.stdout)["output"]
    assert reference["blob"].startswith("sha256-")
    assert reference["size"] == 100_002
