"""Run admission: a run that waits for a slot of a flow-control queue (a
concurrency key, an entity's exclusivity) or for its rate limit before its
body runs.

Such a run is created with a pending ``admission`` record (`ADMISSION`,
see `_run_records`) in the same batch as its row (`admission_record`): its
input names the queue, the limit and the rate; its output, once its rate
limit reserved it a time, that time (`rate_at`). The run itself holds or
waits for its slot (under the seq `WHOLE_RUN`), in line by its creation
time; while it holds one, the store keeps a `QUEUE_SLOT` record for it,
read with the run's other records. The admission record stays pending
while the run holds its slot, and the write that ends the run settles it
and gives the slot back, letting the next waiters in (`release_ops`); the
engine that wrote it wakes them (`let_in`).

The turn's first act (`admit`, before any body runs) reads the records: a
run in line suspends until the release that lets it in wakes it, or, in
case that wake was lost (another engine's release while this run's lease
was held here), until its next look (`next_look`), when it asks again; the
records are read once more as the suspend commits (`_let_in_meanwhile`).
A run whose record was settled at an earlier end and that runs again (it
was retried) asks afresh.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._base import _serde
from ..._base._controls import key_of
from ..._base._exceptions import InvalidArgumentsError, LeaseLostError
from ..._base._failures import error_info
from ..._base._records import ErrorInfo
from ..._base._run_records import RunRecord
from ..._kernel._hooks import Feature
from ..._kernel._markers import BODY_SEQ_LIMIT
from ..._kernel._replay import Suspend
from ..._stores._ops import (
    QUEUE_SLOT,
    WHOLE_RUN,
    AdmitToQueue,
    Op,
    ReleaseQueueSlot,
    UpdateRun,
    queue_slot_record,
)
from ..._stores._record_ops import ClaimRecord, PutRecord, SettleRecord
from ._rate_limits import reserve

if TYPE_CHECKING:
    from ..._base._records import RunStatus
    from ..._kernel._definitions import Workflow
    from ..._kernel._replay import TurnDraft
    from ..._kernel._runtime import Runtime
    from ..._kernel._turn import Turn
    from ..._stores._base import Store

logger = logging.getLogger("trio_durable")

ADMISSION: Final = "admission"
"""The kind of a run's admission record, and the reason of its suspends."""
FIRST_LOOK: Final = 5.0
"""Seconds after its creation that a run which found no slot then looks at
its line again, unless a release lets it in first (an engine's later looks
are `next_look` apart)."""
RECHECK_CAP: Final = 60.0
"""The longest (in seconds) a waiter in a flow-control queue's line goes
between looks, unless ``blocked_recheck`` is longer."""


def next_look(enqueued_at: float | None, now: float, every: float) -> float:
    """When a waiter in a flow-control queue's line (a run waiting for
    admission or a step, in line since ``enqueued_at``) looks at the line
    again after a look at ``now``.

    A release wakes whoever it lets in; a look only rescues a waiter whose
    wake was lost, so a waiter looks again after as long as it has waited:
    its looks back off, doubling, from ``every`` (``blocked_recheck``) to
    `RECHECK_CAP` (or ``every``, if that is longer). A thousand waiters in
    one line cost a few looks each, not one per ``every`` seconds. The
    interval is derived from the stored wait alone, so it carries over
    turns and engines."""
    waited = 0.0 if enqueued_at is None else now - enqueued_at
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
    """What a run's admission record says it waits for (its input).

    Attributes:
      queue: The flow-control queue it takes a slot of, or None.
      limit: How many of that queue's holders may run at once.
      rate: ``(starts, per)`` of its rate limit, or None.
    """

    queue: str | None
    limit: int
    rate: tuple[int, float] | None

    @classmethod
    def of(cls, record: RunRecord) -> Gate:
        """The gate recorded in an admission record's input."""
        data = json.loads(record.input or "{}")
        rate = data.get("rate")
        return cls(
            queue=data.get("queue"),
            limit=int(data.get("limit") or 1),
            rate=None if rate is None else (int(rate[0]), float(rate[1])),
        )

    def dump(self) -> str:
        rate = None if self.rate is None else list(self.rate)
        return json.dumps(
            {"queue": self.queue, "limit": self.limit, "rate": rate}, separators=(",", ":")
        )


def rate_at(record: RunRecord) -> float | None:
    """The time an admission record's rate limit reserved for its run (it
    runs from then), or None: none reserved yet, or no rate limit."""
    at = json.loads(record.output).get("rate_at") if record.output else None
    return None if at is None else float(at)


def admission_record(
    run_id: str,
    queue: str | None,
    limit: int,
    rate: tuple[int, float] | None,
    now: float,
) -> RunRecord:
    """The pending admission record a run is created with, in the same
    batch as its `CreateRun`: the run waits for a slot of ``queue`` (at most
    ``limit`` holders; None: no queue) and for its rate limit ``rate``
    (``(starts, per)``, or None) before its body runs."""
    return RunRecord(
        run_id=run_id,
        kind=ADMISSION,
        status="pending",
        input=Gate(queue=queue, limit=limit, rate=rate).dump(),
        enqueued_at=now,
    )


def creation_ops(run_id: str, controls: StartControls, at: float) -> list[Op]:
    """The admission writes of a run created at ``at`` under ``controls``,
    to go in the batch that creates it: its record, and its place in the
    queue's line (taken now, so that runs created at one instant stand in
    line in the order of their creation)."""
    if not controls.admitted:
        return []
    record = admission_record(run_id, controls.queue, controls.limit, controls.rate, at)
    if controls.queue is None:
        return [PutRecord(record)]
    return [
        PutRecord(attrs.evolve(record, wake_at=at + FIRST_LOOK)),
        AdmitToQueue(controls.queue, run_id, WHOLE_RUN, 0, controls.limit, at),
    ]


def waits(record: RunRecord, held: bool, now: float) -> bool:
    """Whether an admission record's run has not been admitted at ``now``:
    it waits for a queue slot (``held``: whether it holds one) or for the
    time its rate limit gives it."""
    if record.status != "pending":
        return False
    gate = Gate.of(record)
    if gate.queue is not None and not held:
        return True
    if gate.rate is None:
        return False
    at = rate_at(record)
    return at is None or at > now


async def admit(turn: Turn, now: float) -> bool:
    """The turn's first act: whether the run is admitted and its body may
    run. If not, the run has been suspended (or failed, for a key function
    that failed on the run's inputs) and the turn is over."""
    rt, state = turn.runtime, turn.state
    run = state.run
    record = state.records.get(ADMISSION)
    fresh = retried = False
    if record is None:
        try:
            record = _late_record(rt, state, now)
        except InvalidArgumentsError as exc:
            await turn.end("failed", error=error_info(exc))
            return False
        if record is None:
            return True
        fresh = True
    elif record.status != "pending":
        # Settled when the run ended; it runs again (retried): in line
        # again, behind those waiting now.
        gate = Gate.of(record)
        record = admission_record(run.id, gate.queue, gate.limit, gate.rate, now)
        fresh = retried = True
    gate = Gate.of(record)
    if gate.queue is not None and QUEUE_SLOT not in state.records:
        if fresh or record.wake_at is None or record.wake_at <= now:
            # In line by creation time (start order), a retried run behind
            # those waiting now.
            at = now if retried else run.created_at
            asked = await _ask(turn, record, gate, now, at, fresh=fresh)
            if asked is None:
                return False
            record = asked
            fresh = False
        if QUEUE_SLOT not in state.records:
            recheck = partial(_let_in_meanwhile, run.id)
            await turn.suspend(Suspend(ADMISSION, record.wake_at, recheck=recheck))
            return False
    if gate.rate is not None:
        return await _rate_gate(turn, record, gate.rate, now, stored=not fresh)
    return True


async def _rate_gate(
    turn: Turn, record: RunRecord, rate: tuple[int, float], now: float, *, stored: bool
) -> bool:
    """Past its queue (if any), a run under a rate limit reserves its time
    once (see `_rate_limits`), recorded on its record with the turn's
    writes, and waits until then: whether it may run now."""
    state = turn.state
    at = rate_at(record)
    if at is None:
        name = rate_name(state.run.workflow)
        at = await reserve(turn.runtime.store, name, rate[0], rate[1], now)
        record = attrs.evolve(
            record, output=json.dumps({"rate_at": at}), wake_at=at if at > now else None
        )
        _record(state, record, stored=stored)
    if at > now:
        await turn.suspend(Suspend(ADMISSION, at))
        return False
    return True


def _record(state: TurnDraft, record: RunRecord, *, stored: bool) -> None:
    state.records[ADMISSION] = record
    state.ops.append(ClaimRecord(record) if stored else PutRecord(record))


def _late_record(rt: Runtime, state: TurnDraft, now: float) -> RunRecord | None:
    """The admission record of a run created without one that needs one:
    started by a client by name (no app to compute its key), handed a
    failure as an on-error handler, or retried after it ended in line. A
    run with a body history already (started before its workflow had
    controls) runs on unadmitted."""
    run = state.run
    wf = rt.app.find_workflow(run.workflow, run.version)
    if wf is None or not wf.controls.admitted:
        return None
    if any(seq < BODY_SEQ_LIMIT for seq in state.checkpoints):
        return None
    controls = start_controls(wf, run.input)
    if controls is None or not controls.admitted:
        return None
    return admission_record(run.id, controls.queue, controls.limit, controls.rate, now)


async def _ask(
    turn: Turn, record: RunRecord, gate: Gate, now: float, at: float, *, fresh: bool
) -> RunRecord | None:
    """Ask the queue for a slot in one write with the record's next look,
    fenced by the lease. A waiter asking again keeps its place; a slot
    given to it meanwhile is found (the store's `QUEUE_SLOT` record would
    have been read with the turn's records). None if the lease was lost."""
    rt, state = turn.runtime, turn.state
    assert gate.queue is not None
    run = state.run
    waiting = attrs.evolve(
        record, wake_at=next_look(record.enqueued_at, now, rt.options.blocked_recheck)
    )
    try:
        written, admitted, _ = await rt.store.apply(
            [
                PutRecord(waiting) if fresh else ClaimRecord(waiting),
                AdmitToQueue(gate.queue, run.id, WHOLE_RUN, 0, gate.limit, at),
                UpdateRun(run.id, {}, expect_owner=rt.engine_id, now=now),
            ]
        )
    except LeaseLostError:
        logger.warning("run %r was taken over while it asked for admission", run.id)
        return None
    if written is False:
        # Settled meanwhile: read what is there.
        found = {r.kind: r for r in await rt.store.get_records(run.id)}
        waiting = found.get(ADMISSION, waiting)
    if admitted:
        # As the store wrote it in the same write.
        state.records[QUEUE_SLOT] = queue_slot_record(run.id, gate.queue)
    state.records[ADMISSION] = waiting
    return waiting


async def _let_in_meanwhile(run_id: str, store: Store) -> bool:
    """Whether a run that suspended in line holds a slot now, or its
    admission was settled: a release on another engine while this one held
    the run's lease let it in but could not wake it."""
    records = {record.kind: record for record in await store.get_records(run_id)}
    admission = records.get(ADMISSION)
    return QUEUE_SLOT in records or admission is None or admission.status != "pending"


def release_ops(state: TurnDraft, now: float) -> list[Op]:
    """The writes that give back a run's admission as it ends (or hands
    off), to go in the same batch: its record settled, and the slot it
    holds released, which lets the next waiters in. A run that ends in line
    frees nothing (the store gives back only a slot that is held)."""
    record = state.records.get(ADMISSION)
    if record is None or record.status != "pending":
        return []
    gate = Gate.of(record)
    run_id = state.run.id
    if waits(record, QUEUE_SLOT in state.records, now):
        error = ErrorInfo(message="the run ended before it was admitted", code="not_admitted")
        ops: list[Op] = [SettleRecord(run_id, ADMISSION, "failed", None, error, now)]
    else:
        ops = [SettleRecord(run_id, ADMISSION, "completed", None, None, now)]
    if gate.queue is not None:
        # Given even by a run that read itself in line: a release may have
        # let it in since, and the store frees only a slot that is held.
        ops.append(ReleaseQueueSlot(gate.queue, run_id, WHOLE_RUN, gate.limit))
    return ops


def let_in(rt: Runtime, ops: Sequence[Op], results: Sequence[Any]) -> None:
    """Wake the runs that the releases among ``ops`` let in; ``ops`` are the
    last of a committed write whose results are ``results``."""
    offset = len(results) - len(ops)
    for op, result in zip(ops, results[offset:], strict=True):
        if isinstance(op, ReleaseQueueSlot):
            for run_id, _ in result:
                rt.scheduler.wake(run_id)


@final
class Admission(Feature):
    """Run admission: a run waits for a slot of its flow-control queue (or
    its rate) before its body runs, and gives the slot back as it ends."""

    async def take_turn(self, turn: Turn, now: float) -> bool:
        return not await admit(turn, now)

    def end_ops(
        self,
        turn: Turn,
        status: RunStatus,
        output: str | None,
        error: ErrorInfo | None,
        returned_by: tuple[str, str] | None,
    ) -> Sequence[Op]:
        return release_ops(turn.state, turn.runtime.clock.now())

    async def ended(self, turn: Turn, ops: Sequence[Op], results: Sequence[Any]) -> None:
        let_in(turn.runtime, ops, results)
