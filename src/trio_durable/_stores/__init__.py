"""Stores: the memory store, the SQLite store, and how a URL picks one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, Protocol

from .._exceptions import InvalidURLError
from .._urls import mask_url
from ._base import Store


class _StoreOpener(Protocol):
    def __call__(self, url: str) -> AbstractAsyncContextManager[Any]: ...


def _builtin_opener(scheme: str) -> _StoreOpener | None:
    if scheme == "memory":
        from ._memory import open_memory_store

        return open_memory_store
    if scheme == "sqlite":
        from ._sqlite import open_sqlite_store

        return open_sqlite_store
    return None


def store_opener(url: str) -> _StoreOpener:
    """The opener registered for ``url``'s scheme.

    Built-in schemes are ``memory`` and ``sqlite``; other packages add theirs
    under the entry-point group ``trio_durable.stores``.

    Raises:
      InvalidURLError: The URL has no scheme, or no store serves its scheme.
    """
    if not isinstance(url, str) or "://" not in url:
        shown = mask_url(url) if isinstance(url, str) else url
        raise InvalidURLError(f"not a store URL: {shown!r} (expected e.g. 'sqlite:///app.db')")
    scheme = url.partition("://")[0].lower()
    builtin = _builtin_opener(scheme)
    if builtin is not None:
        return builtin
    for entry in entry_points(group="trio_durable.stores"):
        if entry.name == scheme:
            opener: _StoreOpener = entry.load()
            return opener
    raise InvalidURLError(
        f"no store is registered for the scheme {scheme!r} in {mask_url(url)!r}"
    )


@asynccontextmanager
async def open_store(url: str) -> AsyncIterator[Store]:
    """Open the store a URL names, and close it on exit.

    Args:
      url: ``memory://`` or ``sqlite:///path/to/file.db`` (three slashes and a
        relative path, or four for an absolute one).

    Raises:
      InvalidURLError: The URL is malformed or its scheme is unknown.
    """
    opener = store_opener(url)
    async with opener(url) as store:
        yield store
