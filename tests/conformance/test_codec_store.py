"""A `CodecStore` passes the store conformance suite over each in-tree
store: memory, SQLite (a new file per store) and PostgreSQL (a new schema
of the ``real_server`` per store), with every payload encrypted by an
`AesGcmCodec` on the way in and decrypted on the way out."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from itertools import count
from pathlib import Path
from typing import Any

import pytest

import trio_durable as td
from trio_durable._stores._base import Store
from trio_durable._stores._memory import open_memory_store
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable.stores import CodecStore
from trio_durable.testing.conformance import STORE_CHECKS, StoreFactory

RING = td.Keyring.parse(
    "k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=,k1:MDEyMzQ1Njc4OWFiY2RlZg=="
)


def coded(opener: Callable[[], AbstractAsyncContextManager[Store]]) -> Callable[[], Any]:
    @asynccontextmanager
    async def open_one() -> AsyncIterator[Store]:
        async with opener() as store:
            yield CodecStore(store, td.AesGcmCodec(RING))

    return open_one


def coded_pair(
    opener: Callable[[], AbstractAsyncContextManager[tuple[Store, Store]]],
) -> Callable[[], Any]:
    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        async with opener() as (first, second):
            codec = td.AesGcmCodec(RING)
            yield CodecStore(first, codec), CodecStore(second, codec)

    return open_pair


def sqlite_openers(folder: Path) -> tuple[Callable[[], Any], Callable[[], Any]]:
    files = count()

    def fresh_url() -> str:
        return f"sqlite:///{folder / f'coded-{next(files)}.db'}"

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        url = fresh_url()
        async with open_sqlite_store(url) as first, open_sqlite_store(url) as second:
            yield first, second

    return (lambda: open_sqlite_store(fresh_url())), open_pair


def postgres_openers(server: str) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from servers.postgres import scratch_schema
    from trio_durable._stores._postgres import open_postgres_store

    @asynccontextmanager
    async def open_one() -> AsyncIterator[Store]:
        async with scratch_schema(server) as url, open_postgres_store(url) as store:
            yield store

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        async with (
            scratch_schema(server) as url,
            open_postgres_store(url) as first,
            open_postgres_store(url) as second,
        ):
            yield first, second

    return open_one, open_pair


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, real_server: Callable[[str], str]
) -> StoreFactory:
    """A factory of fresh, empty coded stores of each kind."""
    if request.param == "memory":
        return StoreFactory(coded(open_memory_store))
    one, pair = (
        sqlite_openers(tmp_path)
        if request.param == "sqlite"
        else postgres_openers(real_server("postgres"))
    )
    return StoreFactory(coded(one), coded_pair(pair))


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.__name__)
async def test_codec_store(
    store_factory: StoreFactory, check: Callable[[StoreFactory], Awaitable[None]]
) -> None:
    await check(store_factory)
