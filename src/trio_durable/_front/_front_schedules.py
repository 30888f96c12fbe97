"""`ManagesSchedules`: the schedule calls `Engine` and `Client` share
(``create_schedule``, ``pause_schedule``, ...); how schedules are kept in
the store is `_schedules`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._base._exceptions import ScheduleNotFoundError
from .._base._records import Run
from .._features.schedules._schedule_spec import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_CRON,
    SPEC_SCOPE,
    STATE_SCOPE,
    Overlap,
    ScheduleInfo,
    ScheduleSpec,
    ScheduleState,
    info_of,
    make_spec,
    trigger_run_id,
)
from .._features.schedules._schedules import (
    announce_change,
    change_state,
    put_spec,
    read_schedules,
    run_version,
    schedule_info,
    schedule_name,
    schedule_run,
)
from .._kernel._definitions import Workflow
from .._stores._base import WriteConflict
from .._stores._ops import CreateRun, Op, PutValue
from ._front_core import FrontPart
from ._handle import RunHandle

if TYPE_CHECKING:
    pass


class ManagesSchedules(FrontPart):
    """The schedule calls `Engine` and `Client` share (docs/schedules.md)."""

    async def create_schedule(
        self,
        name: str,
        workflow: Workflow[..., Any] | str,
        *,
        cron: str = DEFAULT_CRON,
        timezone: str = "UTC",
        args: tuple[Any, ...] | list[Any] = (),
        overlap: Overlap = "skip",
        catchup_window: float = DEFAULT_CATCHUP_WINDOW,
        jitter: float = 0.0,
    ) -> ScheduleInfo:
        """Create the schedule ``name``, or change it if it exists (its
        state, pause and counters, is kept). Its first tick is the first
        after now. Options are as `App.schedule` takes them.

        Returns:
          The schedule as stored.

        Raises:
          ScheduleError: An option is invalid (nothing is written), or
            ``args`` do not fit the workflow (if the app registers it).
        """
        self._core.check_open()
        check = None
        app = self._core.app
        wf_name = workflow.name if isinstance(workflow, Workflow) else workflow
        if app is not None and any(wf.name == wf_name for wf in app.workflows):
            check = app.get_workflow(wf_name)
        spec = make_spec(
            name,
            workflow,
            cron=cron,
            timezone=timezone,
            args=args,
            overlap=overlap,
            catchup_window=catchup_window,
            jitter=jitter,
            check=check,
        )
        await put_spec(self._core.store, spec, self._core.clock.now(), self._core.origin)
        self._core.waker.changed("schedules")
        return await self.get_schedule(name)

    async def pause_schedule(self, name: str) -> ScheduleInfo:
        """Pause the schedule: no tick starts a run until it is resumed
        (ticks meanwhile are neither started nor counted). Pausing a paused
        schedule changes nothing.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._core.check_open()
        spec, state, _ = await change_state(
            self._core.store,
            schedule_name(name),
            self._core.clock.now(),
            self._core.origin,
            lambda spec, state: None if state.paused else attrs.evolve(state, paused=True),
        )
        self._core.waker.changed("schedules")
        return info_of(spec, state)

    async def resume_schedule(self, name: str) -> ScheduleInfo:
        """Resume a paused schedule: its next tick is the first after now.
        Resuming a schedule that is not paused changes nothing.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._core.check_open()
        now = self._core.clock.now()

        def resume(spec: ScheduleSpec, state: ScheduleState) -> ScheduleState | None:
            if not state.paused:
                return None
            return attrs.evolve(state, paused=False, cursor=max(state.cursor, now))

        spec, state, _ = await change_state(
            self._core.store, schedule_name(name), now, self._core.origin, resume
        )
        self._core.waker.changed("schedules")
        return info_of(spec, state)

    async def trigger_schedule(self, name: str) -> RunHandle[Any]:
        """Start one run of the schedule's workflow now, paused or not,
        whatever its overlap policy says (its id is
        ``<name>@trigger-<n>-<UTC time to the millisecond>``, ``n`` counting
        the schedule's triggers). Ticks then count it as the schedule's
        last run.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._core.check_open()
        now = self._core.clock.now()
        made: list[Run] = []

        def run_ops(spec: ScheduleSpec, state: ScheduleState) -> list[Op]:
            assert state.last_run_id is not None
            version = run_version(self._core.app, spec.workflow)
            made[:] = [schedule_run(spec, state.last_run_id, version, now)]
            return [CreateRun(made[0]), *self._core.waker.wake_ops(made)]

        def trigger(spec: ScheduleSpec, state: ScheduleState) -> ScheduleState:
            # Numbered, so triggers at one instant (a mock clock's) start
            # a run each; the number is the state's, swapped in with it.
            count = state.triggered + 1
            run_id = trigger_run_id(spec.name, now, count)
            return attrs.evolve(state, last_run_id=run_id, triggered=count)

        _, _, results = await change_state(
            self._core.store, schedule_name(name), now, self._core.origin, trigger, run_ops
        )
        stored, created = results[0]
        if created:
            self._core.waker.woke(stored)
        self._core.waker.changed("schedules")
        return RunHandle.of(stored, self)

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule and its state; runs it started are kept. A
        schedule declared with `App.schedule` is declared again when an
        engine of that app opens.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._core.check_open()
        name = schedule_name(name)
        now = self._core.clock.now()
        while True:
            spec = await self._core.store.get_value(SPEC_SCOPE, name)
            if spec is None:
                raise ScheduleNotFoundError(f"no schedule {name!r}")
            ops: list[Op] = [
                PutValue(SPEC_SCOPE, name, None, now, expect_version=spec.version),
                PutValue(STATE_SCOPE, name, None, now),
                *announce_change(self._core.store, self._core.origin, name),
            ]
            try:
                await self._core.store.apply(ops)
            except WriteConflict:
                continue
            break
        self._core.waker.changed("schedules")

    async def get_schedule(self, name: str) -> ScheduleInfo:
        """The schedule as stored now.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._core.check_open()
        name = schedule_name(name)
        spec = await self._core.store.get_value(SPEC_SCOPE, name)
        if spec is None:
            raise ScheduleNotFoundError(f"no schedule {name!r}")
        state = await self._core.store.get_value(STATE_SCOPE, name)
        return schedule_info(spec, state, self._core.clock.now())

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the store, by name."""
        self._core.check_open()
        now = self._core.clock.now()
        found = await read_schedules(self._core.store)
        return [schedule_info(spec, state, now) for _, (spec, state) in sorted(found.items())]
