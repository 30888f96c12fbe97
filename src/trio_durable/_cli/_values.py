"""What the commands read from the command line: JSON inputs and payloads,
ages (``7d``), points in time (``2026-12-01``, ``2h``), seconds and whole
numbers within what a store keeps (seqs, offsets).

Each is a click parameter type, so a malformed or out-of-range value is a
usage error (exit status 2) before anything opens the store."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import click

from .._base._bounds import MAX_INTEGER, is_finite, shown
from .._base._exceptions import UsageError
from .._kernel._views import Retention
from .._payloads._stored_payloads import payload_for_people

_AGE: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhdw]?)")
_UNITS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


class JSONValue(click.ParamType[Any]):
    """A JSON document (``--payload``)."""

    name = "JSON"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            self.fail(f"{value!r} is not JSON ({exc})", param, ctx)


class JSONArguments(JSONValue):
    """The positional inputs of a workflow as one JSON array (``--input``)."""

    name = "JSON-ARRAY"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        decoded = super().convert(value, param, ctx)
        if not isinstance(decoded, list):
            self.fail(
                f"{value!r} is not a JSON array: give the workflow's inputs in order,"
                """ like '["order-1", 3]' (or '[]' for none)""",
                param,
                ctx,
            )
        return tuple(decoded)


class Age(click.ParamType[timedelta]):
    """A duration: seconds, or a number with ``s``, ``m``, ``h``, ``d`` or
    ``w`` (``90s``, ``15m``, ``12h``, ``7d``, ``2w``)."""

    name = "AGE"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _AGE.fullmatch(str(value).strip().lower())
        if match is None:
            self.fail(f"{value!r} is not an age like 90s, 15m, 12h, 7d or 2w", param, ctx)
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
        try:
            return timedelta(seconds=seconds)
        except OverflowError:
            self.fail(
                f"{shown(value)} is longer than any age (at most {timedelta.max.days} days)",
                param,
                ctx,
            )


def whole(low: int, high: int = MAX_INTEGER) -> click.IntRange:
    """A whole number from ``low`` to ``high`` (by default, the largest a
    store keeps: a seq, an offset)."""
    return click.IntRange(min=low, max=high)


class Seconds(click.ParamType[float]):
    """A finite, positive number of seconds."""

    name = "SECONDS"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, float | int) and not isinstance(value, bool):
            number: float = value
        else:
            try:
                number = float(str(value))
            except ValueError:
                self.fail(f"{shown(value)} is not a number of seconds", param, ctx)
        if not is_finite(number) or number <= 0:
            self.fail(f"{shown(value)} is not a positive, finite number of seconds", param, ctx)
        return float(number)


class PointInTime(click.ParamType[datetime | timedelta]):
    """A point in time: an ISO 8601 date or time (UTC unless it says
    otherwise), seconds since the epoch, or an age (``2h``: two hours ago),
    kept as a `timedelta` for `at` to place on the client's clock."""

    name = "WHEN"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime | timedelta:
        if isinstance(value, datetime | timedelta):
            return value
        text = str(value).strip()
        if _AGE.fullmatch(text.lower()) and not text.replace(".", "", 1).isdigit():
            return Age().convert(text, param, ctx)
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (ValueError, OverflowError, OSError):
            pass
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            self.fail(
                f"{value!r} is not a time: give an ISO 8601 date or time (UTC unless it has"
                " an offset), seconds since the epoch, or an age like 2h (that long ago)",
                param,
                ctx,
            )
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def at(point: datetime | timedelta | None, now: float) -> datetime | float | None:
    """A `PointInTime` as a filter takes it: an age counts back from
    ``now`` (the client's durable time)."""
    if isinstance(point, timedelta):
        return now - point.total_seconds()
    return point


def when(durable_time: float | None) -> str | None:
    """A durable time (seconds since the epoch) as people read it, in UTC."""
    if durable_time is None:
        return None
    try:
        return datetime.fromtimestamp(durable_time, UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, ValueError, OSError):
        # Past the calendar's years (a sleep of 1e300 s).
        return f"{durable_time:.6g} s after the epoch"


def decoded(text: str | None) -> Any:
    """A stored JSON text (a run's input or output) as its value, or what
    its mark says of it if it was read without its codec or blob store."""
    return payload_for_people(text)


_RETENTION_AGES: Final = (
    "completed",
    "failed",
    "cancelled",
    "terminated",
    "dead",
    "events",
    "interval",
)
_FOREVER: Final = ("forever", "keep", "none")


class RetentionSpec(click.ParamType[Retention]):
    """``--retention completed=7d,failed=30d,...``: a `Retention` of the
    given names (``completed``, ``failed``, ``cancelled``, ``terminated``, ``dead``,
    ``events``: an age, or ``forever``; ``interval``: an age; ``batch``: a
    whole number), the rest as `Retention`'s defaults."""

    name = "NAME=AGE,..."

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Retention:
        if isinstance(value, Retention):
            return value
        given: dict[str, Any] = {}
        for part in str(value).split(","):
            name, equals, text = (piece.strip() for piece in part.partition("="))
            name = name.lower()
            if not equals or not name or not text:
                self.fail(f"give NAME=AGE pairs separated by commas, not {shown(part)}", param, ctx)
            if name in given:
                self.fail(f"{name} is given twice", param, ctx)
            if name == "batch":
                if not text.isdigit() or int(text) < 1:
                    self.fail(f"batch must be a whole number of at least 1, not {shown(text)}")
                given[name] = int(text)
            elif name not in _RETENTION_AGES:
                known = ", ".join((*_RETENTION_AGES, "batch"))
                self.fail(f"{shown(name)} is not one of {known}", param, ctx)
            elif text.lower() in _FOREVER and name != "interval":
                given[name] = None
            else:
                given[name] = Age().convert(text, param, ctx).total_seconds()
        try:
            return Retention(**given)
        except UsageError as exc:
            self.fail(str(exc), param, ctx)
