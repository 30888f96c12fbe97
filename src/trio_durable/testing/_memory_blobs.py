"""The simulation's blob store: a `BlobStore` in a dict, on the Trio thread.

A `LocalBlobStore` reads and writes files on threads, which would let
`MockClock`'s autojump move virtual time while one is in flight; a
simulation keeps its blobs in memory instead, fresh for each execution, and
checks afterwards that every reference a row holds names a blob whose bytes
hash to its key (`blob_violations`).
"""

from __future__ import annotations

import hashlib
from typing import final

import trio

from .._blobs import BlobInfo, BlobNotFound, is_reference, reference_key


@final
class MemoryBlobStore:
    """A `BlobStore` whose blobs live in this object.

    Attributes:
      blobs: The bytes and stamp of each blob, by key.
      puts: How many times a blob was written (the same bytes again
        included).
    """

    def __init__(self) -> None:
        self.blobs: dict[str, tuple[bytes, float]] = {}
        self.puts = 0

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        await trio.lowlevel.checkpoint()
        self.blobs[key] = (bytes(data), at)
        self.puts += 1

    async def get(self, key: str) -> bytes:
        await trio.lowlevel.checkpoint()
        try:
            return self.blobs[key][0]
        except KeyError:
            raise BlobNotFound(key) from None

    async def stat(self, key: str) -> BlobInfo | None:
        await trio.lowlevel.checkpoint()
        if key not in self.blobs:
            return None
        data, at = self.blobs[key]
        return BlobInfo(key=key, size=len(data), stored_at=at)

    async def delete(self, key: str) -> None:
        await trio.lowlevel.checkpoint()
        self.blobs.pop(key, None)

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[BlobInfo]:
        await trio.lowlevel.checkpoint()
        keys = sorted(key for key in self.blobs if after is None or key > after)[:limit]
        return [
            BlobInfo(key=key, size=len(self.blobs[key][0]), stored_at=self.blobs[key][1])
            for key in keys
        ]

    def payload(self, reference: str) -> str | None:
        """The text a reference stands for, or None if its blob is missing
        or its bytes do not hash to its key."""
        key = reference_key(reference)
        found = self.blobs.get(key)
        if found is None or f"sha256-{hashlib.sha256(found[0]).hexdigest()}" != key:
            return None
        return found[0].decode()


def blob_violations(blobs: MemoryBlobStore, texts: list[tuple[str, str]]) -> list[str]:
    """Where a row's reference (``(where, text)`` pairs of the payloads the
    store holds) names no blob, or a blob whose bytes are not its key's."""
    violations: list[str] = []
    for where, text in texts:
        if is_reference(text) and blobs.payload(text) is None:
            violations.append(f"{where} refers to a blob that is missing or corrupt: {text}")
    return violations
