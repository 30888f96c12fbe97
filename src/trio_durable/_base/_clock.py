"""The one clock: durable time read from Trio's clock.

Durable times (timer due times, lease expiries, record stamps) are seconds
since the Unix epoch, so they mean the same thing to every engine sharing a
store and across restarts. They are computed as Trio's clock plus an offset
taken once from the wall clock when the `Clock` is made; after that, time
only moves as `trio.current_time()` moves. Under
`trio.testing.MockClock(autojump_threshold=0)` a 30-day timer therefore fires
as soon as everything else is idle.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import final

import trio


@final
class Clock:
    """Durable time for one engine.

    Args:
      wall_clock: Returns seconds since the Unix epoch. It is read once, when
        the clock is made (inside a Trio run), to anchor durable time. Inject
        a constant to make durable times repeatable in tests.
    """

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self._offset = wall_clock() - trio.current_time()

    def now(self) -> float:
        """The current durable time."""
        return trio.current_time() + self._offset

    def to_trio(self, durable_time: float) -> float:
        """The `trio.current_time()` value at which ``durable_time`` arrives."""
        return durable_time - self._offset
