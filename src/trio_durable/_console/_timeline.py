"""The run page's chart: a run's operations on a time axis, drawn as
inline SVG by the template from the layout this module computes.

One row per operation of the timeline (a wide fan is one row, its bar cut
into its members' statuses), a bar from when the operation was recorded
(or its first attempt started) to when it settled, or to now while it is
pending, with a step's attempts drawn on it where their times are known;
the run's own bar above them. x runs over `WIDTH` units of the
SVG's view box, which the page stretches to its width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from .._base._records import TERMINAL_STATUSES, Run
from .._kernel._views import AttemptEntry, FanStats, HistoryEntry
from ._render import duration, segments, when

WIDTH: Final = 1000.0
"""The view box's width."""
LABELS: Final = 260.0
"""Where bars start: the labels' column is on its left."""
ROW: Final = 20
"""A row's height."""
AXIS: Final = 24
"""The axis's height, above the rows."""
MAX_ROWS: Final = 200
"""The most operations the chart draws (the table under it lists them all)."""
TICKS: Final = 5


def _bounds(item: HistoryEntry | FanStats, now: float) -> tuple[float | None, float | None]:
    if isinstance(item, FanStats):
        done = sum(item.counts.get(s, 0) for s in ("completed", "failed")) >= item.size
        return item.first_enqueued_at, item.last_finished_at if done else now
    start = item.enqueued_at if item.enqueued_at is not None else item.started_at
    end = item.finished_at
    if end is None and item.status in ("pending", "running"):
        end = now
    return start, end


def _label(item: HistoryEntry | FanStats) -> str:
    if isinstance(item, FanStats):
        return f"{item.first_seq}-{item.last_seq} fan of {item.size}: {item.name}"
    attempts = f", {item.attempts} attempts" if item.attempts > 1 else ""
    return f"{item.seq} {item.name}{attempts}"


def _attempts(entry: HistoryEntry) -> list[tuple[AttemptEntry, str]]:
    """The attempts of a step that the chart draws (those whose start is
    known), each with its tooltip."""
    drawn = []
    for attempt in entry.attempt_log:
        if attempt.started_at is None:
            continue
        took = attempt.duration
        said = f"attempt {attempt.number} ({attempt.status})"
        said += f", started {when(attempt.started_at)}"
        if took is not None:
            said += f", took {duration(took)}"
        if attempt.error is not None:
            said += f": {attempt.error.message}"
        drawn.append((attempt, said))
    return drawn


def chart(run: Run, timeline: Sequence[HistoryEntry | FanStats], now: float) -> dict[str, Any]:
    """The chart's layout: its height, the axis's ticks ``(x, label)``, the
    run's bar and a row per operation (``y``, ``label``, ``x``, ``w``,
    ``status``, ``title``, for a fan its ``segments`` as ``(status, x, w,
    count)``, and for a step its ``attempts`` as ``(status, x, w, title)``)."""
    start = run.created_at
    ended = run.status in TERMINAL_STATUSES
    end = run.updated_at if ended else now
    items = list(timeline[:MAX_ROWS])
    bounds = [_bounds(item, now) for item in items]
    end = max([end, *(b for _, b in bounds if b is not None)])
    span = max(end - start, 1e-3)
    scale = (WIDTH - LABELS) / span

    def x_of(moment: float) -> float:
        return LABELS + max(0.0, moment - start) * scale

    def bar(lo: float | None, hi: float | None) -> tuple[float, float]:
        lo = start if lo is None else lo
        hi = lo if hi is None else hi
        return x_of(lo), max(x_of(hi) - x_of(lo), 2.0)

    rows: list[dict[str, Any]] = []
    for index, (item, (lo, hi)) in enumerate(zip(items, bounds, strict=True)):
        x, w = bar(lo, hi)
        took = None if lo is None or hi is None else duration(hi - lo)
        row: dict[str, Any] = {
            "y": AXIS + ROW * (index + 1),
            "label": _label(item),
            "x": x,
            "w": w,
            "took": took,
            "segments": [],
            "attempts": [],
        }
        if isinstance(item, FanStats):
            row["status"] = "fan"
            at = x
            for status, count, percent in segments(item):
                if count:
                    part = w * percent / 100.0
                    row["segments"].append((status, at, part, count))
                    at += part
            counts = ", ".join(f"{count} {status}" for status, count, _ in segments(item) if count)
            row["title"] = f"fan of {item.size} {item.name}: {counts}"
        else:
            row["status"] = item.status
            row["attempts"] = [
                (attempt.status, *bar(attempt.started_at, attempt.finished_at or now), title)
                for attempt, title in _attempts(item)
            ]
            row["title"] = (
                f"{item.kind} {item.name} ({item.status}), recorded {when(item.enqueued_at)}"
                f", started {when(item.started_at)}, settled {when(item.finished_at)}"
                f", {item.attempts} attempt{'s' if item.attempts != 1 else ''}"
            )
        if took is not None:
            row["title"] += f"; took {took}"
        rows.append(row)
    ticks = [
        (LABELS + (WIDTH - LABELS) * i / TICKS, "+" + duration(span * i / TICKS))
        for i in range(TICKS + 1)
    ]
    run_x, run_w = bar(start, end)
    return {
        "width": WIDTH,
        "height": AXIS + ROW * (len(rows) + 1) + 4,
        "labels": LABELS,
        "ticks": ticks,
        "run": {
            "y": AXIS,
            "x": run_x,
            "w": run_w,
            "status": run.status,
            "took": duration(end - start),
            "ended": ended,
        },
        "rows": rows,
        "more": max(len(timeline) - MAX_ROWS, 0),
    }
