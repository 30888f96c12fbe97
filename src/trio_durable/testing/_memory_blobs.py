"""The simulation's blob store: a `BlobStore` in a dict, on the Trio thread.

A `LocalBlobStore` reads and writes files on threads, which would let
`MockClock`'s autojump move virtual time while one is in flight; a
simulation keeps its blobs in memory instead, fresh for each execution, and
checks afterwards that every blob mark a row holds (``~blob:<key>:<size>``,
see `trio_durable._payloads._stored_payloads`) names a blob whose bytes hash to its
key, and one that its run's blob references list (`blob_violations`): a
mark that the run's references do not list reads as a missing blob.
"""

from __future__ import annotations

from typing import final

import trio

from .._base._exceptions import BlobNotFound
from .._payloads._blobs import BlobInfo, check_content, content_key
from .._payloads._stored_payloads import parse_blob_mark
from .._stores._base import Store
from .._stores._blob_store import SCOPE as BLOB_SCOPE
from .._stores._blob_store import blob_listing


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
            data = self.blobs[key][0]
        except KeyError:
            raise BlobNotFound(key) from None
        return check_content(key, data)

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

    def payload(self, key: str) -> str | None:
        """The text kept under ``key``, or None if its blob is missing or
        its bytes do not hash to its key."""
        found = self.blobs.get(key)
        if found is None or content_key(found[0]) != key:
            return None
        return found[0].decode()


async def blob_violations(blobs: MemoryBlobStore, store: Store) -> list[str]:
    """Where a run's or checkpoint's blob mark (in ``store`` as stored,
    under every payload layer) names no blob, a blob whose bytes are not
    its key's, or a blob its run's references do not list."""
    violations: list[str] = []
    for run in await store.list_runs(limit=1_000_000):
        texts = [(f"run {run.id}", text) for text in (run.input, run.output)]
        for cp in await store.get_checkpoints(run.id):
            where = f"checkpoint {run.id}@{cp.seq}"
            texts.extend((where, text) for text in (cp.input, cp.output))
        for where, text in texts:
            if text is None:
                continue
            try:
                mark = parse_blob_mark(text)
            except BlobNotFound:
                violations.append(f"{where} holds a malformed blob mark: {text[:120]}")
                continue
            if mark is None:
                continue
            if blobs.payload(mark.key) is None:
                violations.append(f"{where} refers to a blob that is missing or corrupt: {text}")
            elif await store.get_value(BLOB_SCOPE, blob_listing(run.id, mark.key)) is None:
                violations.append(
                    f"{where} refers to a blob its run's references do not list: {text}"
                )
    return violations
