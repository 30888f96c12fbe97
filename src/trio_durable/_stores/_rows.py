"""Run and checkpoint rows as the SQL stores (SQLite, PostgreSQL) keep them:
their columns, and the encoding of records to rows and back."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from .._base._error_json import (
    dump_error,
    dump_errors,
    dump_mark,
    load_error,
    load_errors,
    load_mark,
)
from .._base._records import Checkpoint, Run
from .._base._search_values import dump_attributes, load_attributes
from ._base import run_due_at

RUN_FIELDS: Final = (
    "id", "workflow", "version", "namespace", "status", "input", "output", "error", "tags",
    "parent_id", "parent_seq", "lease_owner", "lease_expiry", "wake_at", "compensate",
    "recoveries", "created_at", "updated_at", "search_attributes",
)  # fmt: skip
RUN_COLUMNS: Final = ", ".join(RUN_FIELDS)
CHECKPOINT_FIELDS: Final = (
    "run_id", "seq", "name", "kind", "status", "input", "output", "error", "errors", "attempts",
    "worker_group", "child_id", "compensation", "parallel_group", "parallel_size",
    "parallel_mode", "wake_at", "enqueued_at", "started_at", "finished_at", "executions",
    "rerun", "mark",
)  # fmt: skip
CHECKPOINT_COLUMNS: Final = ", ".join(CHECKPOINT_FIELDS)

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
"""The seq range of every checkpoint (compensation seqs are negative)."""


def dump_tags(tags: tuple[str, ...]) -> str:
    return json.dumps(list(tags), separators=(",", ":")) if tags else "[]"


def load_tags(text: str) -> tuple[str, ...]:
    # Most runs have no tags; skip the JSON decoder for them.
    return () if text == "[]" else tuple(json.loads(text))


_RUN_ENCODERS: Final[dict[str, Callable[[Any], Any]]] = {
    "error": dump_error,
    "tags": dump_tags,
    "search_attributes": dump_attributes,
}


def encode_run_field(field: str, value: Any) -> Any:
    """A `Run` field's value as its column holds it."""
    encode = _RUN_ENCODERS.get(field)
    return value if encode is None else encode(value)


def run_row(run: Run) -> tuple[Any, ...]:
    return (
        run.id, run.workflow, run.version, run.namespace, run.status, run.input, run.output,
        dump_error(run.error), dump_tags(run.tags), run.parent_id, run.parent_seq,
        run.lease_owner, run.lease_expiry, run.wake_at, run.compensate, run.recoveries,
        run.created_at, run.updated_at, dump_attributes(run.search_attributes),
        run_due_at(run),
    )  # fmt: skip


def load_run(row: Any) -> Run:
    """The `Run` a row of `RUN_COLUMNS` holds."""
    fields = dict(zip(RUN_FIELDS, row, strict=True))
    fields["error"] = load_error(fields["error"])
    fields["tags"] = load_tags(fields["tags"])
    fields["search_attributes"] = load_attributes(fields["search_attributes"])
    # PostgreSQL keeps a boolean, SQLite an integer.
    fields["compensate"] = bool(fields["compensate"])
    return Run(**fields)


def checkpoint_values(cp: Checkpoint) -> tuple[Any, ...]:
    """The columns after the key, in `CHECKPOINT_COLUMNS` order."""
    return (
        cp.name, cp.kind, cp.status, cp.input, cp.output, dump_error(cp.error),
        # NULL rather than "[]": most checkpoints never fail, and load_errors
        # reads NULL as no errors.
        dump_errors(cp.errors) if cp.errors else None,
        cp.attempts, cp.group, cp.child_id, cp.compensation, cp.parallel_group,
        cp.parallel_size, cp.parallel_mode, cp.wake_at, cp.enqueued_at, cp.started_at,
        cp.finished_at, dump_executions(cp.executions), cp.rerun, dump_mark(cp.mark),
    )  # fmt: skip


def load_checkpoint(row: Any) -> Checkpoint:
    return Checkpoint(
        run_id=row[0],
        seq=row[1],
        name=row[2],
        kind=row[3],
        status=row[4],
        input=row[5],
        output=row[6],
        error=load_error(row[7]),
        errors=load_errors(row[8]),
        attempts=row[9],
        group=row[10],
        child_id=row[11],
        compensation=row[12],
        parallel_group=row[13],
        parallel_size=row[14],
        parallel_mode=row[15],
        wake_at=row[16],
        enqueued_at=row[17],
        started_at=row[18],
        finished_at=row[19],
        executions=load_executions(row[20]),
        # PostgreSQL keeps a boolean, SQLite an integer.
        rerun=bool(row[21]),
        mark=load_mark(row[22]),
    )


def dump_executions(executions: tuple[str, ...]) -> str | None:
    """A checkpoint's execution ids as their column holds them: a JSON
    array, or NULL for none (every checkpoint but a dispatched one's, and
    those written before execution ids existed)."""
    return json.dumps(list(executions), separators=(",", ":")) if executions else None


def load_executions(text: str | None) -> tuple[str, ...]:
    return tuple(json.loads(text)) if text else ()
