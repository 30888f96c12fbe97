"""Large payloads: the blob store protocol, the local directory store, and
the references that stand in for a payload in store rows and broker
messages (see docs/large-payloads.md).

A payload (JSON text) longer than a threshold is written to a `BlobStore`
under the SHA-256 of its bytes and replaced, where it is kept or sent, by
its reference: the JSON text ``{"$blob":"sha256-<hex>","size":<bytes>}``.
Keys are content addresses, so writing one payload twice writes one blob,
and engines and workers sharing a blob store agree on every key without
talking to each other.

A reference is recognised by its first characters, `REFERENCE_PREFIX`. A
payload of a user's own that starts with them (an object whose first key
is ``"$blob"``) is stored as a blob whatever its size, so every text that
looks like a reference in a row or a message is one: no escaping needed.
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

from ._clock import Clock
from ._exceptions import StoreError, UsageError

REFERENCE_PREFIX: Final = '{"$blob":'
"""What the JSON text of every reference starts with."""

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


@final
class BlobNotFound(StoreError):
    """A payload's blob is not in the blob store.

    Raised when a stored row or a broker message refers to a blob that was
    deleted or never written (by `BlobStore.get`, and by every read of the
    engine, the client and the worker that resolves a reference), or when a
    reference is met and no blob store was configured to read it. A remote
    step whose input blob is missing fails with code ``blob_not_found``.

    Attributes:
      key: The missing blob's key.
    """

    code = "blob_not_found"

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message or f"blob {key!r} is not in the blob store")
        self.key = key


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
    letter or digit (the engine writes ``sha256-<hex>``). Every method is
    safe to call from several tasks, engines and workers at once.
    """

    async def put(self, key: str, data: bytes, *, at: float) -> None:
        """Store ``data`` under ``key`` (replacing what is there: the same
        bytes, since keys are content addresses) and stamp it ``at``, a
        durable time; a reader never sees a partial blob.

        Raises:
          StoreError: The blob could not be written.
        """
        ...

    async def get(self, key: str) -> bytes:
        """The bytes stored under ``key``.

        Raises:
          BlobNotFound: No blob has this key.
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
    ``stored_at``. The file I/O runs on the Trio thread (as SQLite's does),
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
            if not file.exists() or file.stat().st_size != len(data):
                temporary.write_bytes(data)
                os.replace(temporary, file)
            os.utime(file, (at, at))
        except OSError as exc:
            raise StoreError(f"cannot write blob {key!r}: {exc}") from exc

    async def get(self, key: str) -> bytes:
        try:
            return self._file(key).read_bytes()
        except FileNotFoundError:
            raise BlobNotFound(key) from None
        except OSError as exc:
            raise StoreError(f"cannot read blob {key!r}: {exc}") from exc

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


def is_reference(text: str | None) -> bool:
    """Whether the payload text ``text`` is a blob reference."""
    return text is not None and text.startswith(REFERENCE_PREFIX)


def reference_key(text: str) -> str:
    """The blob key a reference's text names.

    Raises:
      BlobNotFound: ``text`` is not a well-formed reference (a reference
        cannot be told apart from a blob that is gone).
    """
    try:
        data = json.loads(text)
        key = data["$blob"]
        if (
            not isinstance(key, str)
            or not _CONTENT_KEY.fullmatch(key)
            or list(data) != ["$blob", "size"]
        ):
            raise ValueError(key)
    except (ValueError, TypeError, KeyError):
        raise BlobNotFound(text[:120], f"not a blob reference: {text[:120]!r}") from None
    return key


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
        # Payloads by reference, most recently used last: a blob never
        # changes under its key, so what was read or written once can be
        # served again (a run's every turn reads its payloads).
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cached = 0

    def offloads(self, text: str | None) -> bool:
        """Whether ``text`` goes to the blob store (over the threshold, or
        looking like a reference)."""
        return text is not None and (len(text) > self.threshold or is_reference(text))

    async def offload(self, text: str) -> tuple[str, str]:
        """Write ``text`` to the blob store; return its reference's text and
        its key. The blob is written even if it is there already: that
        moves its ``stored_at``, which keeps it from being collected while
        the row that refers to it is written (see `_blob_store.collect`).

        Raises:
          StoreError: The blob store failed.
        """
        data = text.encode()
        key = "sha256-" + hashlib.sha256(data).hexdigest()
        await self.store.put(key, data, at=self.clock.now())
        reference = json.dumps({"$blob": key, "size": len(data)}, separators=(",", ":"))
        self._remember(reference, text)
        return reference, key

    async def maybe_offload(self, text: str) -> str:
        """``text``, or its reference if it `offloads`."""
        return (await self.offload(text))[0] if self.offloads(text) else text

    async def resolve(self, text: str) -> str:
        """The payload a reference's ``text`` stands for (any other text is
        returned as it is).

        Raises:
          BlobNotFound: Its blob is missing.
          StoreError: The blob store failed.
        """
        if not is_reference(text):
            return text
        cached = self._cache.get(text)
        if cached is not None:
            self._cache.move_to_end(text)
            return cached
        key = reference_key(text)
        data = await self.store.get(key)
        try:
            payload = data.decode()
        except UnicodeDecodeError:
            raise BlobNotFound(key, f"blob {key!r} is not a payload (not UTF-8)") from None
        self._remember(text, payload)
        return payload

    def _remember(self, reference: str, payload: str) -> None:
        if len(payload) > CACHE_CHARACTERS // 2 or reference in self._cache:
            return
        self._cache[reference] = payload
        self._cached += len(payload)
        while self._cached > CACHE_CHARACTERS:
            _, dropped = self._cache.popitem(last=False)
            self._cached -= len(dropped)


async def resolve_or_fail(blobs: Blobs | None, text: str) -> str:
    """``text`` resolved through ``blobs``; with no blob store, a reference
    cannot be read (see `check_unresolved`).

    Raises:
      BlobNotFound: The reference's blob is missing, or there is no blob
        store to read it from.
    """
    if blobs is not None:
        return await blobs.resolve(text)
    check_unresolved(text)
    return text


def check_unresolved(text: str | None) -> None:
    """Raise if ``text``, read where no blob store is configured, is a
    well-formed reference: the payload is in a blob store this reader was
    not given. (Any other text is a payload, even one that starts like a
    reference: without a blob store, nothing was offloaded.)

    Raises:
      BlobNotFound: It is.
    """
    if text is None or not is_reference(text):
        return
    try:
        well_formed = is_reference_value(json.loads(text))
    except ValueError:
        return
    if well_formed:
        raise BlobNotFound(
            reference_key(text),
            f"a payload is kept in a blob store ({text[:100]}), but none was configured"
            " (blobs=) to read it",
        )


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
