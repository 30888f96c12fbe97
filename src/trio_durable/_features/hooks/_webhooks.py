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

import json
from typing import TYPE_CHECKING, Any

from ..._base import _serde
from ..._base._exceptions import (
    InvalidRunStateError,
    UsageError,
    WebhookNotFoundError,
    WebhookUsedError,
)
from ..._base._index_text import refuse_nul
from ..._base._records import TERMINAL_STATUSES, Checkpoint, Run, signal_token
from ..._kernel._run_reads import Also, read_run
from ..._kernel._webhook_keys import SECRET_SETTING as SECRET_SETTING
from ..._kernel._webhook_keys import WebhookKeys as WebhookKeys
from ..._kernel._webhook_keys import derive_token as derive_token
from ..._kernel._webhook_keys import new_token as new_token
from ..._kernel._webhook_keys import token_hash as token_hash
from ..._stores._base import WriteConflict
from ..._stores._hook_ops import CreateWebhook, UseWebhook
from ..._stores._ops import DeliverSignal, Op, PutCheckpoint, UpdateRun

if TYPE_CHECKING:
    from ..._kernel._replay import Replay
    from ..._stores._base import Store


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
