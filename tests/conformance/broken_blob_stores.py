"""Blob stores that break the blob store protocol on purpose, one way
each, to show that the blob store conformance suite notices.

Each wraps a real `td.LocalBlobStore` in a fresh directory and changes one
thing.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

import trio_durable as td
from trio_durable.testing.conformance import OpenBlobStore


class BlobStoreWrapper:
    """A blob store that does what the `td.LocalBlobStore` it wraps does."""

    def __init__(self, inner: td.LocalBlobStore) -> None:
        self.inner = inner

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        await self.inner.put(key, data, at=at)

    async def get(self, key: str) -> bytes:
        return await self.inner.get(key)

    async def stat(self, key: str) -> td.BlobInfo | None:
        return await self.inner.stat(key)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[td.BlobInfo]:
        return await self.inner.list(after=after, limit=limit)


def factory_of(
    wrapper: Callable[[td.LocalBlobStore], BlobStoreWrapper], root: Path
) -> OpenBlobStore:
    """Fresh blob stores, each a new directory under ``root`` inside ``wrapper``."""
    serial = itertools.count()

    @asynccontextmanager
    async def open_one() -> AsyncIterator[td.BlobStore]:
        yield wrapper(td.LocalBlobStore(root / f"blobs-{next(serial)}"))

    return open_one


class ReturnsOtherBytes(BlobStoreWrapper):
    """`get` returns the blob without its last byte."""

    async def get(self, key: str) -> bytes:
        return (await self.inner.get(key))[:-1]


class MissingIsEmpty(BlobStoreWrapper):
    """`get` of a missing blob returns no bytes instead of raising."""

    async def get(self, key: str) -> bytes:
        try:
            return await self.inner.get(key)
        except td.BlobNotFound:
            return b""


class WritesOnce(BlobStoreWrapper):
    """A blob that exists is not written again: its stamp stays."""

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        if await self.inner.stat(key) is None:
            await self.inner.put(key, data, at=at)


class DeleteIgnored(BlobStoreWrapper):
    """`delete` does nothing."""

    async def delete(self, key: str) -> None:
        await trio.lowlevel.checkpoint()


class ListIgnoresAfter(BlobStoreWrapper):
    """`list` starts from the first key, whatever ``after`` says."""

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[td.BlobInfo]:
        return await self.inner.list(limit=limit)


PART = 100_000


class AppendsParts(BlobStoreWrapper):
    """Uploads a blob in parts, each appended to what is stored (a resumable
    upload without a lock): concurrent writers of one blob append theirs to
    each other's."""

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        for start in range(0, len(data), PART):
            # The parts so far, as stored (no blob whole yet to check).
            stored = b"" if start == 0 else (self.inner.path / key).read_bytes()
            await self.inner.put(key, stored + data[start : start + PART], at=at)
            await trio.lowlevel.checkpoint()


class ServesUnchecked(BlobStoreWrapper):
    """`get` serves the file's bytes without checking them against the key."""

    async def get(self, key: str) -> bytes:
        try:
            return (self.inner.path / key).read_bytes()
        except FileNotFoundError:
            raise td.BlobNotFound(key) from None


class KeepsSameSize(BlobStoreWrapper):
    """`put` writes nothing over a blob of the same length (only its stamp
    moves): an altered blob is never repaired."""

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        info = await self.inner.stat(key)
        if info is None or info.size != len(data):
            await self.inner.put(key, data, at=at)
        else:
            os.utime(self.inner.path / key, (at, at))
