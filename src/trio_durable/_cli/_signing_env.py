"""The signing keys of ``trio-durable engine`` and ``worker`` processes.

They come from the environment only (``TRIO_DURABLE_SIGNING_KEYS``, as
`Keyring.parse` reads it), never from an option: a command line is visible
to every user of the host (``ps``), an environment is not.
"""

from __future__ import annotations

import os
from typing import Final

from .._base._keyring import Keyring, KeyringError
from ._common import EXIT_USAGE, CommandError

SIGNING_KEYS_ENV: Final = "TRIO_DURABLE_SIGNING_KEYS"


def signing_from_env() -> Keyring | None:
    """The keyring ``TRIO_DURABLE_SIGNING_KEYS`` holds (``id:base64`` pairs,
    the current key first), or None when it is unset or empty.

    Raises:
      CommandError: The variable is set to no valid keyring (exit code 2);
        the message never quotes key material.
    """
    text = os.environ.get(SIGNING_KEYS_ENV, "").strip()
    if not text:
        return None
    try:
        return Keyring.parse(text)
    except KeyringError as exc:
        raise CommandError(f"{SIGNING_KEYS_ENV}: {exc}", EXIT_USAGE) from None
