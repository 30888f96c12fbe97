"""Fans: `Context.all` and `Context.all_settled` over child workflows or a
remote step.

A fan of N inputs reserves N seqs up front, one per member, and records
every member in its first turn. Without ``concurrency`` all start at once;
with it, members take turns in a sliding window (see `_fan_window`): the
first ``concurrency`` start at once, and member ``i`` ending starts member
``i + concurrency``, outside the parent's turn. The join barrier wakes the
parent once the last member ended, not once per member. Member ``i`` is the
child run ``<run>.all.<first seq>.<i>`` or the remote step at seq
``first + i``. Fans recorded in waves by earlier releases (a wave of
``concurrency`` recorded at a time, each once the previous one drained)
replay, and go on, in waves.

A ``fail_fast`` fan freezes at its first failure: in one write, members
still pending or never started are settled as failed with code
`FAN_CANCELLED` (and running children are told to cancel, with their
compensation), so results that arrive later change nothing and members not
yet started never start. Child fans and step fans freeze with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, final

import attrs
import trio

from ..._base import _serde
from ..._base._exceptions import UsageError
from ..._base._failures import FAN_CANCELLED as FAN_CANCELLED
from ..._base._records import Checkpoint, CheckpointKind, ErrorInfo, FanMode, Mark
from ..._kernel._builds import run_build
from ..._kernel._decider import fan_command
from ..._kernel._definitions import Step, Workflow
from ..._kernel._dispatch import group_route
from ..._kernel._executions import is_rerun
from ..._kernel._replay import Replay, Suspend, recorded_value
from ..._stores._ops import ClaimCheckpoint, Op, PutValue, SettleCheckpoint
from ..flow_control._admission import start_controls
from ..steps._remote import BLOCKED, StepPlanner
from ._children import Failed, cancel_request, child_outcome, completion, record_child
from ._fan_window import (
    WINDOW_SCOPE,
    Window,
    lets_successor_start,
    read_window,
    waiting,
    waiting_mark,
    window_key,
)

RESCUE_FIRST: Final = 60.0
"""Seconds after which a parent whose fan has members waiting looks for a
start lost to a crash (see `_fan_window`), at the earliest."""
RESCUE_CAP: Final = 3600.0
"""Seconds between such looks, at the most (they back off until then)."""


def check_fan_target(target: object) -> None:
    """Fans run child workflows or remote steps, not local steps, and not
    steps behind a flow-control queue (the fan's own waves limit it)."""
    if isinstance(target, Step) and not target.remote:
        raise UsageError(
            f"a fan runs child workflows or remote steps; {target.name!r} is a local step"
            " (give it a group=, or call ctx.step in a loop)"
        )
    if isinstance(target, Step) and target.queue is not None:
        raise UsageError(
            f"step {target.name!r} goes through the flow-control queue {target.queue!r};"
            " a fan cannot use a queue: limit it with concurrency= instead"
        )


async def fan(
    replay: Replay,
    target: Workflow[..., Any] | Step[..., Any] | str,
    inputs: Sequence[Any],
    concurrency: int | None,
    mode: FanMode,
) -> list[Any]:
    """Run ``target`` once per input; return each member's value, or a
    `Failed` for a member that failed, in input order (suspending the run
    until every member is settled)."""
    check_fan_target(target)
    if isinstance(target, Step):
        replay.check_step(target)
        member: Workflow[..., Any] | Step[..., Any] = target
    else:
        member = wf = replay.workflow(target)
    if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
        raise UsageError(f"fan inputs must be a sequence, not {type(inputs).__name__}")
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise UsageError(f"fan concurrency must be a positive integer, not {concurrency!r}")
    if inputs and replay.next_is_new():
        # A new fan: every input must fit before its first member starts.
        # Once a member is recorded, the inputs were checked on the turn
        # that started it, and checking them again on each wave's turn
        # would cost O(members) per wave.
        for value in inputs:
            if isinstance(target, Step):
                _serde.check_step_args(target, (value,), None)
            else:
                _serde.check_workflow_args(wf, (value,))
    total = len(inputs)
    replay.decider.reach(
        replay,
        member.name,
        "remote" if isinstance(member, Step) else "child",
        total,
        lambda: fan_command(replay, member, inputs, concurrency, mode),
    )
    first = replay.take_seqs(total)
    if total == 0:
        await trio.lowlevel.checkpoint()
        return []
    if isinstance(target, Step):
        return await _step_fan(replay, target, inputs, concurrency, mode, first)
    return await _child_fan(replay, wf, inputs, concurrency, mode, first)


async def _child_fan(
    replay: Replay,
    wf: Workflow[..., Any],
    inputs: Sequence[Any],
    concurrency: int | None,
    mode: FanMode,
    first: int,
) -> list[Any]:
    total = len(inputs)
    members = [replay.recorded(first + i, wf.name, "child") for i in range(total)]
    fan_id = f"{replay.run.id}.all.{first}"
    plan = _FanPlan(replay, first, total, concurrency, mode, members)
    if plan.new_window():
        # A key function of the run controls that fails on one member
        # fails the fan before any member is recorded.
        for i in range(total):
            start_controls(wf, _serde.dump_args([inputs[i]]))
        plan.record_window(version=wf.version)
        for i in range(total):
            if i < plan.width:
                _start_child(replay, wf, (first, total, mode), i, inputs[i])
            else:
                input_json = _serde.dump_args([inputs[i]])
                waiting_cp = plan.waiting_member(i, wf.name, "child", input_json)
                replay.turn.put(attrs.evolve(waiting_cp, child_id=f"{fan_id}.{i}"))
        raise Suspend("fan", plan.recheck(), watch=plan.watch)
    if mode == "fail_fast" and _any_failed(members):
        members = await _freeze(replay, first, members, "child", wf.name, windowed=plan.windowed)
    elif any(cp is not None and cp.status == "pending" for cp in members) or (
        plan.windowed and None in members
    ):
        starts = await plan.rescue()
        for i in starts:
            _start_child(replay, wf, (first, total, mode), i, inputs[i])
        raise Suspend("fan", plan.recheck(), watch=plan.watch)
    else:
        # A fan recorded in waves by an earlier release goes on in waves.
        wave = _next_wave(members, concurrency)
        if wave:
            for i in wave:
                start_controls(wf, _serde.dump_args([inputs[i]]))
            for i in wave:
                _start_child(replay, wf, (first, total, mode), i, inputs[i])
            raise Suspend("fan")
    plan.ended()
    outcomes: list[Any] = []
    for i, cp in enumerate(members):
        assert cp is not None
        outcome = child_outcome(replay.runtime.app, wf, cp)
        if isinstance(outcome, Failed):
            outcome = attrs.evolve(outcome, id=cp.child_id or f"{fan_id}.{i}")
        outcomes.append(outcome)
    return outcomes


def _start_child(
    replay: Replay,
    wf: Workflow[..., Any],
    fan: tuple[int, int, FanMode],
    i: int,
    value: Any,
) -> None:
    first = fan[0]
    record_child(
        replay.turn,
        wf,
        first + i,
        f"{replay.run.id}.all.{first}.{i}",
        _serde.dump_args([value]),
        replay.runtime.clock.now(),
        awaited=True,
        fan=fan,
    )


async def _step_fan(
    replay: Replay,
    step: Step[..., Any],
    inputs: Sequence[Any],
    concurrency: int | None,
    mode: FanMode,
    first: int,
) -> list[Any]:
    total = len(inputs)
    members = [replay.recorded(first + i, step.name, "remote") for i in range(total)]
    fan_id = f"{replay.run.id}.all.{first}"
    planner = StepPlanner(replay, step)
    plan = _FanPlan(replay, first, total, concurrency, mode, members)
    if plan.new_window():
        plan.record_window()
        sent: list[Checkpoint] = []
        for i in range(total):
            input_json = _serde.dump_args([inputs[i]])
            if i < plan.width:
                sent.append(await planner.new(first + i, input_json, (first, total, mode)))
            else:
                waiting_cp = plan.waiting_member(i, step.name, "remote", input_json)
                replay.turn.put(attrs.evolve(waiting_cp, attempts=1, group=planner.group_route))
        raise Suspend("fan", plan.recheck(_earliest(sent)), watch=plan.watch)
    if not (mode == "fail_fast" and _any_failed(members)):
        for i, cp in enumerate(members):
            if cp is not None and cp.status == "pending" and not waiting(cp):
                members[i] = await planner.drive(cp)
    if mode == "fail_fast" and _any_failed(members):
        route = group_route(step, replay.run.namespace)
        members = await _freeze(
            replay, first, members, "remote", step.name, route, windowed=plan.windowed
        )
    else:
        for i in await plan.rescue():
            cp = members[i]
            if cp is None:
                input_json = _serde.dump_args([inputs[i]])
                members[i] = await planner.new(first + i, input_json, (first, total, mode))
            else:
                members[i] = await _send_waiting(planner, cp)
        pending = [cp for cp in members if cp is not None and cp.status == "pending"]
        if pending:
            due = _earliest([cp for cp in pending if not waiting(cp)])
            raise Suspend("fan", plan.recheck(due), watch=plan.watch)
        # A fan recorded in waves by an earlier release goes on in waves.
        wave = _next_wave(members, concurrency)
        if wave:
            sent = [
                await planner.new(first + i, _serde.dump_args([inputs[i]]), (first, total, mode))
                for i in wave
            ]
            raise Suspend("fan", _earliest(sent), watch=plan.watch)
    plan.ended()
    outcomes: list[Any] = []
    for i, cp in enumerate(members):
        assert cp is not None
        if cp.status == "completed":
            outcomes.append(recorded_value(step, cp))
        else:
            error = cp.error or ErrorInfo(message="failed")
            outcomes.append(Failed(error.message, error.code, error.details, f"{fan_id}.{i}"))
    return outcomes


@final
class _FanPlan:
    """How a fan with ``concurrency=`` moves on in this turn (see
    `_fan_window`): a new fan records its window; a fan whose members wait
    rescues the starts that were lost and suspends with a due time to look
    again; a fan recorded in waves by an earlier release (members recorded
    a wave at a time, none waiting) goes on in waves."""

    def __init__(
        self,
        replay: Replay,
        first: int,
        total: int,
        concurrency: int | None,
        mode: FanMode,
        members: list[Checkpoint | None],
    ) -> None:
        self.replay = replay
        self.first = first
        self.total = total
        self.concurrency = concurrency
        self.mode = mode
        self.members = members
        self.watch = (first, first + total - 1)
        self.windowed = any(waiting(cp) for cp in members)
        self.width = total if concurrency is None else min(concurrency, total)
        self.key = window_key(replay.run.id, first)

    def new_window(self) -> bool:
        """Whether this is a new fan whose members take turns in a window."""
        return self.width < self.total and all(cp is None for cp in self.members)

    def record_window(self, *, version: str | None = None) -> None:
        """Record the fan's window (before any member: it commits first)."""
        run = self.replay.run
        window = Window(
            concurrency=self.width,
            workflow=run.workflow,
            namespace=run.namespace,
            version=version,
            next=self.width,
            inflight=tuple(range(self.width)),
            build=run_build(self.replay.turn.records),
        )
        self.windowed = True
        now = self.replay.runtime.clock.now()
        self.replay.turn.ops.append(
            PutValue(WINDOW_SCOPE, self.key, window.dump(), now, run_id=run.id)
        )

    def waiting_member(
        self, i: int, name: str, kind: CheckpointKind, input_json: str
    ) -> Checkpoint:
        now = self.replay.runtime.clock.now()
        return Checkpoint(
            run_id=self.replay.run.id,
            seq=self.first + i,
            name=name,
            kind=kind,
            input=input_json,
            mark=waiting_mark(self.width),
            parallel_group=self.first,
            parallel_size=self.total,
            parallel_mode=self.mode,
            enqueued_at=now,
            rerun=is_rerun(self.replay.turn.records, self.first + i),
        )

    async def rescue(self) -> list[int]:
        """The members to start in this turn: those owed to members in
        flight that ended with no start made in their place (a start lost
        to a crash between a member's end and the next one's start), and
        those in flight but never recorded (a first turn cut off between
        its chunked writes). The starts write the window as they read it,
        so a start on its way elsewhere and these cannot both win."""
        if not self.windowed:
            return []
        rt, members, run = self.replay.engine, self.members, self.replay.run
        stored = await rt.store.get_value(WINDOW_SCOPE, self.key)
        window = read_window(stored)
        build = run_build(self.replay.turn.records)
        moved = window is not None and window.build != build
        if window is not None and moved:
            # An upgrading parent moved to another build at this turn: the
            # members its window starts from now on follow it there.
            window = attrs.evolve(window, build=build)
        if window is None:
            # Lost with the members still waiting: read it off the members.
            unstarted = [cp is None or waiting(cp) for cp in members]
            next_ = len(members)
            while next_ > 0 and unstarted[next_ - 1]:
                next_ -= 1
            window = Window(
                concurrency=self.width,
                workflow=run.workflow,
                namespace=run.namespace,
                next=next_,
                inflight=tuple(
                    i for i in range(next_) if not unstarted[i] and _pending(members[i])
                ),
                build=build,
            )
        owed = [i for i in window.inflight if members[i] is None]
        ended = [
            i
            for i in window.inflight
            if (cp := members[i]) is not None and lets_successor_start(cp)
        ]
        slid, starts = window.slide(ended, self.total)
        starts = [i for i in starts if members[i] is None or waiting(members[i])]
        if owed or starts or moved:
            self.replay.turn.ops.append(
                PutValue(
                    WINDOW_SCOPE,
                    self.key,
                    slid.dump(),
                    rt.clock.now(),
                    expect_version=0 if stored is None else stored.version,
                    run_id=run.id,
                )
            )
        return [*owed, *starts]

    def recheck(self, due: float | None = None) -> float | None:
        """When the parent looks again: the earlier of ``due`` and, while
        members wait, a look that only a start lost to a crash needs, so
        it comes late and backs off: after `RESCUE_FIRST` seconds, then
        after as long as the fan has waited, up to `RESCUE_CAP`."""
        checkpoints = self.replay.turn.checkpoints
        for seq in range(self.first + self.width, self.first + self.total):
            cp = checkpoints.get(seq)
            if waiting(cp):
                assert cp is not None
                now = self.replay.runtime.clock.now()
                waited = 0.0 if cp.enqueued_at is None else now - cp.enqueued_at
                look = now + min(max(RESCUE_FIRST, waited), RESCUE_CAP)
                return look if due is None else min(due, look)
        return due

    def ended(self) -> None:
        """The fan returns: its window value goes with the run's end."""
        if self.width < self.total:
            now = self.replay.runtime.clock.now()
            self.replay.turn.end_ops.append(PutValue(WINDOW_SCOPE, self.key, None, now))


async def _send_waiting(planner: StepPlanner, cp: Checkpoint) -> Checkpoint:
    """Start a waiting member in the parent's turn (its task goes out once
    the turn's writes commit), or park it if no worker can take it."""
    rt, turn = planner.rt, planner.replay.turn
    now = rt.clock.now()
    gap = await planner.gap()
    if gap is not None:
        cp = attrs.evolve(
            cp,
            wake_at=now + rt.options.blocked_recheck,
            mark=Mark(code=BLOCKED, message=gap),
        )
    else:
        cp = planner.out(cp, now)
    turn.checkpoints[cp.seq] = cp
    turn.ops.append(ClaimCheckpoint(cp))
    if gap is None:
        turn.dispatch.append((len(turn.ops) - 1, planner.task(cp, now)))
    return cp


def _pending(cp: Checkpoint | None) -> bool:
    return cp is not None and cp.status == "pending"


def _any_failed(members: list[Checkpoint | None]) -> bool:
    """Whether a member failed on its own (not cancelled by its fan)."""
    return any(
        cp is not None and cp.status == "failed" and not _cancelled_by_fan(cp) for cp in members
    )


def _cancelled_by_fan(cp: Checkpoint) -> bool:
    """Whether a ``fail_fast`` fan cancelled this member."""
    return cp.error is not None and cp.error.code == FAN_CANCELLED


def _next_wave(members: list[Checkpoint | None], concurrency: int | None) -> list[int]:
    """The members to start now: those not started, ``concurrency`` at most."""
    unstarted = [i for i, cp in enumerate(members) if cp is None]
    return unstarted if concurrency is None else unstarted[:concurrency]


def _earliest(members: list[Checkpoint]) -> float | None:
    """When the first of ``members`` is due (None if none is)."""
    wakes = [cp.wake_at for cp in members if cp.wake_at is not None]
    return min(wakes) if wakes else None


async def _freeze(
    replay: Replay,
    first: int,
    members: list[Checkpoint | None],
    kind: CheckpointKind,
    name: str,
    route: str | None = None,
    *,
    windowed: bool = False,
) -> list[Checkpoint | None]:
    """End a ``fail_fast`` fan of ``kind`` (``child`` or ``remote``): settle
    every member still pending or not yet started as cancelled, and tell the
    running children to cancel (with their compensation), in one write, so
    that results arriving later change nothing and unstarted members never
    start. A member that settled on its own just before keeps its result.

    Returns:
      The members as they stand now.
    """
    rt, turn = replay.runtime, replay.turn
    now = rt.clock.now()
    error = ErrorInfo(message="cancelled: another member of the fan failed", code=FAN_CANCELLED)
    # A parent reads a child member's outcome from its completion.
    output = completion(False, error=error) if kind == "child" else None
    ops: list[Op] = []
    pending: list[int] = []
    for i, cp in enumerate(members):
        if cp is None:
            turn.put(
                Checkpoint(
                    run_id=replay.run.id,
                    seq=first + i,
                    name=name,
                    kind=kind,
                    status="failed",
                    output=output,
                    error=error,
                    group=route,
                    parallel_group=first,
                    parallel_size=len(members),
                    parallel_mode="fail_fast",
                    enqueued_at=now,
                    finished_at=now,
                )
            )
        elif cp.status == "pending":
            pending.append(i)
            ops.append(SettleCheckpoint(replay.run.id, cp.seq, "failed", output, error, now))
            if kind == "child":
                assert cp.child_id is not None
                ops.append(cancel_request(cp.child_id, True, now))
    if ops:
        if windowed:
            # Starts on their way elsewhere, having read the window, fail.
            ops.append(PutValue(WINDOW_SCOPE, window_key(replay.run.id, first), None, now))
        # Each pending member wrote a settle, and a child a cancel request.
        stride = 2 if kind == "child" else 1
        # Only an engine's turn finds a member pending: elsewhere the
        # history settled every member, or the body stopped before.
        engine = replay.engine
        results = await engine.store.apply(ops)
        for n, i in enumerate(pending):
            settled = results[stride * n]
            if settled is None:
                # The member settled on its own just before: keep its result.
                [settled] = await engine.store.get_checkpoints(replay.run.id, first + i, first + i)
            turn.checkpoints[first + i] = settled
            child_id = members[i].child_id  # type: ignore[union-attr]
            if kind == "child" and results[stride * n + 1] and child_id is not None:
                engine.scheduler.interrupt(child_id)
                engine.scheduler.wake(child_id)
    return [turn.checkpoints.get(first + i) for i in range(len(members))]
