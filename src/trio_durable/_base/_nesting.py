"""How deeply a payload's lists and objects may nest: the limit payloads
(`_serde`) and broker messages (`_wire`) are held to, and its check. It
imports nothing of the package, so both can use it."""

from __future__ import annotations

from typing import Any, Final

MAX_NESTING: Final = 200
"""How deeply lists and objects may nest in a payload.

Far deeper than real payloads go, and far below the depth at which Python's
own `json` runs out of stack: a payload that was accepted once can always be
parsed and written again, on any thread, at any depth of the call stack. The
wire decoders (`trio_durable._wire._messages`) hold received messages to the same
limit, so what an engine or worker sends is always what the other accepts.
"""


def nesting_exceeds(plain: Any, text: str | bytes, limit: int = MAX_NESTING) -> bool:
    """Whether the parsed JSON value ``plain`` (whose JSON text is ``text``)
    nests lists and objects more than ``limit`` levels deep."""
    # Fewer brackets than the limit in all of the text: no walk needed,
    # which is the case for nearly every payload.
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if brackets <= limit:
        return False
    # Iterative, so that a deep value cannot exhaust the stack here either.
    stack: list[tuple[Any, int]] = [(plain, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list | tuple):
            children = value
        else:
            continue
        if depth > limit:
            return True
        stack.extend(
            (child, depth + 1) for child in children if isinstance(child, dict | list | tuple)
        )
    return False
