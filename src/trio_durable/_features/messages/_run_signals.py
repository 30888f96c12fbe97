"""Signals between runs: `Context.signal`, a durable message from one run
to another, delivered exactly once per key (DBOS's ``send``).

The sender's checkpoint, the claim of the key (a keyed value in the scope
``signal-key``, inserted only if absent) and the delivery (`DeliverSignal`)
are one atomic write, fenced by the sender's lease. A key claimed before,
by a replay of this call, a retry of the run, or another run using the same
key, makes the write fail whole: the call then records its checkpoint as a
duplicate, and nothing is delivered twice. The claim goes with the sending
run (`PutValue.run_id`): retention deletes it with that run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from ..._base import _serde
from ..._base._bounds import check_name
from ..._base._exceptions import InvalidRunStateError, SignalTargetNotFoundError, UsageError
from ..._base._index_text import refuse_nul
from ..._base._records import Checkpoint, Run, signal_token
from ..._kernel._wakes import announce, serves
from ..._stores._base import WriteConflict
from ..._stores._ops import DeliverSignal, Op, PutCheckpoint, PutValue, UpdateRun
from ..lifecycle._lifecycle import latest_generation

if TYPE_CHECKING:
    from ..._kernel._replay import Replay

SIGNAL_KEY_SCOPE: Final = "signal-key"
"""The scope of the keyed values that record which keys were sent."""


def check_signal(target: object, name: object, key: object) -> None:
    """Check `Context.signal`'s arguments.

    Raises:
      UsageError: One is not a non-empty string (``key``: or None).
    """
    if not isinstance(target, str) or not target:
        raise UsageError(f"a signal's target must be a run id, not {target!r}")
    check_name("signal name", name)
    if key is not None and (not isinstance(key, str) or not key):
        raise UsageError(f"idempotency_key must be a non-empty string or None, not {key!r}")
    refuse_nul("a signal's target", target)
    refuse_nul("idempotency_key", key)


async def send_signal(
    replay: Replay, target: str, name: str, payload: Any, key: str | None
) -> None:
    """`Context.signal`, with its arguments checked."""
    run = replay.run
    seq = replay.next_seq()
    if replay.recorded(seq, f"send:{name}", "signal") is not None:
        return  # Sent (or found a duplicate) before: never again.
    payload_json = _serde.dumps(payload)
    key = key if key is not None else f"{run.id}:{seq}"
    rt = replay.engine
    store = rt.store
    now = rt.clock.now()

    def record(to: str, delivered: bool) -> Checkpoint:
        output = {"to": to, "key": key, "delivered": delivered}
        return Checkpoint(
            run_id=run.id,
            seq=seq,
            name=f"send:{name}",
            kind="signal",
            status="completed",
            input=payload_json,
            output=json.dumps(output, separators=(",", ":")),
            enqueued_at=now,
            started_at=now,
            finished_at=now,
        )

    fence = UpdateRun(run.id, {}, expect_owner=rt.engine_id)
    if await store.get_value(SIGNAL_KEY_SCOPE, key) is not None:
        await _record_duplicate(replay, record(target, False), fence)
        return
    found = await store.get_run(target)
    if found is None or found.namespace != run.namespace:
        raise SignalTargetNotFoundError(
            f"no run {target!r} to signal in namespace {run.namespace!r}"
        )
    found = await latest_generation(store, found)
    if found.done:
        raise InvalidRunStateError(f"run {found.id!r} is {found.status}; it takes no signals")
    sent = record(found.id, True)
    claim = PutValue(
        SIGNAL_KEY_SCOPE,
        key,
        json.dumps({"from": run.id, "seq": seq, "to": found.id, "name": name}),
        now,
        expect_version=0,
        run_id=run.id,
    )
    ops: list[Op] = [
        PutCheckpoint(sent),
        claim,
        DeliverSignal(signal_token(found.id, name), payload_json, now),
        *_pass_on(replay, found),
        fence,
    ]
    try:
        results = await store.apply(ops)
    except WriteConflict:
        # The key was claimed meanwhile: the batch was rolled back whole.
        await _record_duplicate(replay, record(found.id, False), fence)
        return
    replay.turn.checkpoints[seq] = sent
    if results[2] is not None and serves(rt.app, found.workflow, found.version):
        # A wait of the target took it: it needs a turn.
        rt.scheduler.wake(found.id)


def _pass_on(replay: Replay, target: Run) -> list[Op]:
    """The announcement that wakes ``target`` on an engine elsewhere, if
    this one cannot run it."""
    rt = replay.runtime
    if serves(rt.app, target.workflow, target.version):
        return []
    return announce(rt.store, rt.engine_id, "wake", [target])


async def _record_duplicate(replay: Replay, duplicate: Checkpoint, fence: UpdateRun) -> None:
    await replay.runtime.store.apply([PutCheckpoint(duplicate), fence])
    replay.turn.checkpoints[duplicate.seq] = duplicate
