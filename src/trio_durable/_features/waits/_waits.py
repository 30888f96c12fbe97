"""Durable waits: timers and signals.

A wait records a pending checkpoint and suspends the run, so a waiting run
holds no task. A timer's checkpoint is due at its wake time, when the poller
resumes the run. A signal wait registers a waiter under the signal's token
in the same write; a signal sent before the wait is buffered and handed
over by that write, settling the checkpoint at once. A wait's timeout
settles its checkpoint by a claim, so a signal delivered at the same moment
either wins or loses whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import attrs
import trio

from ..._base import _serde
from ..._base._exceptions import SignalTimeout
from ..._base._records import Checkpoint, ErrorInfo, signal_token
from ..._kernel._replay import Replay, Suspend
from ..._stores._ops import RemoveSignalWaiter, SettleCheckpoint, WaitSignal


async def timer(replay: Replay, due: Callable[[float], float]) -> None:
    """A durable sleep until ``due(now)`` (the due time, once recorded)."""
    seq = replay.next_seq()
    cp = replay.recorded(seq, "sleep", "timer")
    now = replay.runtime.clock.now()
    if cp is None:
        wake_at = due(now)
        cp = Checkpoint(
            run_id=replay.run.id,
            seq=seq,
            name="sleep",
            kind="timer",
            wake_at=wake_at,
            enqueued_at=now,
        )
        if wake_at > now:
            replay.turn.put(cp)
    if cp.status != "pending":
        return
    assert cp.wake_at is not None
    if cp.wake_at > now:
        raise Suspend("timer", cp.wake_at)
    replay.turn.put(attrs.evolve(cp, status="completed", finished_at=now))
    await trio.lowlevel.checkpoint()


async def signal(
    replay: Replay,
    name: str,
    timeout: float | None,  # noqa: ASYNC109 (a durable timeout, not a cancel scope)
    type: Any,
) -> Any:
    """`Context.wait_signal`, with its arguments checked."""
    run_id, turn = replay.run.id, replay.turn
    seq = replay.next_seq()
    cp = replay.recorded(seq, name, "signal")
    token = signal_token(run_id, name)
    now = replay.runtime.clock.now()
    if cp is None:
        cp = Checkpoint(
            run_id=run_id,
            seq=seq,
            name=name,
            kind="signal",
            input=json.dumps({"timeout": timeout}),
            wake_at=None if timeout is None else now + timeout,
            enqueued_at=now,
        )
        turn.put(cp)
        # The store either hands over a buffered signal (settling the
        # checkpoint in the same write) or registers the waiter; the
        # engine wakes the run again when it handed one over.
        turn.ops.append(WaitSignal(token, run_id, seq, now))
        raise Suspend("signal", cp.wake_at)
    if cp.status == "completed":
        return _serde.loads(cp.output, type)
    recorded_timeout = json.loads(cp.input or "{}").get("timeout")
    if cp.status == "failed":
        raise SignalTimeout(name, recorded_timeout)
    if cp.wake_at is None or cp.wake_at > now:
        raise Suspend("signal", cp.wake_at)
    # The timeout is due. It settles the checkpoint by a claim, so that a
    # signal delivered at the same moment either wins or loses whole.
    store = replay.engine.store
    settled, _ = await store.apply(
        [
            SettleCheckpoint(
                run_id,
                seq,
                "failed",
                error=ErrorInfo(message=f"signal {name!r} timed out", code=SignalTimeout.code),
                finished_at=now,
            ),
            RemoveSignalWaiter(token),
        ]
    )
    if settled is not None:
        turn.checkpoints[seq] = settled
        raise SignalTimeout(name, recorded_timeout)
    [fresh] = await store.get_checkpoints(run_id, seq, seq)
    turn.checkpoints[seq] = fresh
    return _serde.loads(fresh.output, type)
