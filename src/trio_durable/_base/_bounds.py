"""How big an input may be: the length of a name and the range of a number,
checked where they enter the public API (the engine, the client, the
console, the command line), so that an oversized one is a `UsageError`
that says so, never an `OverflowError` from deep inside or a megabyte-long
name in a store's index.

Names (signals, webhooks, breakpoints' workflows and steps, flow-control
queues, tags) are 1 to `MAX_NAME_LENGTH` characters. Whole numbers that a
store keeps or compares (seqs, offsets) fit in `MAX_INTEGER`, the widest
integer column of SQLite and PostgreSQL. A number of seconds or a time is
finite as a float: an int too large for a float is not (`is_finite`).
"""

from __future__ import annotations

import math
from typing import Final

from ._exceptions import UsageError
from ._index_text import refuse_nul

MAX_NAME_LENGTH: Final = 200
"""The most characters of a name: a signal's, a webhook's, a breakpoint's
workflow and step, a flow-control queue's, a tag."""

MAX_INTEGER: Final = 2**63 - 1
"""The largest whole number a store keeps or compares (a seq, an offset):
a signed 64-bit integer, as SQLite and PostgreSQL keep them."""


def check_name(what: str, value: object) -> str:
    """``value``, checked to be a name of 1 to `MAX_NAME_LENGTH` characters.

    Args:
      what: What the name is, to start the error's message (``"signal
        name"``).
      value: The name given.

    Raises:
      UsageError: ``value`` is not a string, is empty, is too long or holds
        a NUL character (see `._index_text`).
    """
    if not isinstance(value, str) or not value:
        raise UsageError(f"{what} must be a non-empty string, not {shown(value)}")
    if len(value) > MAX_NAME_LENGTH:
        raise UsageError(
            f"{what} must be at most {MAX_NAME_LENGTH} characters long, not {len(value)}"
            f" ({shown(value)})"
        )
    refuse_nul(what, value)
    return value


def shown(value: object) -> str:
    """``value`` as an error message quotes it: its repr, cut short; an int
    of more digits than Python prints, by its size."""
    try:
        text = repr(value)
    except ValueError:
        # int's limit on digits (sys.set_int_max_str_digits).
        return f"an integer of {value.bit_length()} bits"  # type: ignore[attr-defined]
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def is_finite(value: int | float) -> bool:
    """Whether ``value`` is a finite number as a float: an int too large to
    convert is not (where `math.isfinite` would raise `OverflowError`)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_integer(what: str, value: object, low: int, high: int = MAX_INTEGER) -> int:
    """``value``, checked to be a whole number from ``low`` to ``high``.

    Raises:
      UsageError: It is not an int (a bool is not), or is out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be an integer, not {shown(value)}")
    if not low <= value <= high:
        raise UsageError(f"{what} must be an integer from {low} to {high}, not {shown(value)}")
    return value
