"""How the ``runs`` commands show runs, histories and run details: tables
for people, and the JSON documents of ``--json``.

In JSON, records are objects with the fields of their attrs classes; a
run's ``input`` and ``output`` are the values themselves (not the JSON text
the store keeps) and times are durable times, seconds since the epoch. In
tables, times are UTC.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
from rich.console import RenderableType

from .._base._records import ErrorInfo, Run
from .._kernel._views import (
    FanPage,
    FanStats,
    HistoryEntry,
    RetriedHistory,
    RunDetail,
    RunHistory,
    RunPage,
    span,
)
from .._payloads._stored_payloads import said, sealed_for_people, shown_error
from ._common import table
from ._values import decoded, when


def document(value: Any) -> Any:
    """``value`` as JSON-able data: attrs records as objects, runs with
    their input and output decoded, tuples as lists."""
    if isinstance(value, Run):
        # A RunHandle is a Run: only the Run's fields, not its engine.
        data = {field.name: document(getattr(value, field.name)) for field in attrs.fields(Run)}
        data["input"] = decoded(value.input)
        data["output"] = decoded(value.output)
        return data
    if isinstance(value, ErrorInfo) and value.sealed is not None:
        # Read without its codec: shown as what it is, not what the codec made.
        return shown_error(value)
    if isinstance(value, RetriedHistory) and value.sealed is not None:
        data = {key: document(item) for key, item in attrs.asdict(value, recurse=False).items()}
        del data["sealed"]
        return {**data, **sealed_for_people(value.sealed)}
    if attrs.has(type(value)):
        return {key: document(item) for key, item in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, Mapping):
        return {str(key): document(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [document(item) for item in value]
    if isinstance(value, datetime.datetime):
        # A search attribute's value.
        return value.isoformat()
    return value


def error_text(error: ErrorInfo | None) -> str | None:
    """A stored failure in one line: its type, message and code."""
    if error is None:
        return None
    kind = f"{error.type}: " if error.type else ""
    code = f" [{error.code}]" if error.code else ""
    return f"{kind}{error.message}{code}"


def run_line(run: Run) -> str:
    """One line that says what state a run is in."""
    text = f"run {run.id} ({run.workflow}, namespace {run.namespace}) is {run.status}"
    if run.status == "completed":
        return f"{text}: output {run.output}"
    if run.error is not None:
        return f"{text}: {error_text(run.error)}"
    return text


def shown_status(run: Run, handler: str | None, *, named: bool = True) -> str:
    """A run's status for people: a run handed to an on-error handler
    failed, whatever its status (its handler's outcome) says; ``named``
    says by which handler."""
    if handler is None:
        return run.status
    return f"failed, handled by {handler}" if named else "failed, handled"


def run_table(
    run: Run,
    parent_id: str | None = None,
    handlers: Sequence[str] = (),
    waiting: str | None = None,
) -> RenderableType:
    """The fields of one run, a row each (``waiting``: what its next
    decision task waits for, see `RunDetail.waiting`)."""
    status: str = run.status
    if handlers:
        status = f"{shown_status(run, handlers[-1])} (the handler's outcome: {run.status})"
    rows: list[tuple[str, Any]] = [
        ("workflow", f"{run.workflow} (version {run.version})"),
        ("namespace", run.namespace),
        ("status", status),
        # A payload read without its codec or blob store: what its mark says.
        ("input", said(run.input)),
        ("output", said(run.output)),
        ("error", error_text(run.error)),
        ("tags", run.tags),
        ("parent", parent_id or run.parent_id),
        ("created", when(run.created_at)),
        ("updated", when(run.updated_at)),
        ("wakes at", when(run.wake_at)),
        *([("waiting", waiting)] if waiting is not None else []),
        ("lease", f"{run.lease_owner} until {when(run.lease_expiry)}" if run.lease_owner else None),
        ("recoveries", run.recoveries),
    ]
    rows.extend(
        (f"search: {name}", document(value)) for name, value in run.search_attributes.items()
    )
    return table(f"Run {run.id}", ["field", "value"], rows)


def runs_table(
    page: RunPage, title: str, handed: Mapping[str, str] | None = None
) -> RenderableType:
    """A page of runs, newest first; ``handed`` names the on-error handler
    of each run handed to one. Its status says it was handled, not by
    which run: an id there would be the widest word of a column that a
    narrow terminal folds (the handler is the run ``RUN.onError.N`` of the
    list, and ``runs show RUN`` names it)."""
    handed = handed or {}
    return table(
        title,
        ["run", "workflow", "status", "namespace", "tags", "created", "updated"],
        [
            [
                r.id,
                r.workflow,
                shown_status(r, handed.get(r.id), named=False),
                r.namespace,
                r.tags,
                when(r.created_at),
                when(r.updated_at),
            ]
            for r in page.runs
        ],
        no_wrap=("workflow", "status", "created", "updated"),
    )


def facets_table(facets: Mapping[Any, int]) -> RenderableType:
    """Counts of runs by status."""
    return table(
        "Runs by status (every filter but --status)",
        ["status", "runs"],
        [[status, count] for status, count in facets.items()],
    )


def _at(origin: float, start: float | None, end: float | None) -> tuple[str | None, str | None]:
    # Times in a timeline are read against the run's creation: "+1.50s",
    # and how long each took, rather than as dates that all look alike.
    at = None if start is None else f"+{span(max(0.0, start - origin))}"
    took = None if start is None or end is None else span(max(0.0, end - start))
    return at, took


def _entry_row(
    entry: HistoryEntry, origin: float, now: float, position: int | None = None
) -> list[Any]:
    error = error_text(entry.error)
    if error is None and entry.errors:
        # Failed attempts before the one that succeeded.
        error = f"{len(entry.errors)} failed attempt(s), last: {error_text(entry.errors[-1])}"
    if entry.status == "pending":
        # Where a pending step stands: out (on which broker, for how long),
        # or what it waits for before it is sent.
        stands: str | None
        if entry.out_on is not None and entry.started_at is not None:
            stands = f"out {span(max(0.0, now - entry.started_at))} on {entry.out_on}"
        else:
            stands = entry.waiting
        if stands is not None and position is not None:
            stands += f": queued at position {position}"
        if stands is not None:
            error = stands if error is None else f"{stands}; {error}"
    name = entry.name
    if entry.parallel_size and entry.parallel_group is not None:
        # A fan member: its place in the fan (which starts at parallel_group).
        name = f"{name} [{entry.seq - entry.parallel_group + 1} of {entry.parallel_size}]"
    # From when it was recorded: a retried step's last attempt began later.
    began = entry.enqueued_at if entry.enqueued_at is not None else entry.started_at
    at, took = _at(origin, began, entry.finished_at)
    return [
        entry.seq,
        entry.kind,
        name,
        "paused" if entry.paused else entry.status,
        _attempts_cell(entry),
        at,
        took,
        entry.child_id or (f"wakes {when(entry.wake_at)}" if entry.wake_at else None),
        error,
    ]


def _attempts_cell(entry: HistoryEntry) -> int | str:
    """How many attempts ran, and, for a step that failed at least once,
    how long each took (``?`` where a row written before attempts had
    times does not say)."""
    if not entry.errors or not entry.attempt_log:
        return entry.attempts
    took = ", ".join("?" if a.duration is None else span(a.duration) for a in entry.attempt_log)
    return f"{entry.attempts} ({took})"


_ENTRY_COLUMNS: Final = (
    "seq",
    "kind",
    "name",
    "status",
    "attempts",
    "at",
    "took",
    "child / wake",
    "error",
)
_NO_WRAP: Final = ("seq", "kind", "status", "attempts", "at", "took")


def _fan_row(fan: FanStats, origin: float) -> list[Any]:
    counts = ", ".join(f"{status} {count}" for status, count in fan.counts.items())
    first = fan.first_failures[0] if fan.first_failures else None
    at, took = _at(origin, fan.first_enqueued_at, fan.last_finished_at)
    return [
        f"{fan.first_seq}..{fan.last_seq}",
        fan.kind,
        f"{fan.name} (fan of {fan.size})",
        counts,
        fan.attempts,
        at,
        took,
        None,
        None if first is None else f"first failure, seq {first.seq}: {error_text(first.error)}",
    ]


def _timeline(title: str, rows: list[list[Any]]) -> RenderableType | str:
    if not rows:
        return "No checkpoints yet."
    return table(title, _ENTRY_COLUMNS, rows, no_wrap=_NO_WRAP)


def history_tables(history: RunHistory, now: float) -> list[RenderableType | str]:
    """A run's timeline: its fields, each checkpoint, its children and
    handlers; how long pending steps have been out, as of ``now``."""
    sections: list[RenderableType | str] = [
        run_table(history.run, handlers=history.handlers, waiting=history.waiting),
        _timeline(
            f"Timeline of {history.run.id} (times from its creation)",
            [_entry_row(entry, history.run.created_at, now) for entry in history.entries],
        ),
    ]
    sections.extend(_related(history.children, history.handlers))
    sections.extend(retried_sections(history.retried, history.run.created_at, now))
    return sections


TRACEBACKS_SHOWN: Final = 10
"""How many failed operations of one retry a table shows the tracebacks of
(``--json`` has every one)."""


def retried_sections(
    retried: Sequence[RetriedHistory], origin: float, now: float, *, tracebacks: bool = True
) -> list[RenderableType | str]:
    """What each retry of a run replaced, oldest first: the run's error then,
    the operations the retry deleted or reset, and (with ``tracebacks``)
    the tracebacks of the run's error and of the operations' last errors."""
    sections: list[RenderableType | str] = []
    for kept in retried:
        head = f"Before retry {kept.retry} (retried {when(kept.retried_at)}"
        head += ", from its failures)" if kept.from_seq is None else f", from seq {kept.from_seq})"
        if kept.sealed is not None:
            said_of = sealed_for_people(kept.sealed)
            key_id = said_of.get("encrypted_with")
            what = "encoded" if key_id is None else f"encrypted with {key_id}"
            sections.append(f"{head}: {what} (TRIO_DURABLE_CODEC_KEYS decrypts it).")
            continue
        ended = f"the run was {kept.status}"
        if kept.error is not None:
            ended += f": {error_text(kept.error)}"
        rows = [_entry_row(entry, origin, now) for entry in kept.entries]
        if rows:
            sections.append(table(f"{head}: {ended}", _ENTRY_COLUMNS, rows, no_wrap=_NO_WRAP))
        else:
            sections.append(f"{head}: {ended}; it replaced no operation.")
        if tracebacks:
            sections.extend(_tracebacks(kept))
    return sections


def _tracebacks(kept: RetriedHistory) -> list[str]:
    shown: list[str] = []
    if kept.error is not None and kept.error.traceback:
        shown.append(f"Retry {kept.retry}: the run's error, {error_text(kept.error)}\n")
        shown[-1] += kept.error.traceback.rstrip()
    failed = [e for e in kept.entries if e.errors and e.errors[-1].traceback]
    for entry in failed[:TRACEBACKS_SHOWN]:
        last = entry.errors[-1]
        shown.append(
            f"Retry {kept.retry}: seq {entry.seq} ({entry.name}), attempt {len(entry.errors)},"
            f" {error_text(last)}\n{(last.traceback or '').rstrip()}"
        )
    if len(failed) > TRACEBACKS_SHOWN:
        shown.append(
            f"Retry {kept.retry}: {len(failed) - TRACEBACKS_SHOWN} more tracebacks; --json has"
            " every one."
        )
    return shown


def detail_tables(
    detail: RunDetail, now: float, positions: Mapping[int, int] | None = None
) -> list[RenderableType | str]:
    """A run's detail: its fields, the timeline with wide fans folded, the
    fans' statistics, its children and handlers; how long pending steps
    have been out, as of ``now``, and the place in its queue's line of each
    step that waits in one (``positions``, by seq)."""
    origin = detail.run.created_at
    places = positions or {}
    rows = [
        _fan_row(item, origin)
        if isinstance(item, FanStats)
        else _entry_row(item, origin, now, places.get(item.seq))
        for item in detail.timeline
    ]
    sections: list[RenderableType | str] = [
        run_table(detail.run, detail.parent_id, detail.handlers, detail.waiting),
        _timeline(f"Timeline of {detail.run.id} (times from its creation; wide fans folded)", rows),
    ]
    if detail.fans:
        sections.append(
            table(
                "Fans (page one with: runs show RUN --fan FIRST_SEQ)",
                ["first seq", "kind", "name", "size", "by status", "attempts", "first failures"],
                [
                    [
                        fan.first_seq,
                        fan.kind,
                        fan.name,
                        fan.size,
                        fan.counts,
                        fan.attempts,
                        [f"{f.seq}: {error_text(f.error)}" for f in fan.first_failures],
                    ]
                    for fan in detail.fans
                ],
            )
        )
    sections.extend(_related(detail.children, detail.handlers))
    # The tracebacks are history's (runs history RUN).
    sections.extend(retried_sections(detail.retried, origin, now, tracebacks=False))
    return sections


def fan_page_tables(
    page: FanPage, origin: float, now: float, *, failed: bool = False
) -> list[RenderableType | str]:
    """A page of a fan's members (only its failed ones if ``failed``); times
    from ``origin`` (the run's creation), pending steps out as of ``now``."""
    which = "failed members" if failed else "members"
    name = f"Fan at seq {page.fan} of run {page.run_id}"
    if not page.members:
        return [f"{name}: no {which} from {page.offset + 1} on ({page.total} in all)."]
    end = page.offset + len(page.members)
    return [
        table(
            f"{name}: {which} {page.offset + 1}..{end} of {page.total}",
            _ENTRY_COLUMNS,
            [_entry_row(entry, origin, now) for entry in page.members],
            no_wrap=_NO_WRAP,
        )
    ]


def _related(children: Sequence[str], handlers: Sequence[str]) -> list[RenderableType | str]:
    sections: list[RenderableType | str] = []
    if children:
        sections.append(table("Children", ["run"], [[child] for child in children]))
    if handlers:
        sections.append(table("On-error handlers", ["run"], [[h] for h in handlers]))
    return sections
