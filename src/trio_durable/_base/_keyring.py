"""Named secret keys with one current key, for signing and encryption.

Message signing and payload encryption both rotate keys the same way: every
key in the ring is accepted on the way in (a signature checked, a payload
decrypted, by the key id it carries), and only the current key is used on
the way out. Rotating is therefore two deploys: first add the new key to
every process's ring, then make it current; old keys leave the ring once
nothing signed or encrypted with them remains.

A ring is written as text, for environment variables and the command line,
as comma-separated ``id:base64`` pairs, the current key first::

    k2:q83vEjRWeJq83vEjRWeJqw==,k1:ASNFZ4mrze8BI0VniavN7w==
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, final

import attrs

from ._exceptions import UsageError

MIN_KEY_BYTES: Final = 16
_ID_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


class KeyringError(UsageError):
    """A keyring is malformed: no keys, a bad key id, a key too short, or a
    current key id that is not in the ring."""


def _check_id(key_id: object) -> str:
    if (
        not isinstance(key_id, str)
        or not key_id
        or len(key_id) > 64
        or not set(key_id) <= _ID_CHARS
    ):
        raise KeyringError(
            f"a key id must be 1 to 64 characters of letters, digits and '_.-', not {key_id!r}"
        )
    return key_id


def _keys(value: Mapping[str, bytes]) -> Mapping[str, bytes]:
    if not isinstance(value, Mapping) or not value:
        raise KeyringError("a keyring needs at least one key, as a mapping of key id to bytes")
    keys: dict[str, bytes] = {}
    for key_id, key in value.items():
        _check_id(key_id)
        if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
            raise KeyringError(
                f"key {key_id!r} must be at least {MIN_KEY_BYTES} bytes, not "
                f"{len(key) if isinstance(key, bytes) else type(key).__name__}"
            )
        keys[key_id] = key
    return MappingProxyType(keys)


@final
@attrs.frozen(repr=False)
class Keyring:
    """Secret keys by id, and the id of the one that signs or encrypts now.

    Every key decrypts or verifies what carries its id; only ``current``
    signs or encrypts. Keys are at least 16 bytes (an encryption codec may
    require an exact length, such as 16, 24 or 32 for AES-GCM).

    Raises:
      KeyringError: ``keys`` is empty, a key id is not 1 to 64 characters
        of letters, digits and ``_.-``, a key is not bytes of at least 16,
        or ``current`` is not one of the ids.
    """

    keys: Mapping[str, bytes] = attrs.field(converter=_keys)
    current: str = attrs.field()

    @current.validator
    def _current(self, _: object, value: object) -> None:
        if _check_id(value) not in self.keys:
            raise KeyringError(f"the current key {value!r} is not in the keyring")

    @classmethod
    def single(cls, key: bytes, key_id: str = "k1") -> Keyring:
        """A ring of one key, which is current."""
        return cls({key_id: key}, current=key_id)

    @classmethod
    def parse(cls, text: str) -> Keyring:
        """Read ``id:base64,id:base64,...``; the first key is current.

        Raises:
          KeyringError: the text is not such pairs, or they make a bad ring.
        """
        keys: dict[str, bytes] = {}
        first = None
        for part in text.split(","):
            key_id, sep, encoded = part.strip().partition(":")
            if not sep:
                raise KeyringError("a keyring is written as id:base64 pairs separated by commas")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except binascii.Error:
                raise KeyringError(f"key {key_id!r} is not valid base64") from None
            if key_id in keys:
                raise KeyringError(f"key {key_id!r} appears twice")
            keys[key_id] = key
            first = first or key_id
        assert first is not None
        return cls(keys, current=first)

    def key(self, key_id: str) -> bytes | None:
        """The key with this id, or None when the ring has none."""
        return self.keys.get(key_id)

    @property
    def current_key(self) -> bytes:
        """The key that signs or encrypts now."""
        return self.keys[self.current]

    def __repr__(self) -> str:
        # Never print key material.
        return f"Keyring(ids={sorted(self.keys)!r}, current={self.current!r})"
