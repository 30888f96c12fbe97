"""What a payload's text is where a store keeps it: the payload itself, or
a mark written by a payload layer (a codec's `CodecStore`, the blob store's
`BlobbingStore`) standing in for it.

Every payload written to a store is JSON text: the engine's serializer
writes it (a run's input, a signal, an update, a webhook's body, an
event, an entity call), or it is a JSON value off the wire written again
(a step's result), or text checked to be JSON (a remote workflow's
decision). JSON text never begins with ``~``. So a payload layer marks
what it wrote with a prefix that begins with ``~``, and whether a stored
payload is encoded or offloaded is read from the mark alone, never from
the payload's shape: ``{"$enc": ...}`` or ``{"$blob": ...}`` sent by
anyone is data like any other.

- ``~enc:<text>``: encoded by a `CodecStore`; ``<text>`` is what its codec
  made (`AesGcmCodec`'s: ``{"$enc":"k1","d":"<base64>"}``).
- ``~blob:sha256-<hex>:<size>``: kept in the blob store under that key
  (``<size>`` bytes), by a `BlobbingStore`.

Errors are no JSON text of the user's (their message is any text); an
encoded error keeps what its codec made in its own field,
`ErrorInfo.sealed`.

Stores written before the marks kept the two in the payload's place, in
band: ``{"$enc":"k1","d":"..."}`` and ``{"$blob":"sha256-...","size":N}``.
The schema migrations of the SQLite and PostgreSQL stores mark them (see
`._stores._payload_marks_sql`): the first as ``~enc:`` followed by it, the
second as ``~blob:`` followed by it (``~blob:{"$blob":...}``), which says
that its blob was written before the marks too: when `AesGcmCodec` and the
blob store were both on, such a blob holds an encrypted payload in band,
which `legacy_blob_content` marks as it is read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final, final

import attrs

from .._base._exceptions import BlobNotFound, CodecError, StoreError
from .._base._records import Checkpoint, ErrorInfo, Run
from ._codec import sealed_key_id

MARK: Final = "~"
"""What every mark begins with (and no JSON text)."""

ENCODED: Final = "~enc:"
"""The mark of a payload a codec encoded, followed by what the codec made."""

IN_BLOB: Final = "~blob:"
"""The mark of a payload kept in the blob store, followed by its key and size."""

_BLOB_MARK: Final = re.compile(r"~blob:(sha256-[0-9a-f]{64}):(0|[1-9][0-9]{0,15})")

# What the release before the marks wrote in band, exactly (the SQL
# migrations match the same texts): `AesGcmCodec.encode`'s envelope, and
# the reference `Blobs.offload` wrote.
_LEGACY_ENCODED: Final = re.compile(r'\{"\$enc":"[^"\\]*","d":"[^"\\]*"\}')
_LEGACY_IN_BLOB: Final = re.compile(r'\{"\$blob":"(sha256-[0-9a-f]{64})","size":([0-9]{1,16})\}')


def is_marked(text: str | None) -> bool:
    """Whether ``text`` is a mark (encoded, or in the blob store), not a
    payload."""
    return text is not None and text.startswith(MARK)


def encoded(codec_text: str) -> str:
    """The mark of a payload its codec encoded as ``codec_text``."""
    return ENCODED + codec_text


def codec_text(text: str | None) -> str | None:
    """What the codec made, if ``text`` is the mark of an encoded payload;
    None for any other text."""
    if text is None or not text.startswith(ENCODED):
        return None
    return text[len(ENCODED) :]


@final
@attrs.define(frozen=True, kw_only=True)
class BlobMark:
    """The blob a payload is kept in, as its mark names it.

    Attributes:
      key: The blob's key (``sha256-<hex>``).
      size: The payload's length in bytes.
      legacy: Marked by the schema migration, from a reference written in
        band before the marks (its blob may hold an encoded payload in
        band too: see `legacy_blob_content`).
    """

    key: str
    size: int
    legacy: bool = False


def blob_mark(key: str, size: int) -> str:
    """The mark of a payload kept in the blob store under ``key``."""
    return f"{IN_BLOB}{key}:{size}"


def parse_blob_mark(text: str) -> BlobMark | None:
    """The blob ``text`` names, if it is the mark of a payload in the blob
    store; None for any other text.

    Raises:
      BlobNotFound: ``text`` has the blob mark but names no blob properly
        (a reference that cannot be read is a blob that cannot be found).
    """
    if not text.startswith(IN_BLOB):
        return None
    found = _BLOB_MARK.fullmatch(text)
    if found is not None:
        return BlobMark(key=found[1], size=int(found[2]))
    legacy = _LEGACY_IN_BLOB.fullmatch(text, len(IN_BLOB))
    if legacy is not None:
        return BlobMark(key=legacy[1], size=int(legacy[2]), legacy=True)
    raise BlobNotFound(text[:120], f"not a blob reference: {text[:120]!r}")


def legacy_blob_content(text: str) -> str:
    """The stored form of what a blob written before the marks holds: an
    `AesGcmCodec` envelope (written in band when the codec and the blob
    store were both on) marked as encoded; anything else as it is."""
    return encoded(text) if _LEGACY_ENCODED.fullmatch(text) else text


def unreadable(text: str | None) -> StoreError | None:
    """Why ``text`` cannot be read as a payload where it was read, or None
    if it can: a mark left by the layers of the reader's store, which had
    no codec (or none that made it) or no blob store to read it with."""
    if text is None or not text.startswith(MARK):
        return None
    inner = codec_text(text)
    if inner is not None:
        key_id = sealed_key_id(inner)
        what = "encoded" if key_id is None else f"encrypted with key {key_id!r}"
        return CodecError(
            f"a payload is {what}, and no codec (codec=) was configured to decode it",
            key_id=key_id,
        )
    try:
        mark = parse_blob_mark(text)
    except BlobNotFound as exc:
        return exc
    if mark is not None:
        return BlobNotFound(
            mark.key,
            f"a payload is kept in a blob store (blob {mark.key!r}, {mark.size} bytes),"
            " but none was configured (blobs=) to read it",
        )
    return CodecError(f"a payload is marked {text[:16]!r}, which this trio-durable cannot read")


def check_readable(text: str | None) -> None:
    """Raise `unreadable`'s error for ``text``, if there is one.

    Raises:
      CodecError: ``text`` is encoded, and was read without its codec.
      BlobNotFound: ``text`` is in a blob store, read without one.
    """
    error = unreadable(text)
    if error is not None:
        raise error


def undecodable(run: Run, checkpoints: tuple[Checkpoint, ...]) -> StoreError | None:
    """Why a turn's payloads (the run's and its checkpoints') cannot be read
    here, or None if they can: a mark or a sealed error left by the layers
    that read them."""
    for text in (run.input, run.output):
        error = unreadable(text)
        if error is not None:
            return error
    if run.error is not None and run.error.sealed is not None:
        return _sealed(run.error)
    for cp in checkpoints:
        for text in (cp.input, cp.output):
            error = unreadable(text)
            if error is not None:
                return error
        for failure in (cp.error, *cp.errors):
            if failure is not None and failure.sealed is not None:
                return _sealed(failure)
    return None


def _sealed(error: ErrorInfo) -> CodecError:
    return CodecError(
        f"an error is {error.message}, and no codec (codec=) was configured to decode it",
        key_id=sealed_key_id(error.sealed),
    )


# -- for people ------------------------------------------------------------------------


def payload_for_people(text: str | None) -> Any:
    """A stored payload as a JSON value for people: the payload itself, or
    what its mark says of it (``{"encrypted_with": "k1"}``, ``{"encoded":
    true}``, ``{"blob": "sha256-...", "size": 20971523}``) where it was read
    without the layer that reads it."""
    if text is None:
        return None
    if not text.startswith(MARK):
        try:
            return json.loads(text)
        except ValueError:
            return text
    inner = codec_text(text)
    if inner is not None:
        key_id = sealed_key_id(inner)
        return {"encoded": True} if key_id is None else {"encrypted_with": key_id}
    try:
        mark = parse_blob_mark(text)
    except BlobNotFound:
        return text
    return text if mark is None else {"blob": mark.key, "size": mark.size}


def said(text: str | None) -> str | None:
    """`shown` in a few words for a table cell: the payload's JSON text, or
    ``encrypted with k1``, ``encoded``, ``in blob sha256-... (N bytes)``."""
    value = payload_for_people(text)
    if not is_marked(text):
        return text
    if isinstance(value, dict) and "encrypted_with" in value:
        return f"encrypted with {value['encrypted_with']}"
    if isinstance(value, dict) and "blob" in value:
        return f"in blob {value['blob']} ({value['size']} bytes)"
    return "encoded" if isinstance(value, dict) else text


def shown_error(error: ErrorInfo) -> dict[str, Any]:
    """An error as a JSON object for people (its ``to_json()``): a sealed
    one without what its codec made, its details ``{"encrypted_with":
    "k1"}`` (or ``{"encoded": true}``)."""
    data = error.to_json()
    if error.sealed is not None:
        del data["sealed"]
        data["details"] = sealed_for_people(error.sealed)
    return data


def sealed_for_people(sealed: str) -> dict[str, Any]:
    """What a codec made, as people are shown it without the codec:
    ``{"encrypted_with": "k1"}``, or ``{"encoded": true}``."""
    key_id = sealed_key_id(sealed)
    return {"encoded": True} if key_id is None else {"encrypted_with": key_id}
