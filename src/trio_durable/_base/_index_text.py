"""The one rule for text a store indexes: no NUL character.

Names and keys given to the API (tags, string search attributes, signal,
webhook and update names, queue names, the keys of keyed values, ...) end
up in the stores' indexed columns. The stores disagree on NUL (``"\\x00"``):
the memory store keeps it, SQLite's indexes cut a text at it (so a search
for ``"t"`` finds ``"t\\x00nul"``), and PostgreSQL refuses any text holding
it. So the API refuses it, with a `UsageError` (or the subclass the call
documents) before anything is written, and every store sees the same.
Payloads are JSON, whose text spells a NUL as ``\\u0000``: they may hold
it.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._exceptions import UsageError


def refuse_nul(what: str, value: object, error: type[UsageError] = UsageError) -> None:
    """Raise ``error`` if ``value`` is a string holding a NUL character.

    Other values pass (their type is the caller's to check).

    Raises:
      UsageError: ``value`` holds ``"\\x00"`` (``error``, a subclass, if
        given).
    """
    if isinstance(value, str) and "\x00" in value:
        # Cut short: a name or key may be long, and the message is for people.
        quoted = repr(value) if len(value) <= 60 else f"{value[:60]!r}... ({len(value)} characters)"
        raise error(f"{what} must not contain a NUL character ('\\x00'), not {quoted}")


def refuse_nul_in(
    what: str, values: Iterable[object], error: type[UsageError] = UsageError
) -> None:
    """`refuse_nul` for each of ``values``."""
    for value in values:
        refuse_nul(what, value, error)
