"""Settling results of remote steps, in batches, behind a join barrier.

The engine's result consumer takes up to `RESULT_BATCH` results at a time
and settles them all in ONE store write of claims: a result changes its
checkpoint only while that is pending and waits for the execution the
result answers (see `_executions`), so duplicates, late deliveries, results
replayed from an earlier execution and results for cancelled, terminated or
completed runs change nothing. A failure that may be retried becomes a rescheduled
attempt instead (its backoff is the checkpoint's due time; the run's next
turn sends it). Only then are the results acked, each after its own write
committed; a result that no checkpoint waits for (stale: a duplicate or a
replay) is rejected for good instead (dead-lettered where the broker keeps
dead letters) and counted.

Waking is batched too: a run is woken at most once per batch, and a fan's
parent only once no member of the fan is pending (or at once on a failure in
a ``fail_fast`` fan): the parent replays once per wave, not once per result.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import trio

from .._base._exceptions import StoreError
from .._base._failures import FAN_CANCELLED, LOST
from .._base._observe import Event, EventKind
from .._base._records import Checkpoint, RunStatus
from .._base._run_records import RunRecord
from .._brokers._base import BrokerError, Consumer, Delivery
from .._stores._ops import Op, ReleaseQueueSlot, RescheduleCheckpoint, SettleCheckpoint
from .._wire._layers import UNREADABLE
from .._wire._messages import Result, result_error
from ._barrier import join_barrier
from ._decision_record import decision_of, settle_decision
from ._dispatch import read_seqs
from ._executions import awaited, result_conditions
from ._learned import queue_of, step_of
from ._sent import sent_key

if TYPE_CHECKING:
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

RESULT_BATCH: Final = 256
_DROP_FOR: Final[frozenset[RunStatus]] = frozenset({"cancelled", "terminated", "completed"})
# A late success replaces a step's `LOST` failure only once the run ended
# failed (or dead): while it goes on (or is cancelled), its body has acted
# on the loss, and a replay must see what that turn saw.
_UNLESS_ENDED_FAILED: Final[frozenset[RunStatus]] = frozenset(
    {"pending", "running", "suspended", "cancelling", "cancelled", "terminated", "completed"}
)


async def consume_results(rt: Runtime, task_status: trio.TaskStatus[None]) -> None:
    """Settle results from the broker until cancelled."""
    delay = 0.05
    started = False
    while True:
        try:
            async with rt.broker.open_consumer(
                rt.results_queue, prefetch=2 * RESULT_BATCH
            ) as consumer:
                if not started:
                    task_status.started()
                    started = True
                delay = 0.05
                await _settle_forever(rt, consumer)
        except BrokerError as exc:
            # Unacked results come back to whichever engine consumes next.
            logger.warning("the result consumer lost the broker (%s); reconnecting", exc)
            if not started:
                raise
            await trio.sleep(delay * rt.rng.uniform(0.5, 1.5))
            delay = min(delay * 2, 5.0)


async def _settle_forever(rt: Runtime, consumer: Consumer) -> None:
    outage = 0
    while True:
        deliveries = await consumer.receive(RESULT_BATCH)
        with rt.scheduler.settling():
            returned = await settle_batch(rt, consumer, deliveries)
        if returned and returned == len(deliveries):
            # The store refused every write (the database is away): the
            # results went back to the broker. Wait before taking them again
            # rather than spin on them; the wait grows while it lasts.
            outage += 1
            await trio.sleep(min(0.05 * 2 ** min(outage, 10), 5.0) * rt.rng.uniform(0.5, 1.0))
        else:
            outage = 0


def _success(
    result: Result,
    now: float,
    or_failed_with: str | None = None,
    unless_run_status: frozenset[RunStatus] = _DROP_FOR,
) -> SettleCheckpoint:
    """The claim that settles a step with its successful ``result``."""
    return SettleCheckpoint(
        result.run_id,
        result.seq,
        "completed",
        result.output,
        None,
        now,
        unless_run_status=unless_run_status,
        kind="remote",
        name=result.step,
        or_failed_with=or_failed_with,
        **result_conditions(result),
    )


def _op_for(rt: Runtime, result: Result) -> Op:
    now = rt.clock.now()
    if result.kind == "decision":
        # Applied by the run's next turn; the claim needs the decision
        # record pending at this very attempt and execution, so a
        # duplicate or a decision of a superseded task changes nothing.
        return settle_decision(
            result,
            result.status,
            result.output if result.status == "completed" else None,
            None
            if result.status == "completed"
            else result_error(result, rt.options.traceback_limit),
            now,
            _DROP_FOR,
        )
    if result.status == "completed":
        return _success(result, now)
    error = result_error(result, rt.options.traceback_limit)
    step = step_of(rt.app, rt.learned, result.step)
    if step is None:
        # A step of a remote workflow this engine has not met yet: the
        # worker's own retry policy says when (and whether) to try again.
        due = result.retry_in if result.retryable else None
    elif result.retryable and result.attempt < step.retry.attempts:
        due = step.retry.delay(result.attempt, rt.rng)
    else:
        due = None
    if due is not None:
        return RescheduleCheckpoint(
            result.run_id,
            result.seq,
            result.attempt,
            error,
            now + due,
            unless_run_status=_DROP_FOR,
            kind="remote",
            name=result.step,
            execution=result.execution,
            unless_rerun=result.execution is None,
        )
    # The last attempt failed: its error joins those of the attempts before
    # it (a reschedule added each of theirs), as a local step records them.
    return SettleCheckpoint(
        result.run_id,
        result.seq,
        "failed",
        None,
        error,
        now,
        unless_run_status=_DROP_FOR,
        kind="remote",
        name=result.step,
        append_error=True,
        **result_conditions(result),
    )


async def _hand_over_answers(
    rt: Runtime, consumer: Consumer, readable: list[tuple[Delivery, Result]]
) -> list[tuple[Delivery, Result]]:
    """Hand the answers to queries (see `_remote_queries`) to their callers
    and ack them: they settle nothing. The other results, to settle."""
    answers = [delivery for delivery, result in readable if result.kind == "query"]
    for _, result in readable:
        if result.kind == "query" and not rt.features.takes_result(result):
            logger.info("an answer to query %s came after its caller gave up", result.execution)
    try:
        await consumer.ack(answers)
    except (BrokerError, trio.ClosedResourceError) as exc:
        logger.warning("could not ack answers to queries: %s", exc)
    return [(d, r) for d, r in readable if r.kind != "query"]


async def settle_batch(rt: Runtime, consumer: Consumer, deliveries: Sequence[Delivery]) -> int:
    """Settle one batch of result deliveries, ack them, wake their runs.

    Returns:
      How many results the store refused to settle; they were given back
      to the broker for redelivery.
    """
    readable: list[tuple[Delivery, Result]] = []
    unreadable: list[Delivery] = []
    for delivery in deliveries:
        try:
            # Its seal is checked before decoding: a forged result settles
            # nothing.
            readable.append((delivery, rt.layers.open_result(delivery.body)))
        except UNREADABLE as exc:
            logger.error(
                "rejected a message of %d bytes on %s that is no valid result: %s",
                len(delivery.body),
                rt.results_queue,
                exc,
            )
            rt.layers.count_unreadable(rt.telemetry.stats, rt.telemetry.metrics, exc)
            unreadable.append(delivery)
    if unreadable:
        # Never requeued (it would come back forever): dropped, or
        # dead-lettered where the broker keeps a dead-letter queue.
        try:
            await consumer.reject(unreadable, requeue=False)
        except (BrokerError, trio.ClosedResourceError) as exc:
            logger.warning("could not reject results: %s", exc)
    if not readable:
        return 0
    results = await rt.layers.incoming([result for _, result in readable])
    readable = [(delivery, result) for (delivery, _), result in zip(readable, results, strict=True)]
    if any(r.kind == "query" for _, r in readable):
        readable = await _hand_over_answers(rt, consumer, readable)
        if not readable:
            return 0
    ops = [_op_for(rt, result) for _, result in readable]
    # Queue slots are given back in the same write that settles their steps
    # (and only if it did, or the run ended: the store checks).
    releases = _releases(rt, readable, ops)
    failed: list[Delivery] = []
    outcomes: list[Any]
    admitted: list[tuple[str, int]] = []
    uncertain = False
    try:
        outcomes = await rt.store.apply([*ops, *releases])
        for let_in in outcomes[len(ops) :]:
            admitted.extend(let_in)
        outcomes = outcomes[: len(ops)]
    except StoreError as exc:
        # Settle one by one, so one bad write sends back only its own result.
        # The batch may have been applied all the same (its answer lost), so
        # its claims now find nothing pending: wake every run it touched.
        logger.warning("batch settle failed (%s); settling one by one", exc)
        uncertain = True
        outcomes = []
        for (delivery, result), op in zip(readable, ops, strict=True):
            own = _releases(rt, [(delivery, result)], [op])
            try:
                outcome, *let_in = await rt.store.apply([op, *own])
            except StoreError:
                failed.append(delivery)
                outcome, let_in = None, []
            outcomes.append(outcome)
            for entry in let_in:
                admitted.extend(entry)
    # Events first, in the order of the writes they report (the acks below
    # give other tasks a turn, which may act on these writes at once).
    for (_, result), outcome in zip(readable, outcomes, strict=True):
        if isinstance(outcome, Checkpoint):
            _emit_result(rt, result, outcome)
    kept: set[int] = set()
    for delivery, result, outcome in await _salvage(rt, readable, outcomes, failed):
        kept.add(id(delivery))
        _emit_result(rt, result, outcome)
    if failed:
        try:
            await consumer.reject(failed, requeue=True)
        except BrokerError as exc:
            logger.warning("could not return results for redelivery: %s", exc)
    failed_ids = {id(d) for d in failed}
    stale_ids: set[int] = set()
    foreign_ids: set[int] = set()
    if not uncertain:
        # (After a batch whose answer was lost, a result may have settled
        # its step unseen: none is called stale then.)
        unchanged = [
            (delivery, result)
            for (delivery, result), outcome in zip(readable, outcomes, strict=True)
            if outcome is None and id(delivery) not in kept and id(delivery) not in failed_ids
        ]
        stale_ids, foreign_ids = await _reject_stale(rt, consumer, unchanged)
    await _ack(consumer, [d for d, _ in readable if id(d) not in failed_ids | stale_ids])

    # Duplicates, late or stale results and results for ended runs changed
    # nothing and wake nobody; a fan count the barrier cannot make wakes
    # the run all the same.
    changed = [outcome for outcome in outcomes if isinstance(outcome, Checkpoint)]
    # Members that ended start their successors in fans with a window.
    await rt.features.settled(rt, changed)
    wakes = dict.fromkeys(await join_barrier(rt.store, changed, wake_if_uncounted=True))
    for outcome in outcomes:
        if isinstance(outcome, RunRecord):
            wakes[outcome.run_id] = None  # a decision, to apply
    for run_id, _ in admitted:
        wakes[run_id] = None
    if uncertain:
        for _, result in readable:
            wakes[result.run_id] = None
    for run_id in wakes:
        rt.scheduler.wake(run_id)
    # Settled, rescheduled or dropped: nothing waits for these attempts any
    # more (the results given back come again, and count then). A result
    # of another execution than the step's says nothing of the attempt out
    # now, which may have its number (a step run again after a retry counts
    # from 1 again).
    for delivery, result in readable:
        if id(delivery) not in failed_ids | foreign_ids:
            rt.sent.result_handled(result.run_id, sent_key(result), result.attempt)
            rt.layers.settled(result)
    return len(failed)


async def _salvage(
    rt: Runtime,
    readable: Sequence[tuple[Delivery, Result]],
    outcomes: Sequence[Any],
    failed: list[Delivery],
) -> list[tuple[Delivery, Result, Checkpoint]]:
    """Keep the late successes of steps settled as failed before their
    result came: members that a fail_fast fan cancelled, and steps lost.

    Freezing a fail_fast fan settles its members still out as failed (code
    ``fan_cancelled``), so their results find nothing pending. A success
    among them is kept on its checkpoint all the same: the fan's outcome was
    decided and stays as it is (it lists real failures only), but
    `Engine.retry` of the failed run then does not run that step again.

    A step that got no result after its last redispatch fails with code
    ``lost``. A success that comes after is kept as a late success for a
    failed run is (a pending step's): once the run has ended ``failed``
    (or ``dead``), so that `Engine.retry` does not run the step again.
    While the run goes on, its body has seen the loss (and maybe went on
    past it): the success changes nothing, so that replays see what that
    turn saw.

    The run needs no wake for either. Only successes that settled nothing
    (mostly duplicates) are asked about, in one write; a write that fails
    sends them back for redelivery.

    Returns:
      The results kept, with their deliveries and the checkpoints they
      settled.
    """
    given_back = {id(d) for d in failed}
    late = [
        (delivery, result)
        for (delivery, result), outcome in zip(readable, outcomes, strict=True)
        if outcome is None
        and result.status == "completed"
        and result.kind == "step"
        and id(delivery) not in given_back
    ]
    if not late:
        return []
    now = rt.clock.now()
    # Two claims a result: of a checkpoint that is failed with one code or
    # the other, at most one applies.
    ops: list[Op] = []
    for _, result in late:
        ops.append(_success(result, now, FAN_CANCELLED))
        ops.append(_success(result, now, LOST, _UNLESS_ENDED_FAILED))
    try:
        settled = await rt.store.apply(ops)
    except StoreError as exc:
        logger.warning("could not keep late successes: %s", exc)
        failed.extend(delivery for delivery, _ in late)
        return []
    kept: list[tuple[Delivery, Result, Checkpoint]] = []
    for i, (delivery, result) in enumerate(late):
        for cp in settled[2 * i : 2 * i + 2]:
            if isinstance(cp, Checkpoint):
                kept.append((delivery, result, cp))
    return kept


async def _reject_stale(
    rt: Runtime, consumer: Consumer, unchanged: Sequence[tuple[Delivery, Result]]
) -> tuple[set[int], set[int]]:
    """Reject for good, and count, the results among ``unchanged`` (those
    that settled nothing) that no checkpoint waits for: its checkpoint is
    gone, settled, or does not hold the result's execution (see
    `_executions.awaited`). The others changed nothing because their run
    ended, and are acked as usual.

    Returns:
      The ``id()`` of each delivery rejected, and of those among them that
      answer no execution of their checkpoint (it is gone, or does not
      hold their execution id, or they carry none).
    """
    if not unchanged:
        return set(), set()
    wanted: dict[str, set[int]] = {}
    deciding: dict[str, int] = {}
    for _, result in unchanged:
        if result.kind == "decision":
            deciding[result.run_id] = result.seq
        else:
            wanted.setdefault(result.run_id, set()).add(result.seq)
    found: dict[tuple[str, int], Checkpoint | RunRecord] = {}
    try:
        for run_id, seqs in wanted.items():
            for read in await read_seqs(rt.store, run_id, sorted(seqs)):
                found[(read.run_id, read.seq)] = read
        for run_id, seq in deciding.items():
            record = decision_of({r.kind: r for r in await rt.store.get_records(run_id)})
            if record is not None:
                found[(run_id, seq)] = record
    except StoreError as exc:
        # Unknown: acked as before there were stale results, since they
        # changed nothing either way.
        logger.warning("could not tell stale results apart: %s", exc)
        return set(), set()
    stale: list[tuple[Delivery, Result, Checkpoint | RunRecord | None]] = []
    for delivery, result in unchanged:
        cp = found.get((result.run_id, result.seq))
        if cp is None or not awaited(cp, result):
            stale.append((delivery, result, cp))
    if not stale:
        return set(), set()
    rejected = {id(delivery) for delivery, _, _ in stale}
    foreign = {
        id(delivery)
        for delivery, result, cp in stale
        if cp is None or result.execution is None or result.execution not in cp.executions
    }
    try:
        await consumer.reject([delivery for delivery, _, _ in stale], requeue=False)
    except (BrokerError, trio.ClosedResourceError) as exc:
        # They come back, are found stale again, and count then.
        logger.warning("could not reject stale results: %s", exc)
        return rejected, foreign
    for _, result, cp in stale:
        logger.warning(
            "rejected a stale result for run %r, seq %d, attempt %d (execution %s): its step %s",
            result.run_id,
            result.seq,
            result.attempt,
            result.execution or "not given",
            "is gone" if cp is None else f"is {cp.status} and does not wait for it",
        )
        rt.telemetry.stats.rejected_stale += 1
        rt.telemetry.metrics.count_stale("result")
    return rejected, foreign


def _releases(
    rt: Runtime, readable: Sequence[tuple[Delivery, Result]], ops: Sequence[Op]
) -> list[Op]:
    releases: list[Op] = []
    for (_, result), op in zip(readable, ops, strict=True):
        if result.queue is None or isinstance(op, RescheduleCheckpoint):
            continue  # a retry keeps its slot through its backoff
        flow = queue_of(rt.app, rt.learned, result.queue)
        if flow is None:
            logger.error("result names the unknown queue %r; its slot stays held", result.queue)
            continue
        releases.append(ReleaseQueueSlot(flow.name, result.run_id, result.seq, flow.concurrency))
    return releases


async def _ack(consumer: Consumer, deliveries: Sequence[Delivery]) -> None:
    if not deliveries:
        return
    try:
        await consumer.ack(deliveries)
    except (BrokerError, trio.ClosedResourceError) as exc:
        # They come back; settling them again changes nothing.
        logger.warning("could not ack results: %s", exc)


def _emit_result(rt: Runtime, result: Result, cp: Checkpoint) -> None:
    if result.kind == "decision":
        # A decision is no step: what it records shows when it is applied.
        return
    kind: EventKind = "step.completed" if cp.status == "completed" else "step.failed"
    data: dict[str, Any] = {
        "attempt": result.attempt,
        "duration": max(0.0, result.finished_at - result.started_at),
        "worker": result.worker,
    }
    if result.status == "failed":
        data.update(error=result.error, code=result.code, final=cp.status == "failed")
    rt.telemetry.emit(
        Event(
            kind=kind,
            run_id=result.run_id,
            workflow=result.workflow,
            at=rt.clock.now(),
            seq=result.seq,
            name=result.step,
            data=data,
        )
    )
