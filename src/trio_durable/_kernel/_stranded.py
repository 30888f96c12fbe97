"""Runs whose remote steps nothing would move on: looked for once, when an
engine opens, and the attempts an engine leaves out as it closes.

A run suspended on a remote step (or on a remote workflow's decision task)
waits for its result, and has no due time unless ``remote_redispatch``
gave it one. Two kinds of such runs need a turn that nothing else would
give them:

- those with an attempt out on a broker that keeps nothing across its own
  process (`Broker.durable` is False) and is not this engine's own: the
  engine that sent it was killed, or closed with its memory broker, and
  the task went with it. Their turn sends the attempt again at once, as a
  new attempt (see `_remote.out_verdict`);
- with ``remote_redispatch`` on this engine, those with an attempt out
  whose lost deadline is not the one this engine's setting gives (sent
  while it was off, or set otherwise): their turn sets it, or sends the
  attempt again if it has passed.

An engine whose broker is not durable, or that has ``remote_redispatch``,
reads the suspended and cancelling runs once as it opens, a page at a time
(`PAGE` runs, and a page of each one's pending checkpoints, and its
decision record), and wakes these; engines with a durable broker and no
``remote_redispatch`` skip it. `Engine.drain` waits for the pass.

An engine that closes cleanly as the last of its process on a broker that
keeps nothing (the memory broker), once some attempt went out on it,
leaves nothing for others to wait on (`leave_nothing_stranded`): an engine
of another process, which sees this process alive, would otherwise take
those attempts for held. It reads the runs that may have one out (running,
suspended or cancelling) the same way, marks each attempt still out on
this broker as out on a broker that closed (a claim at its attempt, so a
result that settled it meanwhile wins), and announces the run: an engine
open now takes it at once, one that opens later finds it in its pass over
stranded steps, and either sends the attempt again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import attrs
import trio

from .._base._exceptions import StoreError
from .._base._records import Checkpoint, CheckpointStatus, Run, RunFilter
from .._base._run_records import RunRecord
from .._stores._ops import ClaimCheckpoint, Op
from .._stores._record_ops import ClaimRecord
from .._wire._messages import MAX_SEQ
from ._decision_record import decision_of
from ._wakes import announce

if TYPE_CHECKING:
    from ._carrier import Attempt, Holding
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

PAGE: Final = 200
"""Runs read at a time, and pending checkpoints of one run."""

_WAITING: Final = RunFilter(statuses=frozenset({"suspended", "cancelling"}))
_MAY_HAVE_OUT: Final = RunFilter(statuses=frozenset({"running", "suspended", "cancelling"}))
CLOSE_BUDGET: Final = 30.0
"""Seconds (of Trio's clock) a closing engine spends at most marking the
attempts it leaves out."""
_STORE_TRIES: Final = 6
_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)


def needs_turn(rt: Runtime, cp: Attempt) -> bool:
    """Whether a pending remote step's (or decision task's) attempt that
    is out needs a turn of its run now: lost with its broker, or judged by
    another lost deadline than this engine's ``remote_redispatch`` gives."""
    if isinstance(cp, Checkpoint) and cp.kind != "remote":
        return False
    if cp.status != "pending" or cp.started_at is None:
        return False
    if rt.dispatcher.carrier.lost(cp):
        return True
    policy = rt.options.remote_redispatch
    return policy is not None and cp.wake_at != cp.started_at + policy[0]


async def wake_stranded(rt: Runtime, task_status: trio.TaskStatus[None]) -> None:
    """Wake the runs this engine finds stranded (see the module), once.

    Started before the due-run poller; reports started at once, and holds
    the engine busy (for `Engine.drain`) until the pass is over.
    """
    if rt.dispatcher.carrier.durable and rt.options.remote_redispatch is None:
        task_status.started()
        return
    with rt.scheduler.settling():
        task_status.started()
        woken = 0
        cursor: tuple[float, str] | None = None
        failures = 0
        while True:
            try:
                runs = await rt.store.find_runs(_WAITING, before=cursor, limit=PAGE)
                for run in runs:
                    if not rt.scheduler.has_turn(run.id) and await _stranded(rt, run.id):
                        woken += 1
                        rt.scheduler.wake(run.id)
            except StoreError as exc:
                failures += 1
                if failures >= _STORE_TRIES:
                    logger.error("could not look for runs with steps stranded: %s", exc)
                    return
                await trio.sleep(0.1 * 2**failures * rt.rng.uniform(0.5, 1.0))
                continue
            if len(runs) < PAGE:
                break
            cursor = (runs[-1].created_at, runs[-1].id)
        if woken:
            logger.warning("woke %d runs with remote steps to send again or to judge lost", woken)


async def _stranded(rt: Runtime, run_id: str) -> bool:
    decision = await _decision(rt, run_id)
    if decision is not None and needs_turn(rt, decision):
        return True
    return bool(await _pending(rt, run_id, lambda cp: needs_turn(rt, cp), first=True))


async def _decision(rt: Runtime, run_id: str) -> RunRecord | None:
    return decision_of({record.kind: record for record in await rt.store.get_records(run_id)})


async def _pending(
    rt: Runtime, run_id: str, which: Callable[[Checkpoint], bool], *, first: bool = False
) -> list[Checkpoint]:
    """The pending checkpoints of ``run_id`` for which ``which`` holds
    (only the first, with ``first``), read a page at a time."""
    found: list[Checkpoint] = []
    offset = 0
    while True:
        page = await rt.store.find_checkpoints(
            run_id, -MAX_SEQ, MAX_SEQ, statuses=_PENDING, offset=offset, limit=PAGE
        )
        found.extend(cp for cp in page if which(cp))
        if (first and found) or len(page) < PAGE:
            return found[:1] if first else found
        offset += PAGE


async def leave_nothing_stranded(rt: Runtime, holding: Holding) -> None:
    """As ``rt``'s engine closes cleanly, after its turns were joined:
    release its use of the broker, and if it was the last engine of this
    process on a broker that keeps nothing across its process, and some
    attempt went out on it, mark every attempt still out on it as out on a
    broker that closed and announce its run (see the module). Gives up
    after `CLOSE_BUDGET` seconds or at a store failure: what it did not
    mark stays as it was (sent again once this process ends, or by
    ``remote_redispatch``)."""
    if not holding.release():
        return
    marked = 0
    with trio.move_on_after(CLOSE_BUDGET) as cleanup:
        cleanup.shield = True
        try:
            cursor: tuple[float, str] | None = None
            while True:
                runs = await rt.store.find_runs(_MAY_HAVE_OUT, before=cursor, limit=PAGE)
                for run in runs:
                    marked += await _mark_closed(rt, run)
                if len(runs) < PAGE:
                    break
                cursor = (runs[-1].created_at, runs[-1].id)
        except (StoreError, trio.ClosedResourceError) as exc:
            logger.error(
                "could not mark the remote steps left out on %s as it closed (%d marked): %s",
                rt.dispatcher.carrier.broker,
                marked,
                exc,
            )
            return
    if cleanup.cancelled_caught:
        logger.error(
            "marking the remote steps left out on %s took over %.0f s; %d marked, the"
            " rest are sent again once this process ends",
            rt.dispatcher.carrier.broker,
            CLOSE_BUDGET,
            marked,
        )
    elif marked:
        logger.info(
            "%d remote steps were out on %s as its last engine closed; marked for"
            " another engine to send again",
            marked,
            rt.dispatcher.carrier.broker,
        )


async def _mark_closed(rt: Runtime, run: Run) -> int:
    """Mark ``run``'s attempts out on this engine's broker as out on one
    that closed; how many it found."""
    carrier = rt.dispatcher.carrier
    ops: list[Op] = [
        ClaimCheckpoint(attrs.evolve(cp, mark=carrier.closed_mark()), attempt=cp.attempts)
        for cp in await _pending(rt, run.id, carrier.holds)
    ]
    decision = await _decision(rt, run.id)
    if decision is not None and carrier.holds(decision):
        closed = attrs.evolve(decision, mark=carrier.closed_mark())
        ops.append(ClaimRecord(closed, attempt=decision.attempts))
    if not ops:
        return 0
    found = len(ops)
    # Told to the engines open now (one whose turn of it is in flight
    # turns it again after); one that opens later finds it in its pass
    # over stranded steps (`wake_stranded`). Its due time stays as it is:
    # an engine of this process on that very broker, which still holds
    # the task, has no use for an early turn.
    ops.extend(announce(rt.store, rt.engine_id, "wake", [run]))
    await rt.store.apply(ops)
    return found
