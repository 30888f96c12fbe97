"""The signing keys of ``trio-durable engine`` and ``worker`` processes.

They come from the environment (``TRIO_DURABLE_SIGNING_KEYS``, as
`Keyring.parse` reads it) or else from ``signing_keys`` of the config file
(`_config_file`), never from an option: a command line is visible to
every user of the host (``ps``), an environment or a file is not.
"""

from __future__ import annotations

import os
from typing import Final

from .._base._keyring import Keyring, KeyringError
from ._common import EXIT_USAGE, CommandError
from ._config_file import config_secret

SIGNING_KEYS_ENV: Final = "TRIO_DURABLE_SIGNING_KEYS"


def signing_from_env() -> Keyring | None:
    """The keyring ``TRIO_DURABLE_SIGNING_KEYS`` holds, else that of
    ``signing_keys`` in the config file (``id:base64`` pairs, the current
    key first), or None when neither is set.

    Raises:
      CommandError: The variable or the key holds no valid keyring (exit code 2);
        the message never quotes key material.
    """
    text, source = os.environ.get(SIGNING_KEYS_ENV, "").strip(), SIGNING_KEYS_ENV
    if not text:
        text, source = (config_secret("signing_keys") or "").strip(), "signing_keys"
    if not text:
        return None
    try:
        return Keyring.parse(text)
    except KeyringError as exc:
        raise CommandError(f"{source}: {exc}", EXIT_USAGE) from None
