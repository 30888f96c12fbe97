"""Exported histories: a run, its checkpoints and its run records as one
JSON document, written by `export_history` (``trio-durable runs export``)
and read back by the replay tests (`trio_durable.testing.replay`).

A document says what it is (``format``, ``format_version``), which app
exported it (its name and registration hash, when the exporting process
had the app), whether payloads in it are encrypted as the store keeps them
(``encrypted``), and the rows as the store reads them: every field of
`Run`, `Checkpoint` and `RunRecord`, payloads (inputs, outputs) as the
JSON text they are stored as, a run's search attributes as its row keeps
them (``{name: [type, value]}``). docs/history.schema.json is its JSON
Schema; docs/changing-workflow-code.md describes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, final

import attrs
import cattrs

from .._base import _serde
from .._base._exceptions import HistoryError
from .._base._records import Checkpoint, Run
from .._base._run_records import RunRecord
from .._base._search_values import SearchValue, dump_attributes, load_attributes

FORMAT: Final = "trio-durable-history"
"""The ``format`` of every exported history."""

FORMAT_VERSION: Final = 1
"""The ``format_version`` this release writes and reads."""

_rows = _serde.checker.copy()
"""The converter of the rows: the payload checker's (a string field takes
only a string), with a run's search attributes kept as its row keeps them
(datetimes are no JSON)."""
_rows.register_unstructure_hook_func(
    lambda type_: type_ == Mapping[str, SearchValue],
    lambda value: json.loads(dump_attributes(value)),
)
_rows.register_structure_hook_func(
    lambda type_: type_ == Mapping[str, SearchValue],
    lambda value, _: load_attributes(json.dumps(value)),
)


@final
@attrs.define(frozen=True, kw_only=True)
class History:
    """An exported history, read.

    Attributes:
      run: The run as stored.
      checkpoints: Its checkpoints, by seq.
      records: Its run records.
      app_name: The name of the app that exported it, if known.
      registration_hash: That app's `App.registration_hash`, if known.
      encrypted: Whether payloads in it are encrypted as stored.
    """

    run: Run
    checkpoints: tuple[Checkpoint, ...]
    records: tuple[RunRecord, ...]
    app_name: str | None = None
    registration_hash: str | None = None
    encrypted: bool = False


def history_document(history: History) -> dict[str, Any]:
    """``history`` as its JSON document (a dict of JSON values)."""
    app = None
    if history.app_name is not None:
        app = {"name": history.app_name, "registration_hash": history.registration_hash}
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "app": app,
        "encrypted": history.encrypted,
        "run": _rows.unstructure(history.run),
        "checkpoints": [_rows.unstructure(cp) for cp in history.checkpoints],
        "records": [_rows.unstructure(record) for record in history.records],
    }


def read_history(document: object, source: str = "the history") -> History:
    """The history ``document`` holds (as `history_document` wrote it).

    Args:
      document: The document, parsed from its JSON.
      source: What to call it in an error (a file's path).

    Raises:
      HistoryError: It is no history of this format and version.
    """
    if not isinstance(document, Mapping) or document.get("format") != FORMAT:
        raise HistoryError(f"{source} is not an exported history (no format {FORMAT!r})")
    version = document.get("format_version")
    if version != FORMAT_VERSION:
        raise HistoryError(
            f"{source} is of format version {version!r}; this trio-durable reads version"
            f" {FORMAT_VERSION}"
        )
    app = document.get("app")
    if app is not None and not (
        isinstance(app, Mapping)
        and isinstance(app.get("name"), str)
        and isinstance(app.get("registration_hash"), str | None)
    ):
        raise HistoryError(f"{source}: app must be null or {{name, registration_hash}}")
    encrypted = document.get("encrypted")
    if not isinstance(encrypted, bool):
        raise HistoryError(f"{source}: encrypted must be true or false")
    checkpoints, records = document.get("checkpoints"), document.get("records")
    if not isinstance(checkpoints, list) or not isinstance(records, list):
        raise HistoryError(f"{source}: checkpoints and records must be lists")
    try:
        run = _rows.structure(document.get("run"), Run)
        history = History(
            run=run,
            checkpoints=tuple(_rows.structure(cp, Checkpoint) for cp in checkpoints),
            records=tuple(_rows.structure(record, RunRecord) for record in records),
            app_name=None if app is None else app["name"],
            registration_hash=None if app is None else app["registration_hash"],
            encrypted=encrypted,
        )
    except (cattrs.BaseValidationError, ValueError, TypeError, KeyError) as exc:
        raise HistoryError(f"{source}: {_said(exc)}") from None
    rows: list[Checkpoint | RunRecord] = [*history.checkpoints, *history.records]
    stranger = next((row for row in rows if row.run_id != run.id), None)
    if stranger is not None:
        raise HistoryError(f"{source}: it holds a row of run {stranger.run_id!r}, not {run.id!r}")
    return history


def _said(exc: Exception) -> str:
    """What is wrong with a document, as cattrs found it."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, path="$")[:3])
    return str(exc)
