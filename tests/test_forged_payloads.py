"""A payload shaped like an encrypted payload (``{"$enc": ...}``) or a blob
reference naming another run's blob (``{"$blob": "sha256-..."}``) is data
like any other, on the memory and SQLite stores: delivered by a client
without the codec (or the blob store), and by an engine with them, it is
read back as it was sent, and the runs complete (see
tests/forged_payloads.py; PostgreSQL:
tests/integration/test_forged_payloads_postgres.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from forged_payloads import (
    RING1,
    app,
    deliver_and_read_back,
    forged_encrypted,
    forged_reference,
    reader,
)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str | td.Store]:
    if request.param == "memory":
        yield td.MemoryStore()
    else:
        yield f"sqlite:///{tmp_path / 'forged.db'}"


async def test_an_encrypted_payloads_shape_is_data(
    store: str | td.Store,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with reader(open_test_engine, store, blobs, "memory://forged-enc") as engine:
        # A client without the codec (nor the blob store).
        async with td.open_client(store, app=app, wall_clock=fixed_wall) as client:
            await deliver_and_read_back(engine, client, forged_encrypted(), "client", updates=False)
        # The engine with the codec and the blob store.
        await deliver_and_read_back(engine, engine, forged_encrypted(), "engine", updates=True)


async def test_a_reference_to_another_runs_blob_is_data(
    store: str | td.Store,
    tmp_path: Path,
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with reader(open_test_engine, store, blobs, "memory://forged-blob") as engine:
        forged = await forged_reference(engine, blobs)
        # A client with the codec but no blob store.
        async with td.open_client(
            store, app=app, codec=td.AesGcmCodec(RING1), wall_clock=fixed_wall
        ) as client:
            await deliver_and_read_back(engine, client, forged, "client", updates=True)
        # A client with neither.
        async with td.open_client(store, app=app, wall_clock=fixed_wall) as blind:
            await deliver_and_read_back(engine, blind, forged, "blind", updates=False)
        await deliver_and_read_back(engine, engine, forged, "engine", updates=True)
