"""`ManagesSchedules`: the schedule calls `Engine` and `Client` share
(``create_schedule``, ``pause_schedule``, ...); how schedules are kept in
the store is `_schedules`'s."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from ._definitions import Workflow
from ._exceptions import ScheduleNotFoundError
from ._handle import RunHandle
from ._records import Run
from ._schedule_spec import (
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
from ._schedules import (
    announce_change,
    change_state,
    put_spec,
    read_schedules,
    run_version,
    schedule_info,
    schedule_name,
    schedule_run,
)
from ._stores._base import WriteConflict
from ._stores._ops import CreateRun, Op, PutValue

if TYPE_CHECKING:
    from ._app import App
    from ._clock import Clock
    from ._stores._base import Store


class ManagesSchedules:
    """The schedule calls `Engine` and `Client` share (docs/schedules.md)."""

    store: Store
    clock: Clock

    def _schedules_app(self) -> App | None:
        """The app whose workflows check a schedule's inputs, if any."""
        raise NotImplementedError

    def _check_live(self) -> None:
        raise NotImplementedError

    def _origin(self) -> str:
        raise NotImplementedError

    def _wake_ops(self, runs: Sequence[Run]) -> Sequence[Op]:
        raise NotImplementedError

    def _woke(self, run: Run) -> None:
        """``run`` has something to do (the batch committed)."""

    def _schedules_changed(self) -> None:
        """A schedule changed through this front end."""

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        raise NotImplementedError

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
        self._check_live()
        check = None
        app = self._schedules_app()
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
        await put_spec(self.store, spec, self.clock.now(), self._origin())
        self._schedules_changed()
        return await self.get_schedule(name)

    async def pause_schedule(self, name: str) -> ScheduleInfo:
        """Pause the schedule: no tick starts a run until it is resumed
        (ticks meanwhile are neither started nor counted). Pausing a paused
        schedule changes nothing.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._check_live()
        spec, state, _ = await change_state(
            self.store,
            schedule_name(name),
            self.clock.now(),
            self._origin(),
            lambda spec, state: None if state.paused else attrs.evolve(state, paused=True),
        )
        self._schedules_changed()
        return info_of(spec, state)

    async def resume_schedule(self, name: str) -> ScheduleInfo:
        """Resume a paused schedule: its next tick is the first after now.
        Resuming a schedule that is not paused changes nothing.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._check_live()
        now = self.clock.now()

        def resume(spec: ScheduleSpec, state: ScheduleState) -> ScheduleState | None:
            if not state.paused:
                return None
            return attrs.evolve(state, paused=False, cursor=max(state.cursor, now))

        spec, state, _ = await change_state(
            self.store, schedule_name(name), now, self._origin(), resume
        )
        self._schedules_changed()
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
        self._check_live()
        now = self.clock.now()
        made: list[Run] = []

        def run_ops(spec: ScheduleSpec, state: ScheduleState) -> list[Op]:
            assert state.last_run_id is not None
            version = run_version(self._schedules_app(), spec.workflow)
            made[:] = [schedule_run(spec, state.last_run_id, version, now)]
            return [CreateRun(made[0]), *self._wake_ops(made)]

        def trigger(spec: ScheduleSpec, state: ScheduleState) -> ScheduleState:
            # Numbered, so triggers at one instant (a mock clock's) start
            # a run each; the number is the state's, swapped in with it.
            count = state.triggered + 1
            run_id = trigger_run_id(spec.name, now, count)
            return attrs.evolve(state, last_run_id=run_id, triggered=count)

        _, _, results = await change_state(
            self.store, schedule_name(name), now, self._origin(), trigger, run_ops
        )
        stored, created = results[0]
        if created:
            self._woke(stored)
        self._schedules_changed()
        return RunHandle.of(stored, self)

    async def delete_schedule(self, name: str) -> None:
        """Delete the schedule and its state; runs it started are kept. A
        schedule declared with `App.schedule` is declared again when an
        engine of that app opens.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._check_live()
        name = schedule_name(name)
        now = self.clock.now()
        while True:
            spec = await self.store.get_value(SPEC_SCOPE, name)
            if spec is None:
                raise ScheduleNotFoundError(f"no schedule {name!r}")
            ops: list[Op] = [
                PutValue(SPEC_SCOPE, name, None, now, expect_version=spec.version),
                PutValue(STATE_SCOPE, name, None, now),
                *announce_change(self.store, self._origin(), name),
            ]
            try:
                await self.store.apply(ops)
            except WriteConflict:
                continue
            break
        self._schedules_changed()

    async def get_schedule(self, name: str) -> ScheduleInfo:
        """The schedule as stored now.

        Raises:
          ScheduleNotFoundError: No schedule has this name.
        """
        self._check_live()
        name = schedule_name(name)
        spec = await self.store.get_value(SPEC_SCOPE, name)
        if spec is None:
            raise ScheduleNotFoundError(f"no schedule {name!r}")
        state = await self.store.get_value(STATE_SCOPE, name)
        return schedule_info(spec, state, self.clock.now())

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the store, by name."""
        self._check_live()
        now = self.clock.now()
        found = await read_schedules(self.store)
        return [schedule_info(spec, state, now) for _, (spec, state) in sorted(found.items())]
