"""The payload codec of the commands that open a store: an `AesGcmCodec`
of the keyring in ``TRIO_DURABLE_CODEC_KEYS`` (the console also takes
``--codec-keys``), written as `Keyring.parse` reads it, the current key
first (see docs/payload-codecs.md). Without one, payloads are read as the
store keeps them (the console shows encrypted ones as such)."""

from __future__ import annotations

import os
from typing import Final

import click

from .._base._keyring import Keyring, KeyringError
from .._payloads._codec import AesGcmCodec
from ._config_file import config_secret

CODEC_KEYS_ENV: Final = "TRIO_DURABLE_CODEC_KEYS"


def codec_of(text: str | None, source: str = CODEC_KEYS_ENV) -> AesGcmCodec | None:
    """The codec of the keyring ``text``, or None if it is empty.

    Raises:
      click.UsageError: ``text`` is not a keyring of AES keys (the message
        names ``source``, never a key).
    """
    if text is None or not text.strip():
        return None
    try:
        return AesGcmCodec(Keyring.parse(text))
    except KeyringError as exc:
        raise click.UsageError(f"{source}: {exc}") from None


def env_codec() -> AesGcmCodec | None:
    """The codec of ``TRIO_DURABLE_CODEC_KEYS``, else of ``codec_keys`` in
    the command's config file, or None if neither is set."""
    text = os.environ.get(CODEC_KEYS_ENV)
    if text:
        return codec_of(text)
    return codec_of(config_secret("codec_keys"), "codec_keys of the config file")
