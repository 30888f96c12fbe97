"""The JSON text a store keeps errors and marks in: a run's or checkpoint's
``error``, a checkpoint's ``errors`` (each failed attempt's, in order) and
its ``mark``, written compact (no spaces) and read back into records.

What each record's JSON holds is the record's own (`ErrorInfo.to_json`,
`Mark.to_json`); a store's columns hold that JSON as text, NULL for none.
"""

from __future__ import annotations

import json

from ._records import ErrorInfo, Mark


def dump_error(error: ErrorInfo | None) -> str | None:
    """``error`` as a column's JSON text, or None for none."""
    return None if error is None else json.dumps(error.to_json(), separators=(",", ":"))


def load_error(text: str | None) -> ErrorInfo | None:
    """The error `dump_error` wrote as ``text``, or None for none."""
    return None if text is None else ErrorInfo.from_json(json.loads(text))


def dump_mark(mark: Mark | None) -> str | None:
    """``mark`` as a column's JSON text, or None for none."""
    return None if mark is None else json.dumps(mark.to_json(), separators=(",", ":"))


def load_mark(text: str | None) -> Mark | None:
    """The mark `dump_mark` wrote as ``text``, or None for none."""
    return None if text is None else Mark.from_json(json.loads(text))


def dump_errors(errors: tuple[ErrorInfo, ...]) -> str:
    """``errors`` as the JSON text of a list, in order."""
    return json.dumps([e.to_json() for e in errors], separators=(",", ":"))


def load_errors(text: str | None) -> tuple[ErrorInfo, ...]:
    """The errors `dump_errors` wrote as ``text`` (none for NULL or empty
    text: a store may leave the column NULL while no attempt failed)."""
    if not text:
        return ()
    return tuple(ErrorInfo.from_json(item) for item in json.loads(text))
