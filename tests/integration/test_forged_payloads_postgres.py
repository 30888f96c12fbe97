"""A payload shaped like an encrypted payload or a blob reference naming
another run's blob is data like any other on PostgreSQL too (see
tests/forged_payloads.py and tests/test_forged_payloads.py). Real time
(the store's calls go to threads)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

import trio_durable as td
from forged_payloads import (
    RING1,
    app,
    deliver_and_read_back,
    forged_encrypted,
    forged_reference,
    reader,
)
from servers.postgres import scratch_schema


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


async def test_an_encrypted_payloads_shape_is_data(url: str, tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with reader(td.open_engine, url, blobs, "memory://forged-enc-pg") as engine:
        async with td.open_client(url, app=app) as client:
            await deliver_and_read_back(engine, client, forged_encrypted(), "client", updates=False)
        await deliver_and_read_back(engine, engine, forged_encrypted(), "engine", updates=True)


async def test_a_reference_to_another_runs_blob_is_data(url: str, tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    async with reader(td.open_engine, url, blobs, "memory://forged-blob-pg") as engine:
        forged = await forged_reference(engine, blobs)
        async with td.open_client(url, app=app, codec=td.AesGcmCodec(RING1)) as client:
            await deliver_and_read_back(engine, client, forged, "client", updates=True)
        async with td.open_client(url, app=app) as blind:
            await deliver_and_read_back(engine, blind, forged, "blind", updates=False)
        await deliver_and_read_back(engine, engine, forged, "engine", updates=True)
