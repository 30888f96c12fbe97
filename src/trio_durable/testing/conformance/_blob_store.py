"""The blob store suite: what the engine needs from a `BlobStore`
(docs/large-payloads.md). ``factory`` is a zero-argument callable returning
an async context manager that yields a fresh, empty blob store."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Final

import trio

from ..._base._exceptions import BlobCorrupted, BlobNotFound
from ..._payloads._blobs import BlobStore
from ._outcomes import CheckResult, run_suite

OpenBlobStore = Callable[[], AbstractAsyncContextManager[BlobStore]]
"""Opens a fresh, empty blob store (and closes it on exit)."""


def _key(data: bytes) -> str:
    return "sha256-" + hashlib.sha256(data).hexdigest()


async def check_a_blob_reads_back_as_written(factory: OpenBlobStore) -> None:
    """`BlobStore.put` then `BlobStore.get` gives the bytes back, whole
    (a megabyte with every byte value among them); `BlobStore.stat` tells
    its size and the ``at`` it was stamped with."""
    data = bytes(range(256)) * 4096
    async with factory() as blobs:
        await blobs.put(_key(data), data, at=1_700_000_000.0)
        assert await blobs.get(_key(data)) == data
        info = await blobs.stat(_key(data))
        assert info is not None
        assert (info.key, info.size) == (_key(data), len(data))
        assert abs(info.stored_at - 1_700_000_000.0) < 1.0


async def check_a_missing_blob_raises_blob_not_found(factory: OpenBlobStore) -> None:
    """Reading a key never written raises `BlobNotFound` naming it; its
    `BlobStore.stat` is None; deleting it is no error."""
    key = _key(b"never written")
    async with factory() as blobs:
        missing: BlobNotFound | None = None
        try:
            await blobs.get(key)
        except BlobNotFound as exc:
            missing = exc
        assert missing is not None, "get of a missing blob did not raise BlobNotFound"
        assert missing.key == key
        assert await blobs.stat(key) is None
        await blobs.delete(key)


async def check_a_put_again_refreshes_the_stamp(factory: OpenBlobStore) -> None:
    """Writing a blob again (the same bytes: keys are content addresses)
    keeps it readable and moves its ``stored_at`` to the new ``at``: what
    keeps a blob about to be referred to again from being collected."""
    data = b"twice"
    async with factory() as blobs:
        await blobs.put(_key(data), data, at=1_700_000_000.0)
        await blobs.put(_key(data), data, at=1_700_000_500.0)
        assert await blobs.get(_key(data)) == data
        info = await blobs.stat(_key(data))
        assert info is not None
        assert abs(info.stored_at - 1_700_000_500.0) < 1.0


async def check_deleted_blobs_are_gone(factory: OpenBlobStore) -> None:
    """A deleted blob raises `BlobNotFound`; the others stay."""
    one, two = b"one", b"two"
    async with factory() as blobs:
        await blobs.put(_key(one), one, at=1_700_000_000.0)
        await blobs.put(_key(two), two, at=1_700_000_000.0)
        await blobs.delete(_key(one))
        assert await blobs.stat(_key(one)) is None
        assert await blobs.get(_key(two)) == two
        try:
            await blobs.get(_key(one))
        except BlobNotFound:
            pass
        else:
            raise AssertionError("a deleted blob is still readable")


async def check_list_pages_by_key(factory: OpenBlobStore) -> None:
    """`BlobStore.list` gives every blob once, by key, in pages of
    ``limit`` after ``after``."""
    datas = [f"blob {n}".encode() for n in range(7)]
    keys = sorted(_key(d) for d in datas)
    async with factory() as blobs:
        for data in datas:
            await blobs.put(_key(data), data, at=1_700_000_000.0)
        seen: list[str] = []
        after: str | None = None
        # Three pages hold the seven; a store that ignores ``after`` would
        # page for ever, so the pages are counted.
        for _ in range(len(datas)):
            page = await blobs.list(after=after, limit=3)
            seen.extend(info.key for info in page)
            if len(page) < 3:
                break
            after = page[-1].key
        assert seen == keys
        assert [info.size for info in await blobs.list()] == [
            len(d) for d in sorted(datas, key=_key)
        ]


async def check_concurrent_puts_of_one_blob_leave_it_whole(factory: OpenBlobStore) -> None:
    """Many writers putting the same blob at once (engines and workers
    offloading one payload) leave it whole and readable."""
    data = b"x" * 300_000
    async with factory() as blobs:
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(lambda: blobs.put(_key(data), data, at=1_700_000_000.0))
        try:
            whole = await blobs.get(_key(data))
        except BlobCorrupted:
            raise AssertionError("concurrent puts of one blob left it corrupted") from None
        assert whole == data


async def check_a_corrupted_blob_raises_blob_corrupted(factory: OpenBlobStore) -> None:
    """A blob whose bytes no longer match its key (the SHA-256 of what was
    written: altered where it is kept, truncated, written partly) raises
    `BlobCorrupted` naming it from `BlobStore.get`: its bytes are never
    served as the payload. (Putting other bytes under a key stands for the
    alteration here: a store keeps what it is given, and checks on read.)"""
    written, altered = b"the payload as written", b"the payload as altered"
    assert len(written) == len(altered)
    async with factory() as blobs:
        await blobs.put(_key(written), altered, at=1_700_000_000.0)
        corrupted: BlobCorrupted | None = None
        try:
            served = await blobs.get(_key(written))
        except BlobCorrupted as exc:
            corrupted = exc
        else:
            raise AssertionError(f"get served bytes that do not match their key: {served!r}")
        assert corrupted.key == _key(written)
        # A key that is no content address names bytes of any content.
        await blobs.put("plain-key", altered, at=1_700_000_000.0)
        assert await blobs.get("plain-key") == altered


async def check_a_put_repairs_a_corrupted_blob(factory: OpenBlobStore) -> None:
    """Putting a blob's bytes again under its key (what every engine and
    worker does when it offloads that payload again) replaces bytes that do
    not match the key, even bytes of the same length."""
    written, altered = b"the payload as written", b"the payload as altered"
    async with factory() as blobs:
        await blobs.put(_key(written), altered, at=1_700_000_000.0)
        await blobs.put(_key(written), written, at=1_700_000_500.0)
        try:
            repaired = await blobs.get(_key(written))
        except BlobCorrupted:
            raise AssertionError("a put of the right bytes left a corrupted blob") from None
        assert repaired == written
        info = await blobs.stat(_key(written))
        assert info is not None
        assert info.size == len(written)
        assert abs(info.stored_at - 1_700_000_500.0) < 1.0


BLOB_STORE_CHECKS: Final[tuple[Callable[[OpenBlobStore], Awaitable[None]], ...]] = (
    check_a_blob_reads_back_as_written,
    check_a_missing_blob_raises_blob_not_found,
    check_a_put_again_refreshes_the_stamp,
    check_deleted_blobs_are_gone,
    check_list_pages_by_key,
    check_concurrent_puts_of_one_blob_leave_it_whole,
    check_a_corrupted_blob_raises_blob_corrupted,
    check_a_put_repairs_a_corrupted_blob,
)
"""Every check of the blob store suite."""


async def check_blob_store(factory: OpenBlobStore) -> list[CheckResult]:
    """Run every check of `BLOB_STORE_CHECKS` against the blob stores
    ``factory`` opens; the first that fails raises.

    Returns:
      One `CheckResult` per check (``"passed"``: no check of this suite is
      about an optional capability).

    Raises:
      AssertionError: The blob store does not behave as the engine needs
        (the traceback names the check).
    """
    return await run_suite(BLOB_STORE_CHECKS, factory)
