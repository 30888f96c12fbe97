"""Dedup keys of remote steps: at most one step per key waits in a
flow-control queue.

``ctx.step(step, ..., queue=q, dedup_key=k)`` claims the key as its step
enters the queue. While the holder waits there (for a slot, or for the
queue's rate limit), another call with the key is refused: its step is
recorded failed with code ``deduplicated`` and the call raises
`RemoteStepError`, as DBOS refuses a duplicate enqueue. Once the holder is
sent (or settled, or gone), the key is free, and the next call takes it.

The claim is a keyed value (scope ``step-dedup:<queue>``, key
``<namespace>:<key>``) naming the holder's run and seq, written by
compare-and-swap in the batch that puts the step in line, so of two calls
racing for a key exactly one gets in. A claim whose step no longer waits is
taken over, so nothing has to release it; it goes with the run of the step
that holds it (`PutValue.run_id`), and retention deletes it with that run.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from ..._base._exceptions import UsageError
from ..._base._index_text import refuse_nul
from ..._stores._ops import QUEUED, PutValue
from ..flow_control._rate_limits import RATE_LIMITED

if TYPE_CHECKING:
    from ..._base._records import Checkpoint
    from ..._stores._base import Store

STEP_DEDUP_SCOPE: Final = "step-dedup:"
DEDUPLICATED: Final = "deduplicated"
"""The error code of a step refused for a dedup key another step holds."""
CLAIM_ATTEMPTS: Final = 1000
"""Compare-and-swap rounds before a call gives up (each lost round means
another call's claim went in)."""


def check_dedup_key(dedup_key: object, queue: str | None) -> None:
    """Refuse a dedup key that is not a non-empty string, or that goes
    without a flow-control queue to dedup in."""
    if dedup_key is None:
        return
    if not isinstance(dedup_key, str) or not dedup_key:
        raise UsageError(f"dedup_key must be a non-empty string, not {dedup_key!r}")
    refuse_nul("dedup_key", dedup_key)
    if queue is None:
        raise UsageError(
            "dedup_key= needs a flow-control queue (queue=, or the step's own queue=):"
            " it dedups steps waiting in one"
        )


def waits_in_line(cp: Checkpoint) -> bool:
    """Whether a remote step waits in its queue, not yet sent: for a slot
    (``queued``) or for the queue's rate limit."""
    return (
        cp.status == "pending"
        and cp.started_at is None
        and cp.mark is not None
        and cp.mark.code in (QUEUED, RATE_LIMITED)
    )


async def claim(
    store: Store, queue: str, namespace: str, dedup_key: str, cp: Checkpoint, now: float
) -> PutValue | tuple[str, int]:
    """The write that claims ``dedup_key`` for the step ``cp`` (to apply in
    the batch that puts it in line), or the run id and seq of the step that
    holds the key and still waits."""
    scope, key = STEP_DEDUP_SCOPE + queue, f"{namespace}:{dedup_key}"
    stored = await store.get_value(scope, key)
    if stored is not None:
        holder = json.loads(stored.value)
        run_id, seq = holder["run_id"], holder["seq"]
        if (run_id, seq) != (cp.run_id, cp.seq):
            found = await store.get_checkpoints(run_id, seq, seq)
            if found and waits_in_line(found[0]):
                return run_id, seq
    return PutValue(
        scope,
        key,
        json.dumps({"run_id": cp.run_id, "seq": cp.seq}),
        now,
        expect_version=0 if stored is None else stored.version,
        run_id=cp.run_id,
    )
