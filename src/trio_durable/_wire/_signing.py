"""Signed broker messages: an HMAC-SHA256 envelope around tasks and results.

Anyone who can publish to the broker could otherwise send a worker a task
to run, or an engine a result that completes any pending step. With
``signing=`` (a `Keyring`), an engine and a worker sign every task and
result they send with the ring's current key, and accept only messages
signed by a key of their ring: whatever else arrives is rejected before it
is decoded, so a forged result never settles a step and a rejected task
never runs.

A signed message is the JSON body it signs behind one header line::

    tdsig1 <key id> <MAC, 43 characters of unpadded base64url>\\n<body>

The MAC covers what the message is (``task`` or ``result``), the key id and
the body, so a signed task cannot pass for a result, nor a signature for one
under another key. Unsigned bodies are JSON objects, which never begin with
the header's tag.

Verifying is total, as decoding is (see `_wire`): whatever bytes arrive,
`open_signed` either returns the body a key of the ring signed or raises
`SignatureRejected`, whose ``reason`` says why: ``unsigned`` (no envelope),
``unknown_key`` (a key id the ring does not hold) or ``forged`` (a malformed
envelope, or a MAC that does not match).

A process without ``signing=`` still reads a signed message (it skips the
header unchecked: it accepts unsigned ones anyway), so a signing sender and
a reader that does not verify yet work together while signing is rolled out.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from typing import TYPE_CHECKING, Final, Literal, Protocol, final

from .._base._exceptions import TrioDurableError
from .._base._keyring import Keyring

if TYPE_CHECKING:
    from .._base._observe import Metrics

MessageRole = Literal["task", "result"]
"""What a signed message is: a task to a worker, or a result to an engine."""

Reason = Literal["unsigned", "forged", "unknown_key"]
"""Why a message was rejected by the signature check."""

TAG: Final = b"tdsig1 "
"""The start of every signed message."""

_MAC_CHARS: Final = 43
"""The length of a SHA-256 MAC in unpadded base64url."""

_HEADER_MAX: Final = len(TAG) + 64 + 1 + _MAC_CHARS + 1
"""The longest header line: tag, key id (at most 64 characters), MAC."""

SIGNATURE_OVERHEAD: Final = _HEADER_MAX
"""The most bytes signing adds to a message."""

_HEADER: Final = re.compile(rb"tdsig1 ([A-Za-z0-9_.\-]{1,64}) ([A-Za-z0-9_\-]{43})\n")


@final
class SignatureRejected(TrioDurableError):
    """A broker message is not signed by a key of the receiver's ring.

    Raised by `open_signed` only, and handled where messages are received
    (the message is rejected without requeue and counted): it never reaches
    the caller of an engine or a worker.

    Attributes:
      reason: ``unsigned``, ``forged`` or ``unknown_key``.
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: Reason = reason


def _mac(key: bytes, role: MessageRole, key_id: bytes, body: bytes) -> bytes:
    digest = hmac.new(
        key, b"trio-durable " + role.encode() + b"\n" + key_id + b"\n", hashlib.sha256
    )
    digest.update(body)
    return digest.digest()


def sign(signing: Keyring | None, role: MessageRole, body: bytes) -> bytes:
    """``body`` signed with the ring's current key; as it is without a ring."""
    if signing is None:
        return body
    key_id = signing.current.encode()
    mac = base64.urlsafe_b64encode(_mac(signing.current_key, role, key_id, body)).rstrip(b"=")
    return b"".join((TAG, key_id, b" ", mac, b"\n", body))


def open_signed(signing: Keyring | None, role: MessageRole, message: bytes) -> bytes:
    """The body ``message`` carries, once its signature is checked against
    ``signing``.

    Without a ring nothing is checked: a signed message's header is skipped,
    and any other message is returned as it is.

    Raises:
      SignatureRejected: ``message`` is unsigned, names a key the ring does
        not hold, or its envelope or MAC is not what that key makes; the
        only exception this raises.
    """
    if not isinstance(message, bytes | bytearray):
        raise SignatureRejected("forged", f"a message is bytes, not {type(message).__name__}")
    message = bytes(message)
    if not message.startswith(TAG):
        if signing is None:
            return message
        raise SignatureRejected("unsigned", f"the {role} carries no signature")
    header = _HEADER.match(message[:_HEADER_MAX])
    if header is None:
        if signing is None:
            # Left for the decoder to reject as what it is: no valid message.
            return message
        raise SignatureRejected("forged", f"the {role}'s signature header is malformed")
    body = message[header.end() :]
    if signing is None:
        return body
    key_id, mac_text = header.group(1), header.group(2)
    key = signing.key(key_id.decode("ascii"))
    if key is None:
        raise SignatureRejected(
            "unknown_key",
            f"the {role} is signed with key {key_id.decode('ascii')!r}, not in the ring",
        )
    try:
        mac = base64.urlsafe_b64decode(mac_text + b"=")
    except (binascii.Error, ValueError):  # pragma: no cover - the pattern admits only base64url
        raise SignatureRejected("forged", f"the {role}'s MAC is not base64url") from None
    if not hmac.compare_digest(mac, _mac(key, role, key_id, body)):
        raise SignatureRejected(
            "forged", f"the {role}'s MAC does not match key {key_id.decode('ascii')!r}"
        )
    return body


class RejectionCounts(Protocol):
    """What `count_rejection` updates: an engine's or a worker's statistics."""

    rejected: int
    rejected_unsigned: int
    rejected_forged: int
    rejected_unknown_key: int


def count_rejection(
    stats: RejectionCounts, metrics: Metrics, role: MessageRole, error: Exception
) -> None:
    """Count a message of ``role`` rejected at the boundary with ``error``:
    by its reason if it failed the signature check, else as undecodable."""
    if isinstance(error, SignatureRejected):
        if error.reason == "unsigned":
            stats.rejected_unsigned += 1
        elif error.reason == "forged":
            stats.rejected_forged += 1
        else:
            stats.rejected_unknown_key += 1
        metrics.count_unauthenticated(role, error.reason)
    else:
        stats.rejected += 1
        metrics.count_rejected(role)
