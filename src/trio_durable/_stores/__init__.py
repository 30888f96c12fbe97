"""Stores: the memory store, the SQLite store, and how a URL picks one."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import entry_points
from typing import Any, Final, Protocol

from .._exceptions import InvalidURLError
from .._urls import mask_url
from ._base import Store


class _StoreOpener(Protocol):
    def __call__(self, url: str) -> AbstractAsyncContextManager[Any]: ...


EXTRAS: Final[dict[str, str]] = {"postgresql": "postgres", "postgres": "postgres"}
"""The extra of trio-durable that installs the client of each store scheme
that needs one (its entry point is registered even without it)."""


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
      InvalidURLError: The URL has no scheme, no store serves its scheme, or
        the extra that installs its client is missing (the message names it).
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
            try:
                opener: _StoreOpener = entry.load()
            except ImportError as exc:
                # An adapter may wrap the ImportError in one of its own.
                missing = exc.name or getattr(exc.__cause__, "name", None)
                extra = EXTRAS.get(scheme)
                if extra is None or (missing or "").startswith("trio_durable"):
                    raise
                raise InvalidURLError(
                    f"the store scheme {scheme!r} needs the {extra!r} extra:"
                    f" pip install 'trio-durable[{extra}]'"
                    f" ({f'no module named {missing!r}' if missing else exc})"
                ) from exc
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
      InvalidURLError: The URL is malformed, its scheme is unknown, or the
        extra its store needs is not installed.
    """
    opener = store_opener(url)
    async with opener(url) as store:
        yield store
