"""What a schedule is, apart from any store: its checked spec, its ticking
state, the ticks its cron expression makes in its timezone, and the run id
and jitter of each tick.

Ticks are instants (durable times, seconds since the Unix epoch) computed
by croniter in the schedule's timezone, one after another: the tick after
``t`` is croniter's next time after ``t`` read in that timezone. Across a
DST change this is croniter's own behaviour, which docs/schedules.md
describes: a local time that does not exist (the spring gap) fires at the
first instant after the gap, and one that happens twice (the autumn
overlap) fires at both instants. Each tick has a distinct UTC instant, so
each has a distinct run id.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final, Literal, final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs
from croniter import croniter

from ..._base import _serde
from ..._base._bounds import is_finite
from ..._base._exceptions import ScheduleError, UsageError
from ..._kernel._definitions import Workflow

Overlap = Literal["skip", "buffer_one", "allow"]
OVERLAPS: Final = ("skip", "buffer_one", "allow")

DEFAULT_CRON: Final = "*/5 * * * *"
DEFAULT_CATCHUP_WINDOW: Final = 60.0
"""Seconds a tick may be late and still start (see docs/schedules.md)."""

SPEC_SCOPE: Final = "schedule"
STATE_SCOPE: Final = "schedule-state"
SCHEDULE_TAG_PREFIX: Final = "schedule:"

_NAME: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,199}$")


def _name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ScheduleError(
            f"schedule {attribute.name} {value!r} is invalid: use letters, digits, '_', '.', '-'"
            " (starting with a letter or '_', at most 200 characters)"
        )


def _cron(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not croniter.is_valid(value):
        raise ScheduleError(f"invalid cron expression: {value!r}")


def _timezone(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ScheduleError(f"timezone must be an IANA name such as 'Europe/Berlin', not {value!r}")
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown timezone: {value!r}") from exc


def _overlap(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in OVERLAPS:
        raise ScheduleError(f"overlap must be one of {', '.join(OVERLAPS)}, not {value!r}")


def _seconds(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not is_finite(value)
        or value < 0
    ):
        raise ScheduleError(
            f"{attribute.name} must be a finite number of seconds >= 0, not {value!r}"
        )


@final
@attrs.define(frozen=True, kw_only=True)
class ScheduleSpec:
    """A schedule as declared: what the store keeps under scope
    ``"schedule"``, key ``name`` (its runtime state is apart, in
    `ScheduleState`, so declaring it again keeps its counters and pause).

    Every field is checked when it is made: a bad one raises
    `ScheduleError`, before anything is written.
    """

    name: str = attrs.field(validator=_name)
    workflow: str = attrs.field(validator=_name)
    cron: str = attrs.field(default=DEFAULT_CRON, validator=_cron)
    timezone: str = attrs.field(default="UTC", validator=_timezone)
    # The positional inputs as JSON text of a list, checked once.
    input: str = "[]"
    overlap: Overlap = attrs.field(default="skip", validator=_overlap)
    catchup_window: float = attrs.field(default=DEFAULT_CATCHUP_WINDOW, validator=_seconds)
    jitter: float = attrs.field(default=0.0, validator=_seconds)

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScheduleSpec:
        return cls(**json.loads(text))

    def next_tick(self, after: float) -> float:
        """The first tick strictly after the durable time ``after``."""
        zone = ZoneInfo(self.timezone)
        start = datetime.fromtimestamp(after, zone)
        return float(croniter(self.cron, start).get_next(float))

    def ticks_after(self, after: float) -> Iterator[float]:
        """The ticks strictly after ``after``, in order (one croniter for
        them all: the same ticks as `next_tick` one by one)."""
        ticks = croniter(self.cron, datetime.fromtimestamp(after, ZoneInfo(self.timezone)))
        while True:
            yield float(ticks.get_next(float))

    def jitter_of(self, tick: float) -> float:
        """The delay of ``tick``'s start: derived from the schedule's name
        and the tick alone, so every engine waits the same, in
        ``[0, jitter)``."""
        if not self.jitter:
            return 0.0
        digest = hashlib.sha256(f"{self.name}@{tick_stamp(tick)}".encode()).digest()
        return self.jitter * (int.from_bytes(digest[:8], "big") / 2**64)

    def due_at(self, tick: float) -> float:
        """When ``tick``'s run starts: the tick plus its jitter."""
        return tick + self.jitter_of(tick)


def make_spec(
    name: str,
    workflow: Workflow[..., Any] | str,
    *,
    cron: str,
    timezone: str,
    args: tuple[Any, ...] | list[Any],
    overlap: Overlap,
    catchup_window: float,
    jitter: float,
    check: Workflow[..., Any] | None = None,
) -> ScheduleSpec:
    """A checked spec; ``args`` are checked against ``check`` (or
    ``workflow`` if it is a `Workflow`), else serialized as they are.

    Raises:
      ScheduleError: Any part is invalid.
    """
    # The name first: what the error says is about the schedule's name.
    _name(None, attrs.fields(ScheduleSpec).name, name)
    target = check if check is not None else workflow if isinstance(workflow, Workflow) else None
    wf_name = workflow.name if isinstance(workflow, Workflow) else workflow
    if not isinstance(args, tuple | list):
        raise ScheduleError(f"args must be a tuple or list of inputs, not {args!r}")
    try:
        text = (
            _serde.dumps(list(args))
            if target is None
            else _serde.check_workflow_args(target, tuple(args))
        )
    except UsageError as exc:
        # Bad inputs (InvalidArgumentsError, SerializationError) are the
        # schedule's error: it is refused before anything is written.
        raise ScheduleError(f"schedule {name!r}: {exc}") from exc
    return ScheduleSpec(
        name=name,
        workflow=wf_name,
        cron=cron,
        timezone=timezone,
        input=text,
        overlap=overlap,
        catchup_window=catchup_window,
        jitter=jitter,
    )


@final
@attrs.define(frozen=True, kw_only=True)
class ScheduleState:
    """A schedule's ticking state: what the store keeps under scope
    ``"schedule-state"``, changed only by compare-and-swap.

    ``cursor`` is the last tick handled (started, skipped or missed), or the
    moment the schedule was made or resumed: the next tick is the first
    after it.
    """

    cursor: float
    paused: bool = False
    last_tick: float | None = None
    last_run_id: str | None = None
    buffered: float | None = None
    started: int = 0
    skipped: int = 0
    missed: int = 0
    triggered: int = 0

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ScheduleState:
        return cls(**json.loads(text))


@final
@attrs.define(frozen=True, kw_only=True)
class ScheduleInfo:
    """A schedule as `Engine.get_schedule` and `Engine.list_schedules` (and
    the client's) report it. Times are durable times (seconds since the
    Unix epoch).

    Attributes:
      name: The schedule's name.
      workflow: The name of the workflow each tick starts.
      cron: Its cron expression.
      timezone: The IANA timezone the cron expression is read in.
      overlap: ``"skip"``, ``"buffer_one"`` or ``"allow"``.
      catchup_window: Seconds a tick may be late and still start.
      jitter: The bound of each tick's deterministic delay, in seconds.
      paused: Whether it is paused.
      next_tick: The next tick it will handle (None while paused).
      last_tick: The last tick whose run it started, or None.
      last_run_id: The id of the last run it started (by a tick or a
        trigger), or None.
      started: How many ticks started a run.
      skipped: How many ticks were skipped because a run was still open.
      missed: How many ticks were older than the catch-up window when an
        engine got to them, and so were skipped.
      triggered: How many runs `trigger_schedule` started.
      buffered: The tick waiting for the open run to end (``buffer_one``),
        or None.
    """

    name: str
    workflow: str
    cron: str
    timezone: str
    overlap: Overlap
    catchup_window: float
    jitter: float
    paused: bool
    next_tick: float | None
    last_tick: float | None
    last_run_id: str | None
    started: int
    skipped: int
    missed: int
    triggered: int
    buffered: float | None


def info_of(spec: ScheduleSpec, state: ScheduleState) -> ScheduleInfo:
    """What a schedule's spec and state say, for people."""
    return ScheduleInfo(
        name=spec.name,
        workflow=spec.workflow,
        cron=spec.cron,
        timezone=spec.timezone,
        overlap=spec.overlap,
        catchup_window=spec.catchup_window,
        jitter=spec.jitter,
        paused=state.paused,
        next_tick=None if state.paused else spec.next_tick(state.cursor),
        last_tick=state.last_tick,
        last_run_id=state.last_run_id,
        started=state.started,
        skipped=state.skipped,
        missed=state.missed,
        triggered=state.triggered,
        buffered=state.buffered,
    )


def tick_stamp(tick: float) -> str:
    """A tick as UTC ISO text, to the second: ``2026-03-29T01:30:00Z``."""
    return datetime.fromtimestamp(tick, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def tick_run_id(name: str, tick: float) -> str:
    """The id of the run ``tick`` of schedule ``name`` starts: the same on
    every engine, so the tick's run is created once fleet-wide."""
    return f"{name}@{tick_stamp(tick)}"


def trigger_run_id(name: str, now: float, count: int) -> str:
    """The id of the run the ``count``-th `trigger_schedule` starts at
    ``now`` (never a tick's id)."""
    moment = datetime.fromtimestamp(now, UTC)
    stamp = f"{moment.strftime('%Y-%m-%dT%H:%M:%S')}.{moment.microsecond // 1000:03d}Z"
    return f"{name}@trigger-{count}-{stamp}"
