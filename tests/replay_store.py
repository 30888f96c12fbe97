"""A SQLite file of runs of `replay_app.app` (deploy A), and their
histories exported by a client, for the tests of export and replay.

- ``o-open`` charged and waits for ``packed``;
- ``o-done`` charged, was packed, shipped and completed;
- ``f-1`` charged and failed with the code ``declined``;
- ``p-1`` priced ``pen`` (under the argument check) and completed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

import replay_app
import trio_durable as td

RUNS = ("o-open", "o-done", "f-1", "p-1")


async def fill(store: str, codec: td.PayloadCodec | None = None) -> None:
    """The runs above, on ``store``."""
    async with td.open_engine(replay_app.app, store=store, codec=codec) as engine:
        await engine.start("order", "o-1", run_id="o-open")
        await engine.start("order", "o-2", run_id="o-done")
        await engine.start("failing", "card", run_id="f-1")
        await engine.start("priced", "pen", run_id="p-1")
        await engine.drain()
        await engine.signal("o-done", "packed")
        await engine.result("o-done")
        with pytest.raises(td.RunFailed):
            await engine.result("f-1")
        await engine.drain()


async def export(
    store: str, folder: Path, codec: td.PayloadCodec | None = None
) -> dict[str, dict[str, Any]]:
    """Each run's history, exported by a client with the app, written to
    ``folder`` as ``<run>.json``."""
    documents = {}
    async with td.open_client(store, app=replay_app.app, codec=codec) as client:
        for run_id in RUNS:
            documents[run_id] = await client.export_history(run_id)
    write(folder, documents)
    return documents


def write(folder: Path, documents: dict[str, dict[str, Any]]) -> None:
    """Each document to ``folder`` as ``<run>.json``."""
    folder.mkdir(parents=True, exist_ok=True)
    for run_id, document in documents.items():
        (folder / f"{run_id}.json").write_text(json.dumps(document), encoding="utf-8")


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite file of the runs above."""
    path = tmp_path_factory.mktemp("replay") / "shop.db"
    trio.run(fill, f"sqlite:///{path}")
    return path


@pytest.fixture(scope="module")
def histories(filled: Path) -> Path:
    """The folder of their exported histories."""
    folder = filled.parent / "histories"
    trio.run(export, f"sqlite:///{filled}", folder)
    return folder
