"""Large payloads: the blob store protocol, the local directory store, and
the blob store with its threshold that engines, clients and workers
offload payloads to (see docs/large-payloads.md).

A payload (JSON text) longer than a threshold is written to a `BlobStore`
under the SHA-256 of its bytes. Keys are content addresses, so writing one
payload twice writes one blob, engines and workers sharing a blob store
agree on every key without talking to each other, and a blob whose bytes
no longer match its key is known to be corrupted (`BlobCorrupted`).

Where the payload was, a row keeps the mark ``~blob:<key>:<size>`` (see
`_stored_payloads`) and a broker message its reference, the JSON object
``{"$blob":"sha256-<hex>","size":<bytes>}``: in a task's ``input`` (never
an object otherwise: a task's arguments are a list) and in a result's
``output``, which says out of band (``output_blob``) that it is one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Final, Protocol, final, runtime_checkable

import attrs

from .._base._clock import Clock
from .._base._exceptions import BlobCorrupted, BlobNotFound, StoreError, UsageError

DEFAULT_BLOB_THRESHOLD: Final = 32 * 1024
"""Payloads longer than this many characters go to the blob store by
default: half of 64 KiB, so a task or result with a payload up to it (and
its other fields) stays under 64 KiB, and far under NATS's 1 MB."""

CACHE_CHARACTERS: Final = 64 * 1024 * 1024
"""How many characters of payloads a `Blobs` keeps in memory, most
recently used first (a payload over half of it is never kept)."""

DEFAULT_BLOB_GRACE: Final = 3600.0
"""Seconds after its last write during which a blob is never collected
(see `BlobRefs.collect`)."""

_KEY: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
_CONTENT_KEY: Final = re.compile(r"sha256-[0-9a-f]{64}")


def content_key(data: bytes) -> str:
    """The key of ``data`` in a blob store: ``sha256-<hex digest>``."""
    return "sha256-" + hashlib.sha256(data).hexdigest()


def check_content(key: str, data: bytes) -> bytes:
    """``data``, read under ``key``, once it matches the key if the key is
    a content address (``sha256-<hex>``; other keys name bytes of any
    content).

    Raises:
      BlobCorrupted: It does not match.
    """
    if _CONTENT_KEY.fullmatch(key) and content_key(data) != key:
        raise BlobCorrupted(key)
    return data


@final
@attrs.define(frozen=True, kw_only=True)
class BlobInfo:
    """One blob as `BlobStore.stat` and `BlobStore.list` describe it.

    Attributes:
      key: Its key.
      size: Its length in bytes.
      stored_at: When it was last written (the ``at`` of its last `put`).
    """

    key: str
    size: int
    stored_at: float


@runtime_checkable
class BlobStore(Protocol):
    """Where payloads over the threshold are kept: a flat map of keys to
    bytes. `LocalBlobStore` keeps them in a directory; an S3-compatible
    store implements the same five methods on a bucket (see
    docs/large-payloads.md, and `trio_durable.testing.conformance.check_blob_store`,
    the suite every implementation passes).

    Keys are 1 to 200 characters of ``A-Z a-z 0-9 _ . -``, starting with a
    letter or digit (the engine writes ``sha256-<hex>``, the SHA-256 of the
    blob's bytes). Every method is safe to call from several tasks, engines
    and workers at once.
    """

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        """Store ``data`` under ``key`` and stamp it ``at``, a durable time;
        a reader never sees a partial blob. What is there is replaced
        unless it is ``data`` already, so that writing a payload again
        repairs a blob altered where it is kept.

        Raises:
          StoreError: The blob could not be written.
        """
        ...

    async def get(self, key: str) -> bytes:
        """The bytes stored under ``key``, checked against the key if it is
        a content address (``sha256-<hex>``).

        Raises:
          BlobNotFound: No blob has this key.
          BlobCorrupted: The bytes do not match the key.
          StoreError: The blob could not be read.
        """
        ...

    async def stat(self, key: str) -> BlobInfo | None:
        """The blob under ``key``, described, or None if there is none."""
        ...

    async def delete(self, key: str) -> None:
        """Delete the blob under ``key``; a missing one is no error."""
        ...

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[BlobInfo]:
        """Blobs by key (code point by code point), those after ``after``
        only if given, at most ``limit``."""
        ...


@final
class LocalBlobStore:
    """A `BlobStore` in a local directory, one file per blob (created if
    missing). Engines and workers on one machine, or sharing the directory
    over a network file system, share its blobs.

    A blob is written to a temporary file and renamed into place, so a
    reader sees all of it or none. Its file's modification time holds its
    ``stored_at``. A blob read under a content address is checked against
    it (`BlobCorrupted` if a file was edited); a put of bytes the file does
    not hold writes them, so a put repairs an altered blob. The file I/O runs on the Trio thread (as SQLite's does),
    so that virtual time under `trio.testing.MockClock` stays exact: each
    call blocks for as long as reading or writing the file takes.

    Args:
      path: The directory.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the blob directory {str(self.path)!r}: {exc}") from exc

    def __repr__(self) -> str:
        return f"LocalBlobStore({str(self.path)!r})"

    def _file(self, key: str) -> Path:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise UsageError(f"not a blob key: {key!r}")
        return self.path / key

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        file = self._file(key)
        temporary = file.with_name(f".{key}.{os.getpid()}.tmp")
        try:
            if not _holds(file, data):
                temporary.write_bytes(data)
                os.replace(temporary, file)
            os.utime(file, (at, at))
        except OSError as exc:
            raise StoreError(f"cannot write blob {key!r}: {exc}") from exc

    async def get(self, key: str) -> bytes:
        try:
            data = self._file(key).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        except OSError as exc:
            raise StoreError(f"cannot read blob {key!r}: {exc}") from exc
        return check_content(key, data)

    async def stat(self, key: str) -> BlobInfo | None:
        try:
            found = self._file(key).stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read blob {key!r}: {exc}") from exc
        return BlobInfo(key=key, size=found.st_size, stored_at=found.st_mtime)

    async def delete(self, key: str) -> None:
        try:
            self._file(key).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StoreError(f"cannot delete blob {key!r}: {exc}") from exc

    async def list(self, *, after: str | None = None, limit: int = 1000) -> list[BlobInfo]:
        try:
            names = sorted(
                name
                for name in os.listdir(self.path)
                if _KEY.fullmatch(name) and (after is None or name > after)
            )
        except OSError as exc:
            raise StoreError(f"cannot list blobs: {exc}") from exc
        found: list[BlobInfo] = []
        for name in names:
            if len(found) >= limit:
                break
            info = await self.stat(name)
            if info is not None:
                found.append(info)
        return found


def _holds(file: Path, data: bytes) -> bool:
    """Whether ``file`` holds ``data`` (a blob written before, unaltered).
    Its size is compared first: most files that differ differ in size."""
    try:
        if file.stat().st_size != len(data):
            return False
        return file.read_bytes() == data
    except FileNotFoundError:
        return False


def wire_reference(key: str, size: int) -> str:
    """The JSON text of a broker message's reference to the blob ``key``
    of ``size`` bytes."""
    return json.dumps({"$blob": key, "size": size}, separators=(",", ":"))


def is_reference_value(value: object) -> bool:
    """Whether a parsed JSON value is a blob reference (what a task's
    ``input`` may be instead of a list)."""
    return (
        isinstance(value, dict)
        and list(value) == ["$blob", "size"]
        and isinstance(value["$blob"], str)
        and _CONTENT_KEY.fullmatch(value["$blob"]) is not None
        and isinstance(value["size"], int)
        and not isinstance(value["size"], bool)
        and value["size"] >= 0
    )


def referenced_key(text: str) -> str | None:
    """The blob key of a broker message's reference, if ``text`` is one's
    JSON text; None for any other text."""
    if not text.startswith("{"):
        return None  # most are lists (arguments) or no object at all
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value["$blob"] if is_reference_value(value) else None


@final
class Blobs:
    """A blob store with the threshold payloads are measured against:
    what the engine, the client and the worker offload to and resolve from.

    Args:
      store: The blob store.
      threshold: Payloads longer than this many characters are offloaded.
      clock: Stamps the blobs written.
    """

    def __init__(self, store: BlobStore, threshold: int, clock: Clock) -> None:
        self.store = store
        self.threshold = threshold
        self.clock = clock
        # Payloads by key, most recently used last: a blob never changes
        # under its key (a blob store serves no bytes that do not match
        # it), so what
        # was read or written once can be served again (a run's every turn
        # reads its payloads).
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cached = 0

    def offloads(self, text: str | None) -> bool:
        """Whether ``text`` goes to the blob store: it is over the threshold."""
        return text is not None and len(text) > self.threshold

    async def offload(self, text: str) -> tuple[str, int]:
        """Write ``text`` to the blob store; return its key and its size in
        bytes. The blob is written even if it is there already: that moves
        its ``stored_at``, which keeps it from being collected while the
        row that refers to it is written (see `_blob_store.collect`), and
        repairs it if it was altered.

        Raises:
          StoreError: The blob store failed.
        """
        data = text.encode()
        key = content_key(data)
        await self.store.put(key, data, at=self.clock.now())
        self._remember(key, text)
        return key, len(data)

    async def resolve(self, key: str) -> str:
        """The payload kept under ``key``.

        Raises:
          BlobNotFound: Its blob is missing.
          BlobCorrupted: Its blob does not match its key.
          StoreError: The blob store failed.
        """
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        # The blob store checks the bytes against the key (`BlobStore.get`).
        data = await self.store.get(key)
        try:
            payload = data.decode()
        except UnicodeDecodeError:
            raise BlobNotFound(key, f"blob {key!r} is not a payload (not UTF-8)") from None
        self._remember(key, payload)
        return payload

    def _remember(self, key: str, payload: str) -> None:
        if len(payload) > CACHE_CHARACTERS // 2 or key in self._cache:
            return
        self._cache[key] = payload
        self._cached += len(payload)
        while self._cached > CACHE_CHARACTERS:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)


def check_blob_options(blobs: object, threshold: object) -> BlobStore | None:
    """The blob store ``blobs`` names (a `BlobStore`, a directory path for a
    `LocalBlobStore`, or None), once ``threshold`` is a positive integer.

    Raises:
      UsageError: Either is of the wrong type or out of range.
    """
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise UsageError(f"blob_threshold must be an integer >= 1, not {threshold!r}")
    if blobs is None or isinstance(blobs, BlobStore):
        return blobs
    if isinstance(blobs, str | os.PathLike):
        return LocalBlobStore(blobs)
    raise UsageError(f"blobs= takes a td.BlobStore, a directory path or None, not {blobs!r}")
