"""Nothing readable at rest: with a codec on, every payload a write brings
to the store is the codec's text.

`SealedWrites` looks at each batch of operations as it reaches the store
(under the engines' `CodecStore` and blob store): in every record it
carries (runs, checkpoints, errors, keyed values, signals, settings), each
payload is text the codec made (`PayloadCodec.describe` names it), or a
reference to a blob whose bytes are; an error keeps only its code, type and
step readable. It walks the operations' fields by name rather than asking
the codec store which it encodes, so a payload the codec store misses (a new
operation, a new field) is caught too. The keyed values of scope ``blob``
(which runs refer to which blob) hold no payload and are left alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from .._blob_store import SCOPE as BLOB_SCOPE
from .._blobs import is_reference
from .._codec import PayloadCodec
from .._records import ErrorInfo
from .._stores._ops import Op, PutValue
from ._memory_blobs import MemoryBlobStore

PAYLOAD_FIELDS: Final = frozenset({"input", "output", "payload", "value"})
"""Fields of the store's records and operations that hold a payload."""

_SHOWN: Final = 5
"""Violations reported one by one; the rest are counted."""


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
            self._walk(type(op).__name__, op)

    def _walk(self, where: str, value: Any) -> None:
        if isinstance(value, ErrorInfo):
            self._error(where, value)
        elif attrs.has(type(value)):
            for field in attrs.fields(type(value)):
                self._field(f"{where}.{field.name}", field.name, getattr(value, field.name))
        elif isinstance(value, dict):
            for key, item in value.items():
                self._field(f"{where}[{key!r}]", str(key), item)
        elif isinstance(value, tuple | list):
            for index, item in enumerate(value):
                self._walk(f"{where}[{index}]", item)

    def _field(self, where: str, name: str, value: Any) -> None:
        if name in PAYLOAD_FIELDS and isinstance(value, str):
            self._payload(where, value)
        else:
            self._walk(where, value)

    def _payload(self, where: str, text: str) -> None:
        if is_reference(text) and self.blobs is not None:
            payload = self.blobs.payload(text)
            if payload is None:
                self._found.append(f"{where} refers to a blob not stored (yet): {text}")
                return
            text, where = payload, f"the blob of {where}"
        if self.codec.describe(text) is None:
            self._found.append(f"{where} reached the store in the clear: {text[:80]!r}")

    def _error(self, where: str, error: ErrorInfo) -> None:
        sealed = json.dumps(error.details, separators=(",", ":"))
        described = self.codec.describe(sealed)
        if described is None or error.message != described or error.traceback is not None:
            self._found.append(
                f"{where}: an error reached the store in the clear:"
                f" {error.message[:80]!r} (code {error.code!r})"
            )
