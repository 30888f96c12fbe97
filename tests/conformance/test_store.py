"""The in-tree stores pass the public store conformance suite
(`trio_durable.testing.conformance`), as an outside store would run it.

Each check of `STORE_CHECKS` runs against each store: memory, SQLite (a new
file per store) and PostgreSQL (a new schema of the ``real_server`` per
store). What only one store has is tested beside it (tests/test_sqlite_store.py,
tests/integration/test_postgres_store.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from itertools import count
from pathlib import Path

import pytest

from trio_durable._stores._base import Store
from trio_durable._stores._memory import open_memory_store
from trio_durable._stores._sqlite import open_sqlite_store
from trio_durable.testing.conformance import STORE_CHECKS, StoreFactory


def sqlite_factory(folder: Path) -> StoreFactory:
    """SQLite stores, each in a new file of ``folder``."""
    files = count()

    def fresh_url() -> str:
        return f"sqlite:///{folder / f'store-{next(files)}.db'}"

    @asynccontextmanager
    async def open_pair() -> AsyncIterator[tuple[Store, Store]]:
        url = fresh_url()
        async with open_sqlite_store(url) as first, open_sqlite_store(url) as second:
            yield first, second

    return StoreFactory(lambda: open_sqlite_store(fresh_url()), open_pair)


def postgres_factory(server: str) -> StoreFactory:
    """PostgreSQL stores, each in a new schema of the database at ``server``."""
    # Imported here: psycopg is an extra, and the other stores' checks must
    # not need it.
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

    return StoreFactory(open_one, open_pair)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path, real_server: Callable[[str], str]
) -> StoreFactory:
    """A factory of fresh, empty stores of each kind."""
    if request.param == "memory":
        # One process, one object: the shared-store check uses it twice.
        return StoreFactory(open_memory_store)
    if request.param == "sqlite":
        return sqlite_factory(tmp_path)
    return postgres_factory(real_server("postgres"))


@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.__name__)
async def test_store(
    store_factory: StoreFactory, check: Callable[[StoreFactory], Awaitable[None]]
) -> None:
    await check(store_factory)
