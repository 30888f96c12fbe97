"""The secret webhook tokens derive from, as a replay's host keeps it.

A webhook's token is HMAC-SHA256(secret, nonce) of the nonce its checkpoint
records (see `_features.hooks._webhooks`), so a replay derives the same
token wherever it runs: the host of a replay offers the secret
(`ReplayHost.webhook_keys`), the engine's configured one or the store's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, final

from .._stores._hook_ops import KeepSetting

if TYPE_CHECKING:
    from ._replay import ReplayStore

SECRET_SETTING: Final = "webhook_secret"
"""The store setting that keeps the random secret of engines given none."""

_NONCE_BYTES: Final = 32


@final
class WebhookKeys:
    """An engine's webhook secret: the configured one, or the store's."""

    def __init__(self, configured: bytes | None = None) -> None:
        self._secret = configured

    async def secret(self, store: ReplayStore) -> bytes:
        """The secret, read (or made and kept) in the store the first time
        if none was configured."""
        if self._secret is None:
            candidate = secrets.token_urlsafe(32)
            [kept] = await store.apply([KeepSetting(SECRET_SETTING, candidate)])
            self._secret = str(kept).encode()
        return self._secret


def derive_token(secret: bytes, nonce: str) -> str:
    """The token of the webhook whose checkpoint holds ``nonce``."""
    digest = hmac.new(secret, nonce.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _draw_nonce() -> str:
    return secrets.token_urlsafe(_NONCE_BYTES)


def new_token(secret: bytes, draw: Callable[[], str] = _draw_nonce) -> tuple[str, str]:
    """A fresh ``(nonce, token)``: nonces are drawn until the token they
    derive does not begin with ``-``, which a command line would read as an
    option (``trio-durable hooks deliver TOKEN``; about 1 in 64 URL-safe
    tokens would). The token stays a function of the nonce alone, so a
    replay derives it as before, and tokens made before this rule keep
    working."""
    while True:
        nonce = draw()
        token = derive_token(secret, nonce)
        if not token.startswith("-"):
            return nonce, token


def token_hash(token: str) -> str:
    """What the store keeps a webhook under: its token's SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()
