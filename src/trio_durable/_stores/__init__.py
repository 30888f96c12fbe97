"""Stores: the memory store, the SQLite store, and how a URL picks one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Final

from .._base._exceptions import InvalidURLError
from .._base._schemes import Install, Kind, Opener, find_opener
from ._base import Store

_POSTGRES: Final = Install(what="the 'postgres' extra", pip="'trio-durable[postgres]'")

STORES: Final = Kind(
    noun="store",
    group="trio_durable.stores",
    builtins={
        "memory": "trio_durable._stores._memory:open_memory_store",
        "sqlite": "trio_durable._stores._sqlite:open_sqlite_store",
        # In the core, behind the extra that installs psycopg.
        "postgresql": "trio_durable._stores._postgres:open_postgres_store",
        "postgres": "trio_durable._stores._postgres:open_postgres_store",
    },
    install={"postgresql": _POSTGRES, "postgres": _POSTGRES},
    example="sqlite:///app.db",
)
"""The store URL schemes built into trio-durable (see `trio_durable._base._schemes`)."""


def store_opener(url: str) -> Opener:
    """The opener registered for ``url``'s scheme.

    Built-in schemes are ``memory``, ``sqlite`` and ``postgresql`` (or
    ``postgres``); other packages add theirs under the entry-point group
    ``trio_durable.stores``.

    Raises:
      InvalidURLError: The URL has no scheme, no store serves its scheme, or
        the extra that installs its client is missing (the message names it).
    """
    return find_opener(STORES, url)


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    """Open the store a URL names, and close it on exit.

    Args:
      url: ``memory://`` or ``sqlite:///path/to/file.db`` (three slashes and a
        relative path, or four for an absolute one).

    Raises:
      InvalidURLError: The URL is malformed, its scheme is unknown, or the
        extra its store needs is not installed.
    """
    opener = store_opener(url)
    async with opener(url) as store:
        yield store


async def enter_store(stack: AsyncExitStack, store: str | Store) -> Store:
    """The store ``store`` names, opened on ``stack`` if it is a URL (an
    open `Store` is used as it is, and not closed).

    Raises:
      InvalidURLError: ``store`` is neither a valid store URL nor a `Store`.
      StoreError: The store cannot be opened.
    """
    if isinstance(store, str):
        return await stack.enter_async_context(open_store(store))
    if callable(getattr(store, "apply", None)) and callable(getattr(store, "begin_turn", None)):
        return store
    raise InvalidURLError(f"store must be a URL or a Store, not {store!r}")
