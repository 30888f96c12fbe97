"""How the ``runs`` commands show runs, histories and run details: tables
for people, and the JSON documents of ``--json``.

In JSON, records are objects with the fields of their attrs classes; a
run's ``input`` and ``output`` are the values themselves (not the JSON text
the store keeps) and times are durable times, seconds since the epoch. In
tables, times are UTC.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from rich.console import RenderableType

from .._records import ErrorInfo, Run
from .._views import FanPage, FanStats, HistoryEntry, RunDetail, RunHistory, RunPage
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
    if attrs.has(type(value)):
        return {key: document(item) for key, item in attrs.asdict(value, recurse=False).items()}
    if isinstance(value, Mapping):
        return {str(key): document(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [document(item) for item in value]
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


def run_table(run: Run, parent_id: str | None = None) -> RenderableType:
    """The fields of one run, a row each."""
    rows: list[tuple[str, Any]] = [
        ("workflow", f"{run.workflow} (version {run.version})"),
        ("namespace", run.namespace),
        ("status", run.status),
        ("input", run.input),
        ("output", run.output),
        ("error", error_text(run.error)),
        ("tags", run.tags),
        ("parent", parent_id or run.parent_id),
        ("created", when(run.created_at)),
        ("updated", when(run.updated_at)),
        ("wakes at", when(run.wake_at)),
        ("lease", f"{run.lease_owner} until {when(run.lease_expiry)}" if run.lease_owner else None),
        ("recoveries", run.recoveries),
    ]
    return table(f"Run {run.id}", ["field", "value"], rows)


def runs_table(page: RunPage, title: str) -> RenderableType:
    """A page of runs, newest first."""
    return table(
        title,
        ["run", "workflow", "status", "namespace", "tags", "created", "updated"],
        [
            [
                r.id,
                r.workflow,
                r.status,
                r.namespace,
                r.tags,
                when(r.created_at),
                when(r.updated_at),
            ]
            for r in page.runs
        ],
    )


def facets_table(facets: Mapping[Any, int]) -> RenderableType:
    """Counts of runs by status."""
    return table(
        "Runs by status (every filter but --status)",
        ["status", "runs"],
        [[status, count] for status, count in facets.items()],
    )


def _entry_row(entry: HistoryEntry) -> list[Any]:
    error = error_text(entry.error)
    if error is None and entry.errors:
        # Failed attempts before the one that succeeded.
        error = f"{len(entry.errors)} failed attempt(s), last: {error_text(entry.errors[-1])}"
    name = entry.name
    if entry.parallel_size:
        name = f"{name} [{entry.parallel_group} of {entry.parallel_size}]"
    return [
        entry.seq,
        entry.kind,
        name,
        entry.status,
        entry.attempts,
        when(entry.started_at or entry.enqueued_at),
        when(entry.finished_at),
        entry.child_id or (f"wakes {when(entry.wake_at)}" if entry.wake_at else None),
        error,
    ]


_ENTRY_COLUMNS = [
    "seq",
    "kind",
    "name",
    "status",
    "attempts",
    "started",
    "finished",
    "child / wake",
    "error",
]


def _fan_row(fan: FanStats) -> list[Any]:
    counts = ", ".join(f"{status} {count}" for status, count in fan.counts.items())
    first = fan.first_failures[0] if fan.first_failures else None
    return [
        f"{fan.first_seq}..{fan.last_seq}",
        fan.kind,
        f"{fan.name} (fan of {fan.size})",
        counts,
        fan.attempts,
        when(fan.first_enqueued_at),
        when(fan.last_finished_at),
        None,
        None if first is None else f"first failure, seq {first.seq}: {error_text(first.error)}",
    ]


def history_tables(history: RunHistory) -> list[RenderableType | str]:
    """A run's timeline: its fields, each checkpoint, its children and
    handlers."""
    sections: list[RenderableType | str] = [
        run_table(history.run),
        table(
            f"Timeline of {history.run.id} ({len(history.entries)} checkpoints)",
            _ENTRY_COLUMNS,
            [_entry_row(entry) for entry in history.entries],
        )
        if history.entries
        else "No checkpoints yet.",
    ]
    sections.extend(_related(history.children, history.handlers))
    return sections


def detail_tables(detail: RunDetail) -> list[RenderableType | str]:
    """A run's detail: its fields, the timeline with wide fans folded, the
    fans' statistics, its children and handlers."""
    rows = [
        _fan_row(item) if isinstance(item, FanStats) else _entry_row(item)
        for item in detail.timeline
    ]
    sections: list[RenderableType | str] = [
        run_table(detail.run, detail.parent_id),
        table(f"Timeline of {detail.run.id}", _ENTRY_COLUMNS, rows)
        if rows
        else "No checkpoints yet.",
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
    return sections


def fan_page_tables(page: FanPage) -> list[RenderableType | str]:
    """A page of a fan's members."""
    end = page.offset + len(page.members)
    return [
        table(
            f"Fan at seq {page.fan} of run {page.run_id}:"
            f" members {page.offset + 1 if page.members else page.offset}..{end} of {page.total}",
            _ENTRY_COLUMNS,
            [_entry_row(entry) for entry in page.members],
        )
    ]


def _related(children: Sequence[str], handlers: Sequence[str]) -> list[RenderableType | str]:
    sections: list[RenderableType | str] = []
    if children:
        sections.append(table("Children", ["run"], [[child] for child in children]))
    if handlers:
        sections.append(table("On-error handlers", ["run"], [[h] for h in handlers]))
    return sections
