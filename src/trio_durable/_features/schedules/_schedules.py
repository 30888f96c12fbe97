"""Schedules in the store, and the calls that change them at run time.

A schedule lives in two keyed values of the store, never in one process:
its spec (scope ``"schedule"``, what was declared) and its ticking state
(scope ``"schedule-state"``: the pause, the cursor, the counters). Every
change is a compare-and-swap on the version read, retried on a conflict,
with an announcement (kind ``"schedules"``) in the same batch, so the
engines sharing the store look at their schedules again at once.

`ManagesSchedules` (`_front_schedules`) gives `Engine` and `Client` the
same calls (``create_schedule``, ``pause_schedule``, ...); the engines'
ticker (`_schedule_ticker`) starts the runs of the ticks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._base._exceptions import ScheduleError, ScheduleNotFoundError
from ..._base._index_text import refuse_nul
from ..._base._records import DEFAULT_NAMESPACE, LATEST_VERSION, Run, StoredValue
from ..._stores._base import RunWatch, WriteConflict
from ..._stores._ops import Announce, Op, PutValue
from ._schedule_spec import (
    SCHEDULE_TAG_PREFIX,
    SPEC_SCOPE,
    STATE_SCOPE,
    ScheduleInfo,
    ScheduleSpec,
    ScheduleState,
    info_of,
)

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry
    from ..._stores._base import Store

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


def run_version(app: Registry | None, workflow: str) -> str:
    """The version a scheduled run of ``workflow`` runs: the one registered
    last in ``app``, or, if ``app`` lacks it, the one registered last on
    the engine that first runs it."""
    if app is not None:
        known = [wf for wf in app.workflows if wf.name == workflow]
        if known:
            return app.get_workflow(workflow).version
    return LATEST_VERSION


def schedule_name(name: object) -> str:
    if not isinstance(name, str):
        raise ScheduleError(f"a schedule's name must be a string, not {name!r}")
    refuse_nul("a schedule's name", name, ScheduleError)
    return name


def schedule_info(spec: StoredValue, state: StoredValue | None, now: float) -> ScheduleInfo:
    return info_of(
        ScheduleSpec.from_json(spec.value),
        ScheduleState(cursor=now) if state is None else ScheduleState.from_json(state.value),
    )
