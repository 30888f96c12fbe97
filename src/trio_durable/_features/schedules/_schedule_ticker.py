"""The schedule ticker: the task of every engine that starts the runs of
schedules' ticks.

Each pass reads every schedule (spec and state) from the store and
handles the ticks that are due, one write per tick: the run of a tick that
starts (its id derived from the schedule and the tick, so it is created
once fleet-wide) is created in the same batch as the state that moves past
the tick, and that state is written only if it is still the version read.
Two engines racing for a tick therefore start it once: the loser's batch
conflicts, is rolled back whole, and it reads the state again.

Between passes the ticker sleeps until the earliest due time
(`trio.sleep_until` on the engine's clock) or until a schedule changes:
changed through this engine, or announced by another engine or a client
(an `Announce` of kind ``"schedules"``), or a run a buffered tick waits
for ends. On a store that announces nothing it also looks again every
``reconcile_interval``. `Engine.drain` does not wait for it.
"""

from __future__ import annotations

import contextlib
import logging
import math
from functools import partial
from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

import attrs
import trio

from ..._base._exceptions import InvalidArgumentsError, RunNotFoundError, ScheduleError, StoreError
from ..._base._records import Run, StoredValue
from ..._kernel._hooks import Feature
from ..._kernel._replay import TurnDraft
from ..._kernel._run_reads import read_run
from ..._kernel._wakes import announce, read_interval, serves
from ..._stores._base import RunWatch, WriteConflict
from ..._stores._ops import CreateRun, Op, PutValue
from ..flow_control._admission import creation_ops, start_controls
from ..starts._runs import await_end
from ._schedule_spec import STATE_SCOPE, ScheduleSpec, ScheduleState, tick_run_id
from ._schedules import put_spec, read_schedules, run_version, schedule_run

if TYPE_CHECKING:
    from ..._kernel._runtime import Runtime

logger = logging.getLogger("trio_durable")

_OUTAGE_BACKOFF = 0.1

_MISSED_PER_WRITE = 1000
"""Missed ticks counted per write: after a long outage, a schedule's
backlog is worked off in writes of this many ticks (croniter takes about
0.2 ms a tick), so the engine's other tasks run in between."""


@final
class ScheduleTicker(Feature):
    """What tells an engine's ticker to look at the schedules again.

    Attributes:
      passes: How many passes over the schedules it made (for tests).
    """

    def __init__(self) -> None:
        self._event = trio.Event()
        self.passes = 0
        # name -> (spec version, state version, when its next tick is due),
        # as the last pass left it: a schedule whose versions are unchanged
        # and whose next tick is not due is not computed again.
        self.known: dict[str, tuple[int, int, float]] = {}

    def changed(self) -> None:
        """A schedule changed (here, or announced from elsewhere)."""
        self._event.set()

    def announced(self, kind: str, run_id: str | None) -> None:
        if kind == "schedules":
            self.changed()

    def missed(self) -> None:
        self.changed()

    def fresh(self) -> trio.Event:
        """A new event for the next wait, made before a pass reads the
        store, so a change during the pass still ends the wait after it."""
        self._event = trio.Event()
        return self._event


@final
@attrs.define(frozen=True, kw_only=True)
class _Step:
    """What a schedule needs now: a state to write (with the run to create
    in the same batch), or, if ``state`` is None, nothing until
    ``wake_at`` or the end of the run ``wait_for``."""

    state: ScheduleState | None = None
    tick: float | None = None
    wake_at: float = math.inf
    wait_for: str | None = None


async def tick_schedules(
    rt: Runtime, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Declare the app's schedules, then tick every schedule in the store
    until cancelled. Started once the schedules the app declares are
    written (or the store refused them: then the first pass writes them)."""
    ticker = rt.features.part(ScheduleTicker)
    declared = await _declare(rt, quiet=True)
    task_status.started()
    failures = 0
    # The due time the last wait slept until: durable time turned into
    # Trio's and back may come out a rounding short of it, and a tick
    # found not quite due would be waited for again, at once, forever.
    reached = -math.inf
    async with trio.open_nursery() as watchers:
        watching: dict[str, trio.CancelScope] = {}
        while True:
            changed = ticker.fresh()
            try:
                if not declared:
                    declared = await _declare(rt, quiet=False)
                wake_at, waits = await tick_due(rt, reached)
            except StoreError as exc:
                failures += 1
                delay = min(
                    _OUTAGE_BACKOFF * 2 ** min(failures - 1, 10), rt.options.reconcile_interval
                )
                logger.warning("the schedule ticker cannot reach the store (%s); retrying", exc)
                await trio.sleep(delay)
                continue
            failures = 0
            ticker.passes += 1
            for run_id in sorted(waits - watching.keys()):
                watching[run_id] = await watchers.start(_watch_end, rt, run_id, watching)
            for run_id in sorted(watching.keys() - waits):
                watching.pop(run_id).cancel()
            if not isinstance(rt.store, RunWatch):
                # Nothing announces changes made elsewhere: look again at
                # least every reconcile interval.
                wake_at = min(wake_at, rt.clock.now() + rt.options.reconcile_interval)
            with trio.move_on_at(
                rt.clock.to_trio(wake_at) if wake_at < math.inf else math.inf
            ) as waited:
                await changed.wait()
            reached = wake_at if waited.cancelled_caught else -math.inf


@runtime_checkable
class ScheduleRegistry(Protocol):
    """An app that declares schedules (`App` does)."""

    @property
    def schedules(self) -> list[ScheduleSpec]: ...


async def _declare(rt: Runtime, *, quiet: bool) -> bool:
    """Write the schedules the app declares (those unchanged cost a read)."""
    try:
        for spec in rt.app.schedules if isinstance(rt.app, ScheduleRegistry) else ():
            await put_spec(rt.store, spec, rt.clock.now(), rt.engine_id)
    except StoreError as exc:
        if not quiet:
            raise
        logger.warning("could not declare the app's schedules yet: %s", exc)
        return False
    return True


async def _watch_end(
    rt: Runtime,
    run_id: str,
    watching: dict[str, trio.CancelScope],
    task_status: trio.TaskStatus[trio.CancelScope],
) -> None:
    """Tell the ticker when ``run_id`` ends: a buffered tick waits for it."""
    with trio.CancelScope() as scope:
        task_status.started(scope)
        read = partial(read_run, rt.store, run_id, None)
        # A run gone, or a store away: either way the ticker reads again.
        with contextlib.suppress(RunNotFoundError, StoreError):
            poll = read_interval(rt.store, rt.options.result_poll_interval)
            await await_end(rt.store, rt.endings, poll, run_id, read)
        if watching.get(run_id) is scope:
            del watching[run_id]
        rt.features.part(ScheduleTicker).changed()


async def tick_due(rt: Runtime, reached: float = -math.inf) -> tuple[float, set[str]]:
    """One pass: handle every schedule's due ticks (those due at
    ``reached`` too, whatever the clock says). Returns when the next tick
    is due, and the runs buffered ticks wait for."""
    soonest, waits = math.inf, set()
    found = await read_schedules(rt.store)
    known = rt.features.part(ScheduleTicker).known
    for name in [name for name in known if name not in found]:
        del known[name]
    for name, (spec_value, state_value) in found.items():
        versions = (spec_value.version, 0 if state_value is None else state_value.version)
        cached = known.get(name)
        if cached is not None and cached[:2] == versions and cached[2] > _now(rt, reached):
            soonest = min(soonest, cached[2])
            continue
        try:
            spec = ScheduleSpec.from_json(spec_value.value)
        except (ValueError, TypeError, ScheduleError) as exc:
            logger.warning("schedule %r cannot be read (%s); it is left alone", name, exc)
            continue
        wake_at, wait_for, state_version = await _advance(rt, spec, state_value, reached)
        soonest = min(soonest, wake_at)
        if wait_for is not None:
            waits.add(wait_for)
            known.pop(name, None)
        else:
            known[name] = (spec_value.version, state_version, wake_at)
    return soonest, waits


async def _advance(
    rt: Runtime, spec: ScheduleSpec, state_value: StoredValue | None, reached: float
) -> tuple[float, str | None, int]:
    """Handle ``spec``'s due ticks, one compare-and-swap each, re-reading
    its state on a conflict. Returns when its next tick is due, the run a
    buffered tick waits for, and the version of its state."""
    store, name = rt.store, spec.name
    while True:
        now = _now(rt, reached)
        if state_value is None:
            # A spec whose state is missing: its first tick is after now.
            fresh = ScheduleState(cursor=now).to_json()
            await store.apply(
                [PutValue(STATE_SCOPE, name, fresh, now, expect_version=0, strict=False)]
            )
            state_value = await store.get_value(STATE_SCOPE, name)
            if state_value is None:
                return math.inf, None, 0
            continue
        state = ScheduleState.from_json(state_value.value)
        if state.paused:
            return math.inf, None, state_value.version
        step = await _next_step(rt, spec, state, now)
        if step.state is None:
            return step.wake_at, step.wait_for, state_value.version
        ops: list[Op] = []
        run: Run | None = None
        admission: list[Op] = []
        if step.tick is not None:
            run = _tick_run(rt, spec, step.tick, now)
            ops.append(CreateRun(run))
            # Its admission (a concurrency key, a rate limit) in the same
            # batch, so it stands in line from its creation.
            admission = _admission_ops(rt, run, now)
            ops.extend(admission)
            ops.extend(announce(store, rt.engine_id, "wake", [] if _serves(rt, run) else [run]))
        text = step.state.to_json()
        ops.append(PutValue(STATE_SCOPE, name, text, now, expect_version=state_value.version))
        try:
            results = await store.apply(ops)
        except WriteConflict:
            # Another engine handled the tick (or a call changed the
            # schedule): read its state again and go on from there.
            state_value = await store.get_value(STATE_SCOPE, name)
            if state_value is None:
                return math.inf, None, 0
            continue
        if run is not None:
            stored, created = results[0]
            if created:
                _started(rt, stored, bool(admission))
        state_value = attrs.evolve(state_value, value=text, version=results[-1], updated_at=now)


async def _next_step(rt: Runtime, spec: ScheduleSpec, state: ScheduleState, now: float) -> _Step:
    """What ``spec`` in ``state`` needs at ``now``: at most one tick
    handled (with the missed ones before it)."""
    open_run: bool | None = None
    if state.buffered is not None:
        open_run = await _is_open(rt, state.last_run_id)
        if not open_run:
            # The run the buffered tick waited for ended: start it now.
            return _Step(state=_started_state(spec, state, state.buffered), tick=state.buffered)
    cursor, missed = state.cursor, 0
    ticks = spec.ticks_after(cursor)
    tick = next(ticks)
    while spec.due_at(tick) <= now and now - spec.due_at(tick) > spec.catchup_window:
        # Older than the catch-up window: skipped, and counted as missed.
        cursor, missed = tick, missed + 1
        if missed == _MISSED_PER_WRITE:
            return _Step(state=attrs.evolve(state, cursor=cursor, missed=state.missed + missed))
        tick = next(ticks)
    base = attrs.evolve(state, cursor=cursor, missed=state.missed + missed)
    if spec.due_at(tick) > now:
        return _Step(
            state=base if missed else None,
            wake_at=spec.due_at(tick),
            wait_for=state.last_run_id if state.buffered is not None else None,
        )
    if spec.overlap != "allow" and open_run is None:
        open_run = await _is_open(rt, state.last_run_id)
    if spec.overlap == "allow" or not open_run:
        return _Step(state=_started_state(spec, base, tick), tick=tick)
    if spec.overlap == "buffer_one" and base.buffered is None:
        return _Step(state=attrs.evolve(base, cursor=tick, buffered=tick))
    return _Step(state=attrs.evolve(base, cursor=tick, skipped=base.skipped + 1))


def _now(rt: Runtime, reached: float) -> float:
    return max(rt.clock.now(), reached)


def _started_state(spec: ScheduleSpec, state: ScheduleState, tick: float) -> ScheduleState:
    buffered = None if state.buffered == tick else state.buffered
    return attrs.evolve(
        state,
        cursor=max(state.cursor, tick),
        buffered=buffered,
        last_tick=tick,
        last_run_id=tick_run_id(spec.name, tick),
        started=state.started + 1,
    )


async def _is_open(rt: Runtime, run_id: str | None) -> bool:
    if run_id is None:
        return False
    run = await rt.store.get_run(run_id)
    return run is not None and not run.done


def _serves(rt: Runtime, run: Run) -> bool:
    return serves(rt.app, run.workflow, run.version)


def _tick_run(rt: Runtime, spec: ScheduleSpec, tick: float, now: float) -> Run:
    """The run of ``tick``: leased to this engine if it runs the workflow
    (its first turn needs no write of its own), else pending for one that
    does."""
    run = schedule_run(spec, tick_run_id(spec.name, tick), run_version(rt.app, spec.workflow), now)
    if not _serves(rt, run):
        return run
    return attrs.evolve(
        run, status="running", lease_owner=rt.engine_id, lease_expiry=now + rt.options.lease_ttl
    )


def _admission_ops(rt: Runtime, run: Run, now: float) -> list[Op]:
    """The writes that put a tick's run in line for admission, if its
    workflow (as this engine's app has it) has controls; without them, its
    first turn asks (as for a run a client started by name)."""
    if not any(wf.name == run.workflow for wf in rt.app.workflows):
        return []
    try:
        controls = start_controls(rt.app.get_workflow(run.workflow), run.input)
    except InvalidArgumentsError:
        return []  # its first turn fails it, as for any start
    return [] if controls is None else creation_ops(run.id, controls, now)


def _started(rt: Runtime, run: Run, admitted: bool) -> None:
    rt.telemetry.emit_run("run.started", run)
    if run.lease_owner == rt.engine_id:
        # A run created with its admission reads it in its first turn.
        initial = None if admitted else TurnDraft(run=run, checkpoints={})
        rt.scheduler.wake(run.id, initial=initial)
