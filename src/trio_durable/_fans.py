"""Fans: `Context.all` and `Context.all_settled` over child workflows or a
remote step.

A fan of N inputs reserves N seqs up front, one per member. Members start
in waves (all at once, or ``concurrency`` at a time), each once the
previous wave drained; the join barrier wakes the parent once per wave, not
once per member. Member ``i`` is the child run ``<run>.all.<first seq>.<i>``
or the remote step at seq ``first + i``.

A ``fail_fast`` fan freezes at its first failure: in one write, members
still pending or never started are settled as failed with code
`FAN_CANCELLED` (and running children are told to cancel, with their
compensation), so results that arrive later change nothing and members not
yet started never start. Child fans and step fans freeze with the same code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import attrs
import trio

from . import _serde
from ._admission import start_controls
from ._app import Step, Workflow
from ._children import Failed, cancel_request, child_outcome, completion, record_child
from ._decider import fan_command
from ._dispatch import group_route
from ._exceptions import UsageError
from ._records import Checkpoint, CheckpointKind, ErrorInfo, FanMode
from ._remote import StepPlanner
from ._replay import Replay, Suspend, recorded_value
from ._stores._ops import Op, SettleCheckpoint

FAN_CANCELLED: Final = "fan_cancelled"
"""The error code of fan members a ``fail_fast`` fan cancelled."""


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
    if replay.decider is not None:
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
    if mode == "fail_fast" and _any_failed(members):
        members = await _freeze(replay, first, members, "child", wf.name)
    elif any(cp is not None and cp.status == "pending" for cp in members):
        raise Suspend("fan", watch=(first, first + total - 1))
    else:
        wave = _next_wave(members, concurrency)
        if wave:
            # A key function of the run controls that fails on one member
            # fails the fan before any member is recorded.
            for i in wave:
                start_controls(wf, _serde.dump_args([inputs[i]]))
            for i in wave:
                record_child(
                    replay.turn,
                    wf,
                    first + i,
                    f"{fan_id}.{i}",
                    _serde.dump_args([inputs[i]]),
                    replay.runtime.clock.now(),
                    awaited=True,
                    fan=(first, total, mode),
                )
            raise Suspend("fan")
    outcomes: list[Any] = []
    for i, cp in enumerate(members):
        assert cp is not None
        outcome = child_outcome(replay.runtime.app, wf, cp)
        if isinstance(outcome, Failed):
            outcome = attrs.evolve(outcome, id=cp.child_id or f"{fan_id}.{i}")
        outcomes.append(outcome)
    return outcomes


async def _step_fan(
    replay: Replay,
    step: Step[..., Any],
    inputs: Sequence[Any],
    concurrency: int | None,
    mode: FanMode,
    first: int,
) -> list[Any]:
    total = len(inputs)
    watch = (first, first + total - 1)
    members = [replay.recorded(first + i, step.name, "remote") for i in range(total)]
    fan_id = f"{replay.run.id}.all.{first}"
    planner = StepPlanner(replay, step)
    if not (mode == "fail_fast" and _any_failed(members)):
        for i, cp in enumerate(members):
            if cp is not None and cp.status == "pending":
                members[i] = await planner.drive(cp)
    if mode == "fail_fast" and _any_failed(members):
        route = group_route(step, replay.run.namespace)
        members = await _freeze(replay, first, members, "remote", step.name, route)
    else:
        pending = [cp for cp in members if cp is not None and cp.status == "pending"]
        if pending:
            raise Suspend("fan", _earliest(pending), watch=watch)
        wave = _next_wave(members, concurrency)
        if wave:
            sent = [
                await planner.new(first + i, _serde.dump_args([inputs[i]]), (first, total, mode))
                for i in wave
            ]
            raise Suspend("fan", _earliest(sent), watch=watch)
    outcomes: list[Any] = []
    for i, cp in enumerate(members):
        assert cp is not None
        if cp.status == "completed":
            outcomes.append(recorded_value(step, cp))
        else:
            error = cp.error or ErrorInfo(message="failed")
            outcomes.append(Failed(error.message, error.code, error.details, f"{fan_id}.{i}"))
    return outcomes


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
        # Each pending member wrote a settle, and a child a cancel request.
        stride = 2 if kind == "child" else 1
        results = await rt.store.apply(ops)
        for n, i in enumerate(pending):
            settled = results[stride * n]
            if settled is None:
                # The member settled on its own just before: keep its result.
                [settled] = await rt.store.get_checkpoints(replay.run.id, first + i, first + i)
            turn.checkpoints[first + i] = settled
            child_id = members[i].child_id  # type: ignore[union-attr]
            if kind == "child" and results[stride * n + 1] and child_id is not None:
                rt.scheduler.interrupt(child_id)
                rt.scheduler.wake(child_id)
    return [turn.checkpoints.get(first + i) for i in range(len(members))]
