"""Webhooks: one-time callbacks a run creates (`Context.webhook`) and anyone
holding the token delivers (`Engine.deliver_webhook`, `Client.deliver_webhook`,
``POST /hooks/{token}``), Restate's awakeables.

The token is never stored. `Context.webhook` records a random nonce in a
``webhook`` checkpoint and derives the token from it as
HMAC-SHA256(secret, nonce), so a replay derives the same token; the store
keeps the webhook under the token's SHA-256 only. The secret is
``open_engine(webhook_secret=...)``, the same on every engine of a fleet, or
else one made at random once and kept in the store's settings (then the
store holds what derives the tokens: see docs/webhooks-and-breakpoints.md).

A delivery marks the webhook used and delivers its payload as the signal
named as the webhook, in one batch: of two deliveries of a token exactly one
wins, and a refused one changes nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, final

from . import _serde
from ._control import Also, read_run
from ._exceptions import (
    InvalidRunStateError,
    UsageError,
    WebhookNotFoundError,
    WebhookUsedError,
)
from ._index_text import refuse_nul
from ._records import TERMINAL_STATUSES, Checkpoint, Run, signal_token
from ._stores._base import WriteConflict
from ._stores._hook_ops import CreateWebhook, KeepSetting, UseWebhook
from ._stores._ops import DeliverSignal, Op, PutCheckpoint, UpdateRun

if TYPE_CHECKING:
    from ._replay import Replay, ReplayStore
    from ._stores._base import Store

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


async def create_webhook(replay: Replay, name: str) -> str:
    """`Context.webhook`: the token of the webhook at this point of the
    body, created on the first turn that reaches it."""
    if not isinstance(name, str) or not name:
        raise UsageError(f"webhook name must be a non-empty string, not {name!r}")
    refuse_nul("webhook name", name)
    rt = replay.runtime
    seq = replay.next_seq()
    cp = replay.recorded(seq, name, "webhook")
    secret = await rt.webhook_keys.secret(rt.store)
    if cp is not None:
        return derive_token(secret, json.loads(cp.output or "{}")["nonce"])
    nonce, token = new_token(secret)
    now = rt.clock.now()
    cp = Checkpoint(
        run_id=replay.run.id,
        seq=seq,
        name=name,
        kind="webhook",
        status="completed",
        output=json.dumps({"nonce": nonce}),
        enqueued_at=now,
        finished_at=now,
    )
    # Written at once, not with the turn: the body may hand the token out
    # (a step, an email) before the turn ends, and its callback must find
    # the webhook.
    await rt.store.apply(
        [PutCheckpoint(cp), CreateWebhook(token_hash(token), cp.run_id, name, now)]
    )
    replay.turn.checkpoints[seq] = cp
    return token


async def deliver_webhook(
    store: Store, now: float, token: str, payload: Any, also: Also
) -> tuple[Run, bool]:
    """Deliver ``payload`` through the webhook of ``token`` (see
    `Engine.deliver_webhook`). Returns its run and whether a wait took the
    payload (then the run needs a turn).

    Raises:
      WebhookNotFoundError: No webhook has this token.
      WebhookUsedError: It was delivered already.
      InvalidRunStateError: Its run has ended.
      SerializationError: The payload cannot be serialized.
    """
    if not isinstance(token, str) or not token:
        raise WebhookNotFoundError("no webhook has this token")
    payload_json = _serde.dumps(payload)
    hashed = token_hash(token)
    hook = await store.get_webhook(hashed)
    if hook is None:
        raise WebhookNotFoundError("no webhook has this token")
    if hook.used_at is not None:
        raise WebhookUsedError("this webhook was delivered already")
    run = await read_run(store, hook.run_id, None)
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run.id!r} is {run.status}; it takes no webhooks")
    signal = signal_token(run.id, hook.name)
    ops: list[Op] = [UseWebhook(hashed, now), DeliverSignal(signal, payload_json, now)]
    if await store.signal_waiter(signal) is not None:
        # Due now, too: an engine that starts later (or missed the
        # announcement) finds the run by its due time, not only by the
        # reconcile pass.
        ops.append(
            UpdateRun(
                run.id, {"wake_at": now}, expect_status=frozenset({"suspended"}), strict=False
            )
        )
    try:
        _, waiter, *_ = await store.apply([*ops, *also([run])])
    except WriteConflict:
        raise WebhookUsedError("this webhook was delivered already") from None
    return run, waiter is not None
