"""Nothing readable at rest: with a codec on, every payload a write brings
to the store is the codec's text.

`SealedWrites` looks at each batch of operations as it reaches the store
(under the engines' `CodecStore` and blob store): in every record it
carries (runs, checkpoints, errors, keyed values, signals, settings), each
payload is marked as encoded (``~enc:``, see `trio_durable._payloads._stored_payloads`)
and what follows the mark is text the codec made (`PayloadCodec.describe`
names it), or it is the mark of a blob (``~blob:<key>:<size>``) whose bytes
are such a payload; an error keeps only its code, type and step readable:
its message, details and traceback are in `ErrorInfo.sealed`, text the
codec made, and its message only says so. It walks the operations' fields by name rather than asking
the codec store which it encodes, so a payload the codec store misses (a new
operation, a new field) is caught too. The keyed values of scope ``blob``
(which runs refer to which blob) hold no payload and are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from .._base._exceptions import BlobNotFound
from .._base._records import Checkpoint, ErrorInfo
from .._base._run_records import RunRecord
from .._payloads._codec import PayloadCodec
from .._payloads._stored_payloads import codec_text, parse_blob_mark
from .._stores._blob_store import SCOPE as BLOB_SCOPE
from .._stores._ops import Op, PutValue
from ._memory_blobs import MemoryBlobStore

PAYLOAD_FIELDS: Final = frozenset({"input", "output", "payload", "value"})
"""Fields of the store's records and operations that hold a payload."""

_SHOWN: Final = 5
"""Violations reported one by one; the rest are counted."""

_PLAIN: Final = (bool, int, float, frozenset)
"""Values that hold no payload."""

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _shows_its_mark(row: Any) -> bool:
    """Whether ``row`` is a checkpoint (or run record) whose error only
    shows its mark (what the engine says it waits for)."""
    return (
        isinstance(row, Checkpoint | RunRecord)
        and row.mark is not None
        and row.error == row.mark.as_error()
    )


def _fields(cls: type) -> tuple[str, ...]:
    """The names of an attrs class's fields (none for any other class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = tuple(f.name for f in attrs.fields(cls)) if attrs.has(cls) else ()
        _FIELD_NAMES[cls] = names
    return names


@final
class SealedWrites:
    """Checks the writes a store receives for payloads in the clear.

    Args:
      codec: The codec every engine of the simulation encodes with.
      blobs: The simulation's blob store, if it has one.

    Attributes:
      violations: What reached the store readable (the first few, then a
        count).
    """

    def __init__(self, codec: PayloadCodec, blobs: MemoryBlobStore | None) -> None:
        self.codec = codec
        self.blobs = blobs
        self._found: list[str] = []

    @property
    def violations(self) -> list[str]:
        shown = self._found[:_SHOWN]
        if len(self._found) > _SHOWN:
            shown.append(f"... and {len(self._found) - _SHOWN} more payloads in the clear")
        return shown

    def inspect(self, ops: Sequence[Op]) -> None:
        """Look at one batch on its way into the store."""
        for op in ops:
            if isinstance(op, PutValue) and op.scope == BLOB_SCOPE:
                continue
            self._walk((type(op).__name__,), op)

    def _walk(self, path: tuple[str, ...], value: Any) -> None:
        # Every write passes here: plain values are skipped at once, and a
        # path is made into text only for a violation.
        if isinstance(value, ErrorInfo):
            self._error(path, value)
            return
        if isinstance(value, dict):
            items: Any = value.items()
        elif isinstance(value, tuple | list):
            items = enumerate(value)
        else:
            names = _fields(type(value))
            if not names:
                return
            items = ((name, getattr(value, name)) for name in names)
        for name, item in items:
            if item is None or isinstance(item, _PLAIN):
                continue
            if name == "error" and _shows_its_mark(value):
                continue  # its error is its mark: no payload
            if isinstance(item, str):
                if name in PAYLOAD_FIELDS:
                    self._payload((*path, str(name)), item)
                continue
            self._walk((*path, str(name)), item)

    def _payload(self, path: tuple[str, ...], text: str) -> None:
        where = ".".join(path)
        try:
            mark = parse_blob_mark(text)
        except BlobNotFound:
            self._found.append(f"{where} holds a malformed blob mark: {text[:80]!r}")
            return
        if mark is not None:
            payload = None if self.blobs is None else self.blobs.payload(mark.key)
            if payload is None:
                self._found.append(f"{where} refers to a blob that is missing or corrupt: {text}")
                return
            text, where = payload, f"the blob of {where}"
        made = codec_text(text)
        if made is None or self.codec.describe(made) is None:
            self._found.append(f"{where} reached the store in the clear: {text[:80]!r}")

    def _error(self, path: tuple[str, ...], error: ErrorInfo) -> None:
        described = None if error.sealed is None else self.codec.describe(error.sealed)
        if (
            described is None
            or error.message != described
            or error.details is not None
            or error.traceback is not None
        ):
            self._found.append(
                f"{'.'.join(path)}: an error reached the store in the clear:"
                f" {error.message[:80]!r} (code {error.code!r})"
            )
