"""The checks of the fields a decision task and a decision hold: each one
returns the field's value, or raises `WireError` saying what is wrong with
it (see `_decision_wire`, `_decision_commands`)."""

from __future__ import annotations

import json
from typing import Any, Final, NoReturn

from .._base._bounds import is_finite
from .._base._records import ErrorInfo
from ._messages import WireError

FAN_MODES: Final = frozenset({"fail_fast", "wait_all", "settled"})
"""The modes a fan may have."""


def reject(reason: str) -> NoReturn:
    """Raise `WireError` for ``reason``."""
    raise WireError(reason)


def parse_json(text: str, what: str) -> Any:
    """``text`` parsed as JSON (``what`` names it in an error)."""
    try:
        return json.loads(text)
    except RecursionError:
        reject(f"{what} nests too deeply")
    except ValueError as exc:
        reject(f"{what} is not JSON: {exc}")


def json_text(value: Any, what: str, *, array: bool = False) -> str:
    """A field that holds JSON text: it must parse (as an array, if asked)."""
    if not isinstance(value, str):
        reject(f"{what} must be JSON text, not {type(value).__name__}")
    parsed = parse_json(value, what)
    if array and not isinstance(parsed, list):
        reject(f"{what} must be a JSON array")
    return value


def text_field(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    """``data[key]``: a non-empty string without NUL (or None, if optional)."""
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        reject(f"{key} must be a non-empty string")
    return value


def int_field(
    data: dict[str, Any], key: str, low: int, high: int, *, optional: bool = False
) -> Any:
    """``data[key]``: an integer from ``low`` to ``high`` (or None, if optional)."""
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        reject(f"{key} must be an integer from {low} to {high}")
    return value


def number_field(data: dict[str, Any], key: str, *, optional: bool = True, low: float = 0.0) -> Any:
    """``data[key]``: a finite number from ``low`` (or None, if optional)."""
    value = data.get(key)
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not is_finite(value)
        or value < low
        or value > 2.0**53
    ):
        reject(f"{key} must be a finite number from {low}")
    return float(value)


def error_field(value: Any) -> ErrorInfo | None:
    """An error as a message carries it, checked (None stays None)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        reject("an error must be an object with a message")
    for key in ("code", "type", "step", "traceback"):
        if value.get(key) is not None and not isinstance(value[key], str):
            reject(f"an error's {key} must be a string")
    for key in ("started_at", "finished_at"):
        number_field(value, key)
    # An error from a worker is in the clear: only a codec store seals one.
    return ErrorInfo.from_json({key: item for key, item in value.items() if key != "sealed"})
