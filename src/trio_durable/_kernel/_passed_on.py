"""The runs an engine passed on because its app lacks their workflow.

A turn that finds its run's workflow (or version) missing from the app
leaves the run to an engine that has it: it suspends the run, due again
after a backoff, and announces it so that such an engine takes it at once
(see `_turn`). That engine writes the run's due time again as its own turn
sees it, which may be at once in the eyes of the engine that passed it on:
engines that read the wall clock at different moments (the default
``time.time``) disagree on durable time by a few milliseconds, and a timer
due by one engine's clock is not yet by the other's. The engine that
lacks the workflow then took the run again, passed it on again, and under
`trio.testing.MockClock(autojump_threshold=0)` the two handed it back and
forth at one virtual instant for ever.

So the backoff is also kept here, on this engine's own clock (Trio's),
whatever the store's due time says: the due-run poller does not take a run
it passed on until then. Nothing else is held back: a run woken for a
reason of its own (a signal, a child's end) still gets its turn, which
passes it on again.
"""

from __future__ import annotations

from typing import Final, final

import trio

_PRUNE_AT: Final = 64
"""Entries kept before the first sweep of lapsed ones."""


@final
class PassedOn:
    """Runs passed on, each with the moment (Trio time) until which the
    poller leaves it alone."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}
        self._sweep_at = _PRUNE_AT

    def passed(self, run_id: str, until: float) -> None:
        """``run_id`` was passed on: leave it until ``until`` (Trio time)."""
        now = trio.current_time()
        self._until[run_id] = until
        if len(self._until) >= self._sweep_at:
            # Lapsed entries go in sweeps, so the map stays about as large
            # as the runs passed on within one backoff.
            self._until = {r: t for r, t in self._until.items() if t > now}
            self._sweep_at = max(_PRUNE_AT, 2 * len(self._until))

    def held_back(self, run_id: str) -> bool:
        """Whether the poller leaves ``run_id`` alone now."""
        until = self._until.get(run_id)
        if until is None:
            return False
        if until <= trio.current_time():
            del self._until[run_id]
            return False
        return True
