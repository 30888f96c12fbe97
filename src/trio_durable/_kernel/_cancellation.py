"""Cancellation in the body: `Cancelled` raised where a cancelled run
stood, so that the body can clean up before the run ends ``cancelled``.
This module says where it is raised; `_cancel_turn` runs the body.

When a run is cancelling, its turn first replays the body once more (a
workflow whose body runs here and recorded something), with a `CancelDelivery`
on the replay. Recorded operations replay as ever, up to the first one that
has no settled outcome: that one raises `Cancelled` instead of running or
waiting, and so does every operation after it, but for those inside ``with
ctx.shield():``, which run: the body's cleanup. Whatever the body does next
(re-raise, return, fail), the turn then ends the run as a cancel always did
(compensation if asked for, children cancelled, ``cancelled``).

The delivery point is written (a record of kind `CANCELLED_AT`) with the first cleanup
operation, and each cleanup step's outcome is written as soon as it ends,
as the saga's undos are: a turn that dies halfway through the cleanup is
replayed by the next one (here or on another engine), which delivers
`Cancelled` at the same seq, replays the cleanup steps that ran and runs
the rest. A body that does not catch `Cancelled` writes nothing more than
before.

Cleanup may wait (a timer, a signal, a remote step, a child, a fan): the
run is then written ``suspended``, as any waiting run, and its
``cancelled_at`` record tells the turn that wakes it that it is still
cleaning up (`in_cleanup`): that turn makes it ``cancelling`` again and
replays it from here.
"""

from __future__ import annotations

import json
from typing import Final, final

from .._base._exceptions import Cancelled
from .._base._run_records import RunRecord, value_record
from .._stores._ops import UpdateRun
from ._replay import Replay

CANCELLED_AT: Final = "cancelled_at"
"""The kind of a run's record of the seq its body got `Cancelled` at,
written with the first cleanup operation."""
CANCEL_SENT: Final = "cancel_sent"
"""The kind of a remote workflow's run's record of a cancel sent to a
worker: written with the first decision task of its cancellation, it keeps
the run being cancelled while it waits ``suspended`` for the worker (see
`in_cleanup`)."""
TERMINATE: Final = "terminate"
"""The kind of a run's record of a terminate asked for (see `terminate_request`),
its output the reason as JSON: the run, ``cancelling`` meanwhile, ends
``terminated`` at its next turn, which runs nothing of its body."""
_SETTLED: Final = frozenset({"completed", "failed"})


@final
class CancelDelivery:
    """Where a cancelling run's body gets `Cancelled`, and whether it is
    inside ``ctx.shield()``.

    Attributes:
      recorded: The delivery seq an earlier turn wrote, or None.
      delivered: The seq it was delivered at in this turn, or None yet.
      shield: How deep the body is in ``ctx.shield()`` blocks.
    """

    def __init__(self, recorded: int | None) -> None:
        self.recorded = recorded
        self.delivered: int | None = None
        self.shield = 0

    def reach(self, replay: Replay, first: int, count: int) -> None:
        """An operation took the seqs ``first`` to ``first + count - 1``.

        Raises:
          Cancelled: It is where the cancellation is delivered, or after it
            and not shielded.
        """
        if self.delivered is not None:
            if self.shield:
                self._record(replay)
                return
            raise Cancelled(first)
        if self.recorded is not None:
            if first + count - 1 < self.recorded:
                return
        else:
            checkpoints = replay.turn.checkpoints
            if all(
                (cp := checkpoints.get(seq)) is not None and cp.status in _SETTLED
                for seq in range(first, first + count)
            ):
                return
        self.delivered = first if self.recorded is None else self.recorded
        raise Cancelled(self.delivered)

    def _record(self, replay: Replay) -> None:
        turn = replay.turn
        if CANCELLED_AT in turn.records:
            return
        now = replay.runtime.clock.now()
        turn.put_record(value_record(turn.run.id, CANCELLED_AT, json.dumps(self.delivered), now))


def terminate_reason(records: dict[str, RunRecord]) -> str | None:
    """The reason a terminate was asked for with, or None if none was."""
    record = records.get(TERMINATE)
    if record is None:
        return None
    reason = None if record.output is None else json.loads(record.output)
    return reason if isinstance(reason, str) and reason else "terminated"


def terminate_record(run_id: str, reason: str | None, now: float) -> RunRecord:
    """The record that asks a run to end ``terminated`` (see `TERMINATE`)."""
    return value_record(run_id, TERMINATE, json.dumps(reason), now)


def in_cleanup(records: dict[str, RunRecord]) -> bool:
    """Whether a run that is not terminal is being cancelled while
    ``suspended`` (then ``running``): its cleanup waits, or its remote
    workflow's cancel is out to a worker (with the record but no delivery
    see `cancel_marker`)."""
    return CANCELLED_AT in records or CANCEL_SENT in records


def recorded_delivery(records: dict[str, RunRecord]) -> int | None:
    """The seq a run's body got `Cancelled` at, as recorded; None if it did
    not yet."""
    marker = records.get(CANCELLED_AT)
    return None if marker is None or marker.output is None else int(json.loads(marker.output))


def cancel_marker(run_id: str, now: float) -> RunRecord:
    """The ``cancel_sent`` record of a remote workflow's run whose cancel
    is sent to a worker: it keeps the run being cancelled while it waits
    as ``suspended``."""
    return value_record(run_id, CANCEL_SENT, None, now)


async def write_cleanup(replay: Replay) -> None:
    """Write what the cleanup recorded so far (a cleanup step's outcome),
    fenced by the lease, as the saga writes each undo."""
    delivery, turn = replay.cancellation, replay.turn
    if delivery is None or delivery.delivered is None or not turn.ops or turn.dispatch:
        return
    rt = replay.runtime
    fence = UpdateRun(turn.run.id, {}, expect_owner=rt.engine_id)
    await rt.store.apply([*turn.ops, fence])
    turn.ops.clear()
