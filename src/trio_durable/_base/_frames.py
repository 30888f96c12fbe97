"""Tracebacks for people: trio-durable's own frames folded, so that the
frames of the user's code are what a reader sees first.

A traceback as Python prints it is cut into parts: text (the header, the
exception lines, the user's frames) and runs of consecutive frames of
trio-durable's own modules (the core and its broker adapters), which the
console's run page shows folded under one line, and log lines and
`RunFailed` as one line (`folded_text`). Where the user's code raised, its
innermost frame, is said first of all on a page.

The whole traceback stays where it is recorded (the history, an error's
``traceback``); folding is only how it is shown.
"""

from __future__ import annotations

import re
from types import TracebackType
from typing import Final, final

import attrs

_OWN: Final = re.compile(r"""^\s*File "[^"]*[/\\]trio_durable(?:_\w+)?[/\\]""")
"""A frame line of a module of trio-durable or of one of its adapters."""

_UNDER_USERS: Final = re.compile(
    r"[/\\](?:trio_durable(?:_\w+)?|trio|outcome)[/\\]|[/\\]contextlib\.py$"
)
"""A path of a module the user's code runs on, not of the user's: of
trio-durable or of one of its adapters, of Trio, or ``contextlib``."""

_FRAME: Final = re.compile(r"""^\s*File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<name>.*)$""")


@final
@attrs.define(frozen=True, kw_only=True)
class Part:
    """One part of a folded traceback.

    Attributes:
      text: The part's lines, as printed.
      folded: Whether it is a run of trio-durable's own frames.
      frames: How many frames it holds.
    """

    text: str
    folded: bool = False
    frames: int = 0


@final
@attrs.define(frozen=True, kw_only=True)
class FoldedTraceback:
    """A traceback cut into parts (see the module).

    Attributes:
      parts: Its parts, in the order Python printed them.
      raised_in: Where the user's code raised (``file:line in name`` of
        the innermost frame that is not trio-durable's), or None.
    """

    parts: tuple[Part, ...]
    raised_in: str | None


def _frames(lines: list[str]) -> list[tuple[bool, list[str]]]:
    """The lines grouped: each frame (its ``File`` line and the indented
    source lines under it) as ``(True, lines)``, any other line as
    ``(False, [line])``."""
    groups: list[tuple[bool, list[str]]] = []
    for line in lines:
        if _FRAME.match(line):
            groups.append((True, [line]))
        elif groups and groups[-1][0] and line.startswith("    "):
            # Source and caret lines sit deeper than their File line.
            groups[-1][1].append(line)
        else:
            groups.append((False, [line]))
    return groups


def fold_traceback(text: str) -> FoldedTraceback:
    """``text`` with each run of trio-durable's own frames folded."""
    parts: list[Part] = []
    own: list[str] = []
    count = 0
    raised_in = None

    def flush() -> None:
        nonlocal own, count
        if own:
            parts.append(Part(text="\n".join(own), folded=True, frames=count))
        own, count = [], 0

    plain: list[str] = []
    for is_frame, lines in _frames(text.splitlines()):
        if is_frame and _OWN.match(lines[0]):
            if plain:
                parts.append(Part(text="\n".join(plain)))
                plain = []
            own.extend(lines)
            count += 1
            continue
        flush()
        plain.extend(lines)
        if is_frame:
            found = _FRAME.match(lines[0])
            assert found is not None
            raised_in = f"{found['file']}:{found['line']} in {found['name']}"
    if plain:
        parts.append(Part(text="\n".join(plain)))
    flush()
    return FoldedTraceback(parts=tuple(parts), raised_in=raised_in)


def folded_text(text: str) -> str:
    """``text`` as a log line or an exception shows it: each run of
    trio-durable's own frames as one line that says how many it held
    (``[3 trio-durable frames folded]``), the rest as printed."""
    shown = []
    for part in fold_traceback(text).parts:
        if part.folded:
            plural = "s" if part.frames != 1 else ""
            shown.append(f"  [{part.frames} trio-durable frame{plural} folded]")
        else:
            shown.append(part.text)
    return "\n".join(shown)


def user_frame(tb: TracebackType | None) -> str | None:
    """Where the user's code was in the traceback ``tb``, innermost
    (``file:line in name`` of the last frame of neither trio-durable nor
    what it runs on, as `FoldedTraceback.raised_in` says it), or None."""
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _UNDER_USERS.search(code.co_filename):
            found = f"{code.co_filename}:{tb.tb_lineno} in {code.co_name}"
        tb = tb.tb_next
    return found
