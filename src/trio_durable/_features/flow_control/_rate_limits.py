"""Rate limits: at most ``starts`` admissions per ``per`` seconds, fleet-wide,
for the runs of a workflow (``@app.workflow(rate_limit=...)``) or the steps
of a flow-control queue (``app.queue(..., rate_limit=...)``).

A limit's window is a keyed value in the store (scope ``rate:<name>``, key
``window``): the times of the latest admissions, at most ``starts`` of
them, written by compare-and-swap on its version, so engines sharing the
store share the limit. An admission is not asked for again and again: each
one reserves its time, the earliest that keeps every span of ``per``
seconds to at most ``starts`` admissions and comes after every earlier
reservation (so they are let in in the order they asked), and its run or
step is due exactly then. A reservation whose run or step goes away is
simply spent: the limit is never exceeded, at worst not fully used.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

from ..._stores._base import WriteConflict
from ..._stores._ops import PutValue

if TYPE_CHECKING:
    from ..._stores._base import Store

RATE_SCOPE: Final = "rate:"
WINDOW: Final = "window"
RATE_LIMITED: Final = "rate_limited"
_SWAP_ATTEMPTS: Final = 1000
"""Compare-and-swap rounds before giving up: each lost round means another
writer's reservation went in, so this bounds only a store that refuses
every write for another reason."""


def next_admission(times: list[float], starts: int, per: float, now: float) -> float:
    """The earliest time at or after ``now`` and after every reservation in
    ``times`` (ascending) such that no span of ``per`` seconds holds more
    than ``starts`` of them."""
    at = max(now, times[-1]) if times else now
    if len(times) >= starts:
        at = max(at, times[-starts] + per)
    return at


async def reserve(store: Store, name: str, starts: int, per: float, now: float) -> float:
    """Reserve the next admission of the rate limit ``name`` (``starts`` per
    ``per`` seconds) asked for at ``now``; return its time (``now`` if the
    window has room).

    Raises:
      WriteConflict: Every compare-and-swap round lost (see `_SWAP_ATTEMPTS`).
    """
    scope = RATE_SCOPE + name
    for _ in range(_SWAP_ATTEMPTS):
        stored = await store.get_value(scope, WINDOW)
        times: list[float] = [] if stored is None else json.loads(stored.value)
        at = next_admission(times, starts, per, now)
        # Reservations a span or more before this one never bound a later
        # one: only the last ``starts`` within the span are kept.
        kept = [t for t in times if t > at - per][-(starts - 1) :] if starts > 1 else []
        window = PutValue(
            scope,
            WINDOW,
            json.dumps([*kept, at]),
            now,
            expect_version=0 if stored is None else stored.version,
        )
        try:
            await store.apply([window])
        except WriteConflict:
            continue  # another reservation went in first: read it and ask again
        return at
    raise WriteConflict(f"could not reserve an admission of rate limit {name!r}")
