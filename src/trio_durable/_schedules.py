"""Schedules in the store, and the calls that change them at run time.

A schedule lives in two keyed values of the store, never in one process:
its spec (scope ``"schedule"``, what was declared) and its ticking state
(scope ``"schedule-state"``: the pause, the cursor, the counters). Every
change is a compare-and-swap on the version read, retried on a conflict,
with an announcement (kind ``"schedules"``) in the same batch, so the
engines sharing the store look at their schedules again at once.

`ManagesSchedules` gives `Engine` and `Client` the same calls
(``create_schedule``, ``pause_schedule``, ...); the engines' ticker
(`_schedule_ticker`) starts the runs of the ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ._definitions import Workflow
from ._exceptions import ScheduleError, ScheduleNotFoundError
from ._handle import RunHandle
from ._index_text import refuse_nul
from ._records import DEFAULT_NAMESPACE, LATEST_VERSION, Run, StoredValue
from ._schedule_spec import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_CRON,
    SCHEDULE_TAG_PREFIX,
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
from ._stores._base import RunWatch, WriteConflict
from ._stores._ops import Announce, CreateRun, Op, PutValue

if TYPE_CHECKING:
    from ._app import App
    from ._clock import Clock
    from ._stores._base import Store

_PAGE: Final = 500
"""Keyed values read per page when listing schedules."""


def announce_change(store: Store, origin: str, name: str) -> list[Op]:
    """The announcement that schedule ``name`` changed (none for a store
    that is not a `RunWatch`: its engines look again at the next tick or
    rescan)."""
    if not isinstance(store, RunWatch):
        return []
    return [Announce(run_id=name, kind="schedules", origin=origin)]


async def read_schedules(store: Store) -> dict[str, tuple[StoredValue, StoredValue | None]]:
    """Every schedule's spec and state, by name (a state without a spec,
    left by a delete racing a tick, is left out)."""
    specs = await _read_scope(store, SPEC_SCOPE)
    states = await _read_scope(store, STATE_SCOPE)
    return {name: (spec, states.get(name)) for name, spec in specs.items()}


async def _read_scope(store: Store, scope: str) -> dict[str, StoredValue]:
    found: dict[str, StoredValue] = {}
    after: str | None = None
    while True:
        page = await store.list_values(scope, after=after, limit=_PAGE)
        found.update((value.key, value) for value in page)
        if len(page) < _PAGE:
            return found
        after = page[-1].key


async def put_spec(store: Store, spec: ScheduleSpec, now: float, origin: str) -> bool:
    """Write ``spec`` (unless it is stored as it is), and a fresh state for
    a new schedule: its first tick is the first after ``now``. Returns
    whether anything was written."""
    text = spec.to_json()
    while True:
        stored = await store.get_value(SPEC_SCOPE, spec.name)
        state = await store.get_value(STATE_SCOPE, spec.name)
        if stored is not None and stored.value == text and state is not None:
            return False
        ops: list[Op] = []
        if stored is None or stored.value != text:
            expect = 0 if stored is None else stored.version
            ops.append(PutValue(SPEC_SCOPE, spec.name, text, now, expect_version=expect))
        if state is None:
            # Not strict: a state another writer made meanwhile is kept.
            fresh = ScheduleState(cursor=now).to_json()
            ops.append(PutValue(STATE_SCOPE, spec.name, fresh, now, expect_version=0, strict=False))
        try:
            await store.apply([*ops, *announce_change(store, origin, spec.name)])
        except WriteConflict:
            continue
        return True


async def change_state(
    store: Store,
    name: str,
    now: float,
    origin: str,
    change: Callable[[ScheduleSpec, ScheduleState], ScheduleState | None],
    also: Callable[[ScheduleSpec, ScheduleState], Sequence[Op]] | None = None,
) -> tuple[ScheduleSpec, ScheduleState, list[Any]]:
    """Read schedule ``name`` and write ``change(spec, state)`` as its new
    state (None: write nothing), retried on a conflict; ``also(spec, new state)``
    gives operations to write in the same batch. Returns the spec, the
    state written and the results of ``also``'s operations.

    Raises:
      ScheduleNotFoundError: No schedule has this name.
    """
    while True:
        spec_value = await store.get_value(SPEC_SCOPE, name)
        state_value = await store.get_value(STATE_SCOPE, name)
        if spec_value is None:
            raise ScheduleNotFoundError(f"no schedule {name!r}")
        spec = ScheduleSpec.from_json(spec_value.value)
        state = (
            ScheduleState(cursor=now)
            if state_value is None
            else ScheduleState.from_json(state_value.value)
        )
        new = change(spec, state)
        if new is None:
            return spec, state, []
        extra: list[Op] = [] if also is None else list(also(spec, new))
        expect = 0 if state_value is None else state_value.version
        ops: list[Op] = [
            *extra,
            PutValue(STATE_SCOPE, name, new.to_json(), now, expect_version=expect),
            *announce_change(store, origin, name),
        ]
        try:
            results = await store.apply(ops)
        except WriteConflict:
            continue
        return spec, new, results[: len(extra)]


def schedule_run(spec: ScheduleSpec, run_id: str, version: str, now: float) -> Run:
    """The run a tick (or a trigger) of ``spec`` starts: pending and leased
    to no engine, tagged with the schedule's name."""
    return Run(
        id=run_id,
        workflow=spec.workflow,
        version=version,
        namespace=DEFAULT_NAMESPACE,
        status="pending",
        input=spec.input,
        tags=(f"{SCHEDULE_TAG_PREFIX}{spec.name}",),
        created_at=now,
        updated_at=now,
    )


def run_version(app: App | None, workflow: str) -> str:
    """The version a scheduled run of ``workflow`` runs: the one registered
    last in ``app``, or, if ``app`` lacks it, the one registered last on
    the engine that first runs it."""
    if app is not None:
        known = [wf for wf in app.workflows if wf.name == workflow]
        if known:
            return app.get_workflow(workflow).version
    return LATEST_VERSION


def _name_of(name: object) -> str:
    if not isinstance(name, str):
        raise ScheduleError(f"a schedule's name must be a string, not {name!r}")
    refuse_nul("a schedule's name", name, ScheduleError)
    return name


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
            _name_of(name),
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

        spec, state, _ = await change_state(self.store, _name_of(name), now, self._origin(), resume)
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
            self.store, _name_of(name), now, self._origin(), trigger, run_ops
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
        name = _name_of(name)
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
        name = _name_of(name)
        spec = await self.store.get_value(SPEC_SCOPE, name)
        if spec is None:
            raise ScheduleNotFoundError(f"no schedule {name!r}")
        state = await self.store.get_value(STATE_SCOPE, name)
        return _info(spec, state, self.clock.now())

    async def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule in the store, by name."""
        self._check_live()
        now = self.clock.now()
        found = await read_schedules(self.store)
        return [_info(spec, state, now) for _, (spec, state) in sorted(found.items())]


def _info(spec: StoredValue, state: StoredValue | None, now: float) -> ScheduleInfo:
    return info_of(
        ScheduleSpec.from_json(spec.value),
        ScheduleState(cursor=now) if state is None else ScheduleState.from_json(state.value),
    )
