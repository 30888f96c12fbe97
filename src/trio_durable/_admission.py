"""Run admission: a run that waits for a slot of a flow-control queue (a
concurrency key, an entity's exclusivity) or for its rate limit before its
body runs.

Such a run is created with a pending ``admission`` checkpoint at
`ADMISSION_SEQ` in the same batch as its row (`admission_checkpoint`); its
input names the queue, the limit and the rate. While the checkpoint carries
the ``queued`` mark the run waits in the queue's line, ordered by the run's
creation time; a slot taken clears the mark (the store does, in the write
that admits it). The checkpoint stays pending while the run holds its slot,
and the write that ends the run settles it and gives the slot back, letting
the next waiters in (`release_ops`); the engine that wrote it wakes them
(`let_in`).

The turn's first act (`admit`, before any body runs) reads the checkpoint:
a run in line suspends until the release that lets it in wakes it, or, in
case that wake was lost (its write applied though its caller was told it
failed, or the run's lease was held elsewhere then), until its next look
(`next_look`), when it asks again. A run whose checkpoint was
settled at an earlier end and that runs again (it was retried) asks afresh.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from . import _serde
from ._controls import key_of
from ._exceptions import InvalidArgumentsError, LeaseLostError
from ._failures import error_info
from ._rate_limits import RATE_LIMITED, reserve
from ._records import ADMISSION_SEQ, Checkpoint, ErrorInfo
from ._replay import Suspend
from ._stores._ops import (
    AdmitToQueue,
    ClaimCheckpoint,
    Op,
    PutCheckpoint,
    ReleaseQueueSlot,
    SettleCheckpoint,
    UpdateRun,
)

if TYPE_CHECKING:
    from ._definitions import Workflow
    from ._replay import TurnState
    from ._runtime import Runtime
    from ._turn import Turn

logger = logging.getLogger("trio_durable")

ADMISSION: Final = "admission"
QUEUED: Final = "queued"
FIRST_LOOK: Final = 5.0
"""Seconds after its creation that a run which found no slot then looks at
its line again, unless a release lets it in first (an engine's later looks
are `next_look` apart)."""
RECHECK_CAP: Final = 60.0
"""The longest (in seconds) a waiter in a flow-control queue's line goes
between looks, unless ``blocked_recheck`` is longer."""


def next_look(cp: Checkpoint, now: float, every: float) -> float:
    """When a waiter in a flow-control queue's line (a run waiting for
    admission or a step, ``cp`` its checkpoint) looks at the line again
    after a look at ``now``.

    A release wakes whoever it lets in; a look only rescues a waiter whose
    wake was lost, so a waiter looks again after as long as it has waited
    (since ``cp.enqueued_at``): its looks back off, doubling, from
    ``every`` (``blocked_recheck``) to `RECHECK_CAP` (or ``every``, if that
    is longer). A thousand waiters in one line cost a few looks each, not
    one per ``every`` seconds. The interval is derived from the checkpoint
    alone, so it carries over turns and engines."""
    waited = 0.0 if cp.enqueued_at is None else now - cp.enqueued_at
    return now + max(every, min(waited, RECHECK_CAP))


def queue_name(workflow: str, key: str) -> str:
    """The flow-control queue of ``workflow``'s runs with concurrency key ``key``."""
    return f"wf:{workflow}:{key}"


def rate_name(workflow: str) -> str:
    """The rate window that ``workflow``'s rate limit counts starts in."""
    return f"wf:{workflow}"


@final
@attrs.define(frozen=True, kw_only=True)
class StartControls:
    """A start's controls, its keys computed.

    Attributes:
      workflow: The workflow's name.
      queue: The flow-control queue its runs wait in for a slot, or None
        (no concurrency key).
      limit: How many of that queue's runs execute at once.
      rate: ``(starts, per)``: at most so many runs of the workflow
        admitted per ``per`` seconds, or None.
      singleton: The key under which the open run is kept (``singleton=True``),
        or None.
      dedup: The key under which the queued run is kept (``dedup_key``), or
        None.
    """

    workflow: str
    queue: str | None = None
    limit: int = 1
    rate: tuple[int, float] | None = None
    singleton: str | None = None
    dedup: str | None = None

    @property
    def admitted(self) -> bool:
        """Whether the run waits for admission before its body runs."""
        return self.queue is not None or self.rate is not None


def start_controls(wf: Workflow[..., Any], input_json: str) -> StartControls | None:
    """The controls a start of ``wf`` with ``input_json`` (its inputs as
    stored) is under, or None if the workflow has none.

    Raises:
      InvalidArgumentsError: A key function raised or returned no string.
    """
    controls = wf.controls
    if not (controls.admitted or controls.dedup_key is not None):
        return None
    args = tuple(_serde.load_args(input_json, wf.fn, skip=1))
    target = f"workflow {wf.name!r}"
    key = None
    if controls.concurrency_key is not None:
        key = key_of(controls.concurrency_key, args, target)
    dedup = None
    if controls.dedup_key is not None:
        dedup = key_of(controls.dedup_key, args, target)
    rate = controls.rate_limit
    return StartControls(
        workflow=wf.name,
        queue=None if key is None else queue_name(wf.name, key),
        limit=controls.max_concurrent or 1,
        rate=None if rate is None else (rate.starts, rate.per),
        singleton=key if controls.singleton else None,
        dedup=dedup,
    )


@final
@attrs.define(frozen=True, kw_only=True)
class Gate:
    """What a run's admission checkpoint says it waits for.

    Attributes:
      queue: The flow-control queue it takes a slot of, or None.
      limit: How many of that queue's holders may run at once.
      rate: ``(starts, per)`` of its rate limit, or None.
    """

    queue: str | None
    limit: int
    rate: tuple[int, float] | None

    @classmethod
    def of(cls, cp: Checkpoint) -> Gate:
        """The gate recorded in an admission checkpoint's input."""
        data = json.loads(cp.input or "{}")
        rate = data.get("rate")
        return cls(
            queue=data.get("queue"),
            limit=int(data.get("limit") or 1),
            rate=None if rate is None else (int(rate[0]), float(rate[1])),
        )


def admission_checkpoint(
    run_id: str,
    queue: str | None,
    limit: int,
    rate: tuple[int, float] | None,
    now: float,
) -> Checkpoint:
    """The pending admission checkpoint a run is created with, in the same
    batch as its `CreateRun`: the run waits for a slot of ``queue`` (at most
    ``limit`` holders; None: no queue) and for its rate limit ``rate``
    (``(starts, per)``, or None) before its body runs."""
    what = f"a slot of queue {queue!r}" if queue is not None else "its rate limit"
    return Checkpoint(
        run_id=run_id,
        seq=ADMISSION_SEQ,
        name=ADMISSION,
        kind="local",
        status="pending",
        input=json.dumps(
            {"queue": queue, "limit": limit, "rate": None if rate is None else list(rate)},
            separators=(",", ":"),
        ),
        error=ErrorInfo(message=f"waiting for {what}", code=QUEUED),
        enqueued_at=now,
    )


def creation_ops(run_id: str, controls: StartControls, at: float) -> list[Op]:
    """The admission writes of a run created at ``at`` under ``controls``,
    to go in the batch that creates it: its checkpoint, and its place in
    the queue's line (taken now, so that runs created at one instant stand
    in line in the order of their creation)."""
    if not controls.admitted:
        return []
    cp = admission_checkpoint(run_id, controls.queue, controls.limit, controls.rate, at)
    if controls.queue is None:
        return [PutCheckpoint(cp)]
    return [
        PutCheckpoint(attrs.evolve(cp, wake_at=at + FIRST_LOOK)),
        AdmitToQueue(controls.queue, run_id, ADMISSION_SEQ, 0, controls.limit, at),
    ]


def in_line(cp: Checkpoint) -> bool:
    """Whether an admission checkpoint still waits for a queue slot."""
    return cp.status == "pending" and cp.error is not None and cp.error.code == QUEUED


def waits(cp: Checkpoint) -> bool:
    """Whether an admission checkpoint's run has not been admitted yet: it
    waits for a queue slot or for its rate limit."""
    return (
        cp.status == "pending" and cp.error is not None and cp.error.code in (QUEUED, RATE_LIMITED)
    )


async def admit(turn: Turn, now: float) -> bool:
    """The turn's first act: whether the run is admitted and its body may
    run. If not, the run has been suspended (or failed, for a key function
    that failed on the run's inputs) and the turn is over."""
    rt, state = turn.runtime, turn.state
    run = state.run
    cp = state.checkpoints.get(ADMISSION_SEQ)
    fresh = retried = False
    if cp is None:
        try:
            cp = _late_checkpoint(rt, state, now)
        except InvalidArgumentsError as exc:
            await turn.end("failed", error=error_info(exc))
            return False
        if cp is None:
            return True
        fresh = True
    elif cp.status != "pending":
        # Settled when the run ended; it runs again (retried): in line
        # again, behind those waiting now.
        gate = Gate.of(cp)
        cp = admission_checkpoint(run.id, gate.queue, gate.limit, gate.rate, now)
        fresh = retried = True
    gate = Gate.of(cp)
    if gate.queue is not None and (fresh or in_line(cp)):
        if fresh or cp.wake_at is None or cp.wake_at <= now:
            # In line by creation time (start order), a retried run behind
            # those waiting now.
            at = now if retried else run.created_at
            asked = await _ask(turn, cp, gate, now, at, fresh=fresh)
            if asked is None:
                return False
            cp = asked
            fresh = False
        if in_line(cp):
            await turn.suspend(Suspend(ADMISSION, cp.wake_at, admission=ADMISSION_SEQ))
            return False
    if gate.rate is not None:
        return await _rate_gate(turn, cp, gate.rate, now, stored=not fresh)
    return True


async def _rate_gate(
    turn: Turn, cp: Checkpoint, rate: tuple[int, float], now: float, *, stored: bool
) -> bool:
    """Past its queue (if any), a run under a rate limit reserves its time
    once (see `_rate_limits`), recorded on its checkpoint with the turn's
    writes, and waits until then: whether it may run now."""
    state = turn.state
    at = (json.loads(cp.output) if cp.output else {}).get("rate_at")
    if at is None:
        name = rate_name(state.run.workflow)
        at = await reserve(turn.runtime.store, name, rate[0], rate[1], now)
        error = None
        if at > now:
            error = ErrorInfo(message=f"waiting for the rate limit of {name!r}", code=RATE_LIMITED)
        cp = attrs.evolve(
            cp,
            output=json.dumps({"rate_at": at}),
            error=error,
            wake_at=None if error is None else at,
        )
        _record(state, cp, stored=stored)
    elif at <= now and cp.error is not None:
        # Its time came: the mark is cleared with the turn's writes.
        _record(state, attrs.evolve(cp, error=None, wake_at=None), stored=stored)
    if at > now:
        await turn.suspend(Suspend(ADMISSION, at))
        return False
    return True


def _record(state: TurnState, cp: Checkpoint, *, stored: bool) -> None:
    state.checkpoints[ADMISSION_SEQ] = cp
    state.ops.append(ClaimCheckpoint(cp) if stored else PutCheckpoint(cp))


def _late_checkpoint(rt: Runtime, state: TurnState, now: float) -> Checkpoint | None:
    """The admission checkpoint of a run created without one that needs one:
    started by a client by name (no app to compute its key), handed a
    failure as an on-error handler, or retried after it ended in line. A
    run with a body history already (started before its workflow had
    controls) runs on unadmitted."""
    run = state.run
    wf = rt.app.find_workflow(run.workflow, run.version)
    if wf is None or not wf.controls.admitted:
        return None
    if any(seq < ADMISSION_SEQ for seq in state.checkpoints):
        # Reserved seqs (a deadline, a continued generation's backward
        # link) are no body history.
        return None
    controls = start_controls(wf, run.input)
    if controls is None or not controls.admitted:
        return None
    return admission_checkpoint(run.id, controls.queue, controls.limit, controls.rate, now)


async def _ask(
    turn: Turn, cp: Checkpoint, gate: Gate, now: float, at: float, *, fresh: bool
) -> Checkpoint | None:
    """Ask the queue for a slot in one write with the checkpoint's next look,
    fenced by the lease. A waiter asking again keeps its place; a slot
    given to it meanwhile is found (and a concurrent admission is never
    undone by this stale copy: asking again as a holder clears the mark).
    None if the lease was lost."""
    rt, state = turn.runtime, turn.state
    assert gate.queue is not None
    run = state.run
    waiting = attrs.evolve(cp, wake_at=next_look(cp, now, rt.options.blocked_recheck))
    try:
        written, admitted, _ = await rt.store.apply(
            [
                PutCheckpoint(waiting) if fresh else ClaimCheckpoint(waiting),
                AdmitToQueue(gate.queue, run.id, ADMISSION_SEQ, 0, gate.limit, at),
                UpdateRun(run.id, {}, expect_owner=rt.engine_id, now=now),
            ]
        )
    except LeaseLostError:
        logger.warning("run %r was taken over while it asked for admission", run.id)
        return None
    if written is False:
        # Settled meanwhile: read what is there.
        found = await rt.store.get_checkpoints(run.id, ADMISSION_SEQ, ADMISSION_SEQ)
        waiting = found[0] if found else waiting
    elif admitted:
        waiting = attrs.evolve(waiting, error=None, wake_at=None)
    state.checkpoints[ADMISSION_SEQ] = waiting
    return waiting


def release_ops(state: TurnState, now: float) -> list[Op]:
    """The writes that give back a run's admission as it ends (or hands
    off), to go in the same batch: its checkpoint settled, and the slot it
    holds released, which lets the next waiters in. A run that ends in line
    frees nothing (the store gives back only a slot that is held)."""
    cp = state.checkpoints.get(ADMISSION_SEQ)
    if cp is None or cp.status != "pending":
        return []
    gate = Gate.of(cp)
    if waits(cp):
        error = ErrorInfo(message="the run ended before it was admitted", code="not_admitted")
        ops: list[Op] = [SettleCheckpoint(state.run.id, ADMISSION_SEQ, "failed", None, error, now)]
    else:
        ops = [SettleCheckpoint(state.run.id, ADMISSION_SEQ, "completed", None, None, now)]
    if gate.queue is not None:
        # Given even by a run that read itself in line: a release may have
        # let it in since, and the store frees only a slot that is held.
        ops.append(ReleaseQueueSlot(gate.queue, state.run.id, ADMISSION_SEQ, gate.limit))
    return ops


def let_in(rt: Runtime, ops: Sequence[Op], results: Sequence[Any]) -> None:
    """Wake the runs that the releases among ``ops`` let in; ``ops`` are the
    last of a committed write whose results are ``results``."""
    offset = len(results) - len(ops)
    for op, result in zip(ops, results[offset:], strict=True):
        if isinstance(op, ReleaseQueueSlot):
            for run_id, _ in result:
                rt.scheduler.wake(run_id)
