"""A store that keeps large payloads in a blob store passes the store
conformance suite over the memory and SQLite stores, with a threshold so
low that nearly every payload goes to the blob store and comes back."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from itertools import count
from pathlib import Path
from typing import Any

import pytest

import trio_durable as td
from trio_durable._stores._base import Store
from trio_durable._stores._blob_store import BlobOptions
from trio_durable._stores._memory import open_memory_store
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable.testing.conformance import STORE_CHECKS, StoreFactory


def blobbed(
    opener: Callable[[], AbstractAsyncContextManager[Store]], folder: Path
) -> Callable[[], Any]:
    @asynccontextmanager
    async def open_one() -> AsyncIterator[Store]:
        options = BlobOptions.of(td.LocalBlobStore(folder), 2, 3600.0)
        async with opener() as store:
            yield options.wrap(store, time.time)

    return open_one


@pytest.fixture(params=["memory", "sqlite"])
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """A factory of fresh, empty stores over one blob directory each."""
    if request.param == "memory":
        return StoreFactory(blobbed(open_memory_store, tmp_path / "blobs"))
    files = count()

    def fresh_url() -> str:
        return f"sqlite:///{tmp_path / f'blobbed-{next(files)}.db'}"

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        url = fresh_url()
        options = BlobOptions.of(td.LocalBlobStore(tmp_path / "pair-blobs"), 2, 3600.0)
        async with open_sqlite_store(url) as first, open_sqlite_store(url) as second:
            yield options.wrap(first, time.time), options.wrap(second, time.time)

    return StoreFactory(
        blobbed(lambda: open_sqlite_store(fresh_url()), tmp_path / "blobs"), open_pair
    )


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.__name__)
async def test_blobbing_store(
    store_factory: StoreFactory, check: Callable[[StoreFactory], Awaitable[None]]
) -> None:
    await check(store_factory)
