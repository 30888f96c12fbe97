"""Payload codecs: what a store keeps instead of a payload's JSON text.

A codec turns the JSON text of a payload (a run's input and output, a
checkpoint's, a signal's payload, an error's message, details and
traceback, a keyed value) into other text to keep at rest, and back.
`trio_durable.stores.CodecStore` applies one to every payload a store
writes and reads, and marks what the codec made as such (see
`_stored_payloads`): whether a stored payload is encoded is never read
from what the payload looks like (see docs/payload-codecs.md).

`AesGcmCodec` encrypts with AES-GCM under the current key of a `Keyring`
and keeps the key's id beside the ciphertext, as a JSON object::

    {"$enc":"k2","d":"<base64 of the 12-byte nonce, the ciphertext and its tag>"}

which a `CodecStore` keeps marked as ``~enc:{"$enc":"k2","d":"..."}``.
Every key of the ring decrypts what carries its id; only the current key
encrypts, so rotating keys needs no rewrite of what is stored.
"""

from __future__ import annotations

import binascii
import json
import os
from typing import TYPE_CHECKING, Final, Protocol, final, runtime_checkable

from .._base._exceptions import CodecError
from .._base._keyring import Keyring, KeyringError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

MARK: Final = "$enc"
"""The key of an encrypted payload's object that holds the key id."""

AES_KEY_SIZES: Final = (16, 24, 32)
_NONCE_BYTES: Final = 12
_AAD_PREFIX: Final = b"trio-durable/aes-gcm/1:"


@runtime_checkable
class PayloadCodec(Protocol):
    """Encodes payloads for the store to keep, and decodes them back.

    Both directions take and give text: `encode` takes a payload's JSON
    text, `decode` gives it back. The `CodecStore` marks what `encode`
    made (``~enc:`` in front of it), and hands `decode` and `describe`
    only text so marked: a codec needs no way of its own to tell its
    output from a payload, and no payload can pass for its output.
    """

    def encode(self, text: str) -> str:
        """The text to keep at rest for the payload ``text``."""
        ...

    def decode(self, text: str) -> str:
        """The payload that ``encode`` made ``text`` from.

        Raises:
          CodecError: ``text`` cannot be decoded (its key is missing, it
            fails authentication, or it is not this codec's).
        """
        ...

    def describe(self, text: str) -> str | None:
        """What ``text``, made by ``encode``, is for people (``"encrypted
        with k2"``), or None if there is nothing to say. Needs no key."""
        ...


def sealed_key_id(text: str | None) -> str | None:
    """The key id of what `AesGcmCodec` made, or None for any other text.

    Reads only the envelope: needs no key (the console shows encrypted
    payloads as such with it)."""
    envelope = _envelope(text)
    return None if envelope is None else envelope[0]


_PREFIX: Final = f'{{"{MARK}":"'


def _envelope(text: str | None) -> tuple[str, str] | None:
    # Cheap tests first.
    if not text or not text.lstrip().startswith("{") or MARK not in text:
        return None
    if text.startswith(_PREFIX) and text.endswith('"}'):
        # As `AesGcmCodec.encode` writes it: no JSON parse needed.
        key_id, sep, data = text[len(_PREFIX) : -2].partition('","d":"')
        if sep and '"' not in key_id and '"' not in data and "\\" not in data:
            return key_id, data
    # Another layout of the same object (an error's, migrated by
    # PostgreSQL's JSON functions, has its keys in their order).
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and value.keys() == {MARK, "d"}:
        key_id, data = value[MARK], value["d"]
        if isinstance(key_id, str) and isinstance(data, str):
            return key_id, data
    return None


def _aad(key_id: str) -> bytes:
    # The key id is authenticated: an envelope relabelled with another id
    # fails to decrypt rather than decrypting under the wrong key.
    return _AAD_PREFIX + key_id.encode()


@final
class AesGcmCodec:
    """Encrypts payloads with AES-GCM under a `Keyring`'s current key.

    Each payload gets a fresh random 96-bit nonce; the key id is kept with
    the ciphertext (and authenticated with it), so any key of the ring
    decrypts what it encrypted. Keys are 16, 24 or 32 bytes (AES-128, -192,
    -256). `cryptography` is imported when the first codec is made.

    Args:
      keyring: The keys; its current one encrypts.

    Raises:
      KeyringError: ``keyring`` is not a `Keyring`, or one of its keys is
        not 16, 24 or 32 bytes long.
    """

    def __init__(self, keyring: Keyring) -> None:
        if not isinstance(keyring, Keyring):
            raise KeyringError(f"AesGcmCodec needs a td.Keyring, not {keyring!r}")
        for key_id, key in keyring.keys.items():
            if len(key) not in AES_KEY_SIZES:
                raise KeyringError(
                    f"AES-GCM keys are 16, 24 or 32 bytes; key {key_id!r} has {len(key)}"
                )
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._keyring = keyring
        self._ciphers: dict[str, AESGCM] = {
            key_id: AESGCM(key) for key_id, key in keyring.keys.items()
        }

    @property
    def keyring(self) -> Keyring:
        """The keys this codec encrypts and decrypts with."""
        return self._keyring

    def encode(self, text: str) -> str:
        """``text`` encrypted under the current key, as an envelope."""
        key_id = self._keyring.current
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[key_id].encrypt(nonce, text.encode(), _aad(key_id))
        data = binascii.b2a_base64(nonce + sealed, newline=False).decode("ascii")
        # Key ids and base64 need no escaping.
        return f'{{"{MARK}":"{key_id}","d":"{data}"}}'

    def decode(self, text: str) -> str:
        """The plaintext of an envelope.

        Raises:
          CodecError: ``text`` is no envelope, its key is not in the ring,
            or its ciphertext fails authentication.
        """
        envelope = _envelope(text)
        if envelope is None:
            raise CodecError("a payload marked as encoded is not an AES-GCM envelope")
        key_id, data = envelope
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CodecError(
                f"a payload is encrypted with key {key_id!r}, which the codec's keyring"
                f" (keys {', '.join(sorted(self._ciphers))}) does not have",
                key_id=key_id,
            )
        # Imported here: only a failed decryption needs the exception type.
        from cryptography.exceptions import InvalidTag

        try:
            raw = binascii.a2b_base64(data, strict_mode=True)
            plain = cipher.decrypt(raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], _aad(key_id))
            return plain.decode()
        except (binascii.Error, ValueError, InvalidTag):
            raise CodecError(
                f"a payload encrypted with key {key_id!r} fails to decrypt: the key under"
                " that id is not the one it was encrypted with, or the stored bytes were altered",
                key_id=key_id,
            ) from None

    def describe(self, text: str) -> str | None:
        """``"encrypted with <key id>"`` for an envelope, else None."""
        key_id = sealed_key_id(text)
        return None if key_id is None else f"encrypted with {key_id}"

    def __repr__(self) -> str:
        return f"AesGcmCodec({self._keyring!r})"
