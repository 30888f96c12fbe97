"""`td.LocalBlobStore` passes the blob store suite, and keeps to its
directory."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

import trio_durable as td
from trio_durable.testing.conformance import BLOB_STORE_CHECKS, OpenBlobStore, check_blob_store


def local_factory(root: Path) -> OpenBlobStore:
    counter = itertools.count()

    @asynccontextmanager
    async def open_local() -> AsyncIterator[td.BlobStore]:
        yield td.LocalBlobStore(root / f"store-{next(counter)}")

    return open_local


@pytest.mark.parametrize("check", BLOB_STORE_CHECKS, ids=lambda check: check.__name__)
async def test_the_local_blob_store_conforms(check: object, tmp_path: Path) -> None:
    assert callable(check)
    await check(local_factory(tmp_path))


async def test_check_blob_store_runs_the_suite(tmp_path: Path) -> None:
    await check_blob_store(local_factory(tmp_path))


async def test_a_key_cannot_leave_the_directory(tmp_path: Path) -> None:
    blobs = td.LocalBlobStore(tmp_path / "blobs")
    assert isinstance(blobs, td.BlobStore)
    for key in ("../escape", "a/b", "", ".hidden", "x" * 201):
        with pytest.raises(td.UsageError):
            await blobs.put(key, b"data", at=0.0)
        with pytest.raises(td.UsageError):
            await blobs.get(key)
    assert not (tmp_path / "escape").exists()
    assert repr(blobs) == f"LocalBlobStore({str(tmp_path / 'blobs')!r})"
