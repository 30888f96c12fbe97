"""How the processes of the command write their log records: ``--log-format
text`` (one line of text each, the default) or ``json`` (one JSON object per
line, for a log collector).

A JSON record has ``time`` (ISO 8601, UTC, milliseconds), ``level``,
``logger`` and ``message``; ``run_id``, ``workflow`` and ``step`` when the
record names them (the engine's records of a run, and every record a
step's own code logs while it runs, from `current_step`); and
``exception``, the formatted traceback, when the record carries one.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Final

import click

from .._base._current import current_step
from .._base._exceptions import UsageError
from ._common import F

FORMATS: Final = ("text", "json")
_NAMED: Final = ("run_id", "workflow", "step")


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        document.update(_named(record))
        if record.exc_info and record.exc_info[1] is not None:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False, default=str)


def _named(record: logging.LogRecord) -> dict[str, Any]:
    """The run, workflow and step a record names: given as ``extra`` by the
    engine, else those of the step whose code logged it."""
    given = {name: getattr(record, name) for name in _NAMED if getattr(record, name, None)}
    if given:
        return given
    try:
        step = current_step()
    except UsageError:
        return {}
    return {"run_id": step.run_id, "workflow": step.workflow, "step": step.step}


def formatter(log_format: str) -> logging.Formatter | None:
    """The formatter of ``--log-format``: None for text, the default one."""
    return JsonLines() if log_format.lower() == "json" else None


def log_format_option(fn: F) -> F:
    """``--log-format text|json``: how the process writes its log records."""
    option = click.option(
        "--log-format",
        type=click.Choice(FORMATS, case_sensitive=False),
        default="text",
        show_default=True,
        help="One line of text per log record, or one JSON object per line (time, level,"
        " logger, message, run_id, workflow and step when known, exception).",
    )
    wrapped: F = option(fn)
    return wrapped
