"""Remote steps inside a turn: when to send, park, queue or resend them.

A remote step's checkpoint is written ``pending`` before its task is sent:
the task goes out only after the turn's writes commit. While pending, the
checkpoint says what it waits for:

- ``started_at`` is None: the attempt in ``attempts`` is not dispatched yet.
  It is due at ``wake_at`` (a retry's backoff), or was parked because no live
  worker of its group offers what it ``requires``, or waits for a slot of a
  flow-control queue, or is to be sent again because its run was retried
  after a cancel dropped its result (``error`` says which);
- ``started_at`` is set: the attempt is out, and ``error`` is the mark
  `OUT` naming the broker it went out on (see `_carrier`). It is sent again
  as a new attempt at once if that broker is not durable and not this
  engine's own (it went with its process), or, with ``remote_redispatch``
  on the engine that turns the run, once it counts as lost: that engine's
  ``seconds`` after ``started_at``, whatever the engine that sent it said
  (``wake_at`` is that time, as the sender saw it).

A send the broker refused leaves ``started_at`` cleared, the mark
`BROKER_WAIT`, and ``wake_at`` the time to try again (see `_dispatch`).

Updates to an existing pending checkpoint are claims, so a result that
settles it meanwhile always wins; a task whose claim lost is never sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, final

import attrs

from ..._base import _serde
from ..._base._exceptions import UsageError
from ..._base._failures import LOST, step_failure
from ..._base._policies import FlowQueue
from ..._base._records import Checkpoint, ErrorInfo, FanMode, Mark
from ..._kernel._builds import run_build
from ..._kernel._carrier import BLOCKED as BLOCKED
from ..._kernel._carrier import BROKER_WAIT, AttemptT, sent_now
from ..._kernel._carrier import REDISPATCHED as REDISPATCHED
from ..._kernel._carrier import RESEND as RESEND
from ..._kernel._carrier import out_verdict as out_verdict
from ..._kernel._definitions import Step
from ..._kernel._dispatch import group_route
from ..._kernel._executions import is_rerun, new_execution
from ..._kernel._learned import queue_of
from ..._kernel._replay import Replay, Suspend, recorded_value
from ..._stores._base import Store, WriteConflict
from ..._stores._ops import (
    QUEUED,
    AdmitToQueue,
    ClaimCheckpoint,
    Op,
    PutCheckpoint,
    PutValue,
    ReleaseQueueSlot,
    SettleCheckpoint,
)
from ..._wire._messages import Task
from ..flow_control._admission import next_look
from ..flow_control._rate_limits import RATE_LIMITED, reserve
from ._breakpoints import CONTINUED, marked, pause_before, suspend_if_paused
from ._step_dedup import CLAIM_ATTEMPTS, DEDUPLICATED, check_dedup_key, claim

if TYPE_CHECKING:
    from ..._kernel._runtime import Runtime


@final
class StepPlanner:
    """Dispatch decisions of one turn for one remote step, alone or the
    members of its fan (capability checks are asked once per turn, not once
    per fan member).

    Args:
      replay: The turn's replay.
      step: The remote step.
      flow: The flow-control queue its calls go through, if any.
      priority: Their priority.
      dedup_key: The key that at most one of the queue's waiting steps
        holds (see `_step_dedup`), or None.
    """

    def __init__(
        self,
        replay: Replay,
        step: Step[..., Any],
        flow: FlowQueue | None = None,
        priority: int = 0,
        dedup_key: str | None = None,
    ) -> None:
        self.replay = replay
        self.step = step
        self.group_route = group_route(step, replay.run.namespace)
        # The build its tasks go to (see `_builds`), as the turn began.
        self.build = run_build(replay.turn.records)
        self.flow = flow
        self.priority = priority
        self.dedup_key = dedup_key
        self._gap: str | bool | None = False

    @property
    def rt(self) -> Runtime:
        """The engine's parts: a planner is made wherever a body replays a
        remote step, but sends, parks and queues only in an engine's turn
        (elsewhere the step is settled in the history, or the body stopped
        before)."""
        return self.replay.engine

    async def gap(self) -> str | None:
        if self._gap is False:
            self._gap = await self.rt.dispatcher.capability_gap(
                self.group_route, self.step.requires, self.build
            )
        return self._gap  # type: ignore[return-value]

    def out(self, cp: Checkpoint, now: float) -> Checkpoint:
        """``cp`` with its attempt out from ``now``, as a new execution."""
        return sent_now(
            cp,
            now,
            self.rt.dispatcher.carrier,
            self.rt.options.remote_redispatch,
            new_execution(self.rt.rng),
        )

    def task(self, cp: Checkpoint, now: float) -> Task:
        self.replay.emit(
            "step.started", cp.seq, cp.name, attempt=cp.attempts, route=self.group_route
        )
        return Task(
            run_id=cp.run_id,
            seq=cp.seq,
            attempt=cp.attempts,
            step=self.step.name,
            workflow=self.replay.run.workflow,
            route=self.group_route,
            input=cp.input or "[]",
            timeout=self.step.timeout,
            dispatched_at=now,
            queue=None if self.flow is None else self.flow.name,
            priority=max(0, min(9, self.priority)),
            reply_to=self.rt.results_queue,
            execution=cp.executions[-1],
            build=self.build,
        )

    async def new(
        self,
        seq: int,
        input_json: str,
        fan: tuple[int, int, FanMode] | None,
        *,
        compensation: str | None = None,
    ) -> Checkpoint:
        """Record a new member and, if a worker can take it, its first task."""
        now = self.rt.clock.now()
        gap = await self.gap()
        sent = gap is None and self.flow is None
        cp = Checkpoint(
            run_id=self.replay.run.id,
            seq=seq,
            name=self.step.name,
            kind="remote",
            input=input_json,
            attempts=1,
            group=self.group_route,
            compensation=compensation,
            parallel_group=fan[0] if fan else None,
            parallel_size=fan[1] if fan else None,
            parallel_mode=fan[2] if fan else None,
            enqueued_at=now,
            # A result without an execution id cannot tell this step from
            # what a retry deleted at its seq.
            rerun=is_rerun(self.replay.turn.records, seq),
        )
        if sent:
            cp = self.out(cp, now)
        turn = self.replay.turn
        if gap is not None:
            cp = self._parked(cp, gap, now)
            turn.put(cp)
        elif self.flow is not None:
            return await self._admit(cp, now)
        else:
            turn.put(cp)
            turn.dispatch.append((len(turn.ops) - 1, self.task(cp, now)))
        return cp

    async def _admit(self, cp: Checkpoint, now: float) -> Checkpoint:
        """Ask the step's flow-control queue for a slot, in the store at once:
        the admission state is shared by every engine."""
        assert self.flow is not None
        # A waiter is woken by the release that lets it in; it also looks
        # again now and then, backing off (next_look), in case that wake was
        # lost (a release whose write was applied though its caller was
        # told it failed).
        queued = attrs.evolve(
            cp,
            mark=Mark(
                code=QUEUED,
                message=f"waiting for a slot of queue {self.flow.name!r}",
                details={"queue": self.flow.name},
            ),
            wake_at=next_look(cp.enqueued_at, now, self.rt.options.blocked_recheck),
        )
        ops: list[Op] = [
            PutCheckpoint(queued),
            AdmitToQueue(
                self.flow.name, cp.run_id, cp.seq, self.priority, self.flow.concurrency, now
            ),
        ]
        for _ in range(CLAIM_ATTEMPTS):
            claims: list[Op] = []
            if self.dedup_key is not None:
                found = await claim(
                    self.rt.store,
                    self.flow.name,
                    self.replay.run.namespace,
                    self.dedup_key,
                    cp,
                    now,
                )
                if not isinstance(found, PutValue):
                    return await self._refuse(cp, found, now)
                claims.append(found)
            try:
                _, admitted, *_ = await self.rt.store.apply([*ops, *claims])
            except WriteConflict:
                continue  # another call claimed the key meanwhile: read whose
            break
        else:
            raise WriteConflict(f"could not claim dedup key {self.dedup_key!r} of {cp.name!r}")
        self.replay.turn.checkpoints[cp.seq] = queued
        if not admitted:
            return queued
        return await self._let_through(attrs.evolve(queued, mark=None, error=None), now)

    async def _refuse(self, cp: Checkpoint, holder: tuple[str, int], now: float) -> Checkpoint:
        """Record a step refused for the dedup key that ``holder`` (a step
        still waiting in the queue) holds: failed, code ``deduplicated``."""
        assert self.flow is not None
        error = ErrorInfo(
            message=(
                f"step {holder[1]} of run {holder[0]!r} with dedup key {self.dedup_key!r}"
                f" already waits in queue {self.flow.name!r}"
            ),
            code=DEDUPLICATED,
        )
        refused = attrs.evolve(
            cp, status="failed", error=error, started_at=None, wake_at=None, finished_at=now
        )
        await self.rt.store.apply([PutCheckpoint(refused)])
        self.replay.turn.checkpoints[cp.seq] = refused
        self.replay.emit(
            "step.failed",
            cp.seq,
            cp.name,
            attempt=cp.attempts,
            error=error.message,
            code=error.code,
            final=True,
        )
        return refused

    async def _recheck_admission(self, cp: Checkpoint, now: float) -> Checkpoint:
        """A waiter's look (ever further apart: `next_look`): renew its wait
        and ask again, in one write, so a slot given to it meanwhile (whose
        wake may be lost) is found, and a concurrent admission is never
        undone by a stale copy."""
        assert self.flow is not None
        waiting = attrs.evolve(
            cp, wake_at=next_look(cp.enqueued_at, now, self.rt.options.blocked_recheck)
        )
        claimed, admitted = await self.rt.store.apply(
            [
                ClaimCheckpoint(waiting),
                AdmitToQueue(
                    self.flow.name, cp.run_id, cp.seq, self.priority, self.flow.concurrency, now
                ),
            ]
        )
        if not claimed:
            # Settled meanwhile (its run was cancelled, or a fan froze it).
            [fresh] = await self.rt.store.get_checkpoints(cp.run_id, cp.seq, cp.seq)
            self.replay.turn.checkpoints[cp.seq] = fresh
            return fresh
        self.replay.turn.checkpoints[cp.seq] = waiting
        if not admitted:
            return waiting
        return await self._let_through(attrs.evolve(waiting, mark=None, error=None), now)

    async def _let_through(self, cp: Checkpoint, now: float) -> Checkpoint:
        """Send a step that may go (holding its queue's slot, if any), unless
        its queue's rate limit is used up: then it reserves the time the
        window lets it in, and is due then, marked ``rate_limited``."""
        rate = None if self.flow is None else self.flow.rate_limit
        if rate is None or _reserved(cp):
            return self._send(cp, now)
        assert self.flow is not None
        at = await reserve(self.rt.store, self.flow.name, rate.starts, rate.per, now)
        if at <= now:
            return self._send(cp, now)
        limited = attrs.evolve(
            cp,
            started_at=None,
            wake_at=at,
            mark=Mark(
                code=RATE_LIMITED,
                message=f"waiting for the rate limit of queue {self.flow.name!r}",
            ),
        )
        self._claim(limited)
        return limited

    def _send(self, cp: Checkpoint, now: float) -> Checkpoint:
        sent = self.out(cp, now)
        self._claim(sent)
        turn = self.replay.turn
        turn.dispatch.append((len(turn.ops) - 1, self.task(sent, now)))
        return sent

    def _parked(self, cp: Checkpoint, gap: str, now: float) -> Checkpoint:
        return attrs.evolve(
            cp,
            started_at=None,
            wake_at=now + self.rt.options.blocked_recheck,
            mark=Mark(code=BLOCKED, message=gap),
        )

    async def drive(self, cp: Checkpoint) -> Checkpoint:
        """Move a pending member on if something is due: send the attempt it
        waits to send, send again an attempt its broker lost, or give up on
        (or resend) an attempt that counts as lost."""
        now = self.rt.clock.now()
        if cp.started_at is not None:
            return await self._out(cp, now)
        if cp.wake_at is not None and cp.wake_at > now:
            return cp
        if _in_line(cp):
            return await self._recheck_admission(cp, now)
        gap = await self.gap()
        if gap is not None:
            parked = self._parked(cp, gap, now)
            self._claim(parked)
            return parked
        if self.flow is not None and cp.mark is not None and cp.mark.code in (BLOCKED, RESEND):
            return await self._admit(cp, now)
        return await self._let_through(cp, now)

    async def _out(self, cp: Checkpoint, now: float) -> Checkpoint:
        """An attempt that is out: wait for its result (until it counts as
        lost, if it can), or send it again as a new attempt."""
        verdict = out_verdict(self.rt, cp, now)
        if not isinstance(verdict, ErrorInfo):
            # Not written: the run's wake is what matters (its next turn
            # judges the attempt again, by this engine's settings).
            return cp if cp.wake_at == verdict else attrs.evolve(cp, wake_at=verdict)
        if verdict.code == REDISPATCHED:
            policy = self.rt.options.remote_redispatch
            assert policy is not None
            redispatches = sum(1 for e in cp.errors if e.code == REDISPATCHED)
            if redispatches >= policy[1]:
                return await self._lost(cp, redispatches, now)
        resent = attrs.evolve(
            self.out(cp, now), attempts=cp.attempts + 1, errors=(*cp.errors, verdict)
        )
        self._claim(resent)
        turn = self.replay.turn
        turn.dispatch.append((len(turn.ops) - 1, self.task(resent, now)))
        self.replay.emit(
            "step.redispatched", cp.seq, cp.name, attempt=resent.attempts, code=verdict.code
        )
        return resent

    async def _lost(self, cp: Checkpoint, redispatches: int, now: float) -> Checkpoint:
        error = ErrorInfo(
            message=f"no result after {redispatches + 1} dispatches of step {cp.name!r}",
            code=LOST,
            started_at=cp.started_at,
            finished_at=now,
        )
        store = self.rt.store
        ops: list[Any] = [SettleCheckpoint(cp.run_id, cp.seq, "failed", None, error, now)]
        if self.flow is not None:
            # No result will come to give the slot back: give it back here.
            ops.append(ReleaseQueueSlot(self.flow.name, cp.run_id, cp.seq, self.flow.concurrency))
        settled, *released = await store.apply(ops)
        if settled is None:
            [settled] = await store.get_checkpoints(cp.run_id, cp.seq, cp.seq)
        else:
            self.replay.emit(
                "step.failed",
                cp.seq,
                cp.name,
                attempt=cp.attempts,
                error=error.message,
                code=error.code,
                final=True,
            )
        for admitted in released:
            for run_id, _ in admitted:
                self.rt.scheduler.wake(run_id)
        self.replay.turn.checkpoints[cp.seq] = settled
        return settled  # type: ignore[no-any-return]

    def _claim(self, cp: Checkpoint) -> None:
        turn = self.replay.turn
        turn.checkpoints[cp.seq] = cp
        turn.ops.append(ClaimCheckpoint(cp))


async def remote_step(
    replay: Replay,
    step: Step[..., Any],
    args: Sequence[Any],
    *,
    compensation: str | None = None,
    flow_queue: str | None = None,
    priority: int | None = None,
    dedup_key: str | None = None,
) -> Any:
    """`Context.step` for a step that runs on workers (``flow_queue`` is
    its ``queue=``)."""
    flow = None
    name = flow_queue if flow_queue is not None else step.queue
    if name is not None:
        flow = queue_of(replay.runtime.app, replay.runtime.learned, name)
        if flow is None:
            raise UsageError(
                f"no flow-control queue {name!r} is registered in app {replay.runtime.app.name!r}"
            )
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise UsageError(f"priority must be an integer, not {priority!r}")
    check_dedup_key(dedup_key, name)
    seq = replay.next_seq()
    cp = replay.recorded(seq, step.name, "remote")
    planner = StepPlanner(
        replay,
        step,
        flow,
        priority if priority is not None else (flow.priority if flow else 0),
        dedup_key,
    )
    suspend_if_paused(cp)
    # Whether some attempt of the step may have been out while this turn
    # held the lease (then its result may have settled it unseen: the
    # suspend looks once more). Not for a step this turn records: its
    # first attempt goes out only once the turn's write gave the lease back.
    watch: tuple[int, int] | None = (seq, seq)
    if cp is None:
        undo = None if compensation is None else replay.runtime.app.get_step(compensation)
        input_json = _serde.check_step_args(step, args, undo)
        await pause_before(replay, seq, step.name, "remote", input_json, compensation)
        cp = await planner.new(seq, input_json, None, compensation=compensation)
        watch = None
    elif marked(cp, CONTINUED):
        # Continued past a breakpoint: recorded afresh and sent, as if new.
        cp = await planner.new(seq, cp.input or "[]", None, compensation=cp.compensation)
    elif cp.status == "pending":
        cp = await planner.drive(cp)
    if cp.status == "completed":
        return recorded_value(step, cp)
    if cp.status == "failed":
        raise step_failure(cp)
    recheck = partial(let_in_meanwhile, run_id=cp.run_id, seq=seq) if _in_line(cp) else None
    raise Suspend("remote", cp.wake_at, watch=watch, recheck=recheck)


def resend_on_retry(cp: AttemptT) -> AttemptT | None:
    """What `Engine.retry` of a suspended run writes, by claim, for one of
    its pending checkpoints (a remote step's) or its decision record: an
    attempt that is out becomes a new attempt to send at once (a late
    failure of the old one then changes nothing; a late success still
    settles it), marked `RESEND`; one whose send the broker refused is due
    at once; anything else is left alone (None)."""
    step = isinstance(cp, Checkpoint)
    if cp.status != "pending" or (step and cp.kind != "remote"):
        return None
    if cp.started_at is None:
        if cp.mark is not None and cp.mark.code == BROKER_WAIT:
            return attrs.evolve(cp, wake_at=None)
        return None
    retried = ErrorInfo(
        message=f"attempt {cp.attempts} was out when its run was retried; sent again",
        code="retried",
        # When it went out; it never ended, as far as the run knows.
        started_at=cp.started_at,
    )
    resend = Mark(code=RESEND, message="to be sent again: its run was retried")
    return attrs.evolve(
        cp,
        # A decision task's next attempt is numbered as it is sent.
        attempts=cp.attempts + (1 if step else 0),
        errors=(*cp.errors, retried),
        mark=resend,
        started_at=None,
        wake_at=None,
    )


def _reserved(cp: Checkpoint) -> bool:
    """Whether a step holds a reservation of its queue's rate limit (due
    once its ``wake_at`` passed)."""
    return cp.mark is not None and cp.mark.code == RATE_LIMITED


def _in_line(cp: Checkpoint) -> bool:
    return cp.mark is not None and cp.mark.code == QUEUED


async def let_in_meanwhile(store: Store, run_id: str, seq: int) -> bool:
    """Whether the step at ``seq``, which a turn saw waiting in a queue, has
    been let in (or settled) since.

    A release lets waiters in on whichever engine settles the result, and
    that engine wakes their runs; a run whose turn another engine holds then
    is not taken, and that turn, having read the step still in line,
    suspends it until its next look. Asked once the suspend committed (and
    the lease is free again), this closes that gap.
    """
    found = await store.get_checkpoints(run_id, seq, seq)
    return not found or not _in_line(found[0])
