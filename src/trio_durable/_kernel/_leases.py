"""The lease keeper: one task that renews the leases of every turn in flight.

A turn holds its run's lease while its body runs (and while undos or a
cancel's delivery run); the lease lasts ``lease_ttl`` seconds, so it must be
renewed every third of that while the turn goes on. Most turns end long
before their first renewal is due: one task per engine keeps them all,
instead of a task (and a nursery, and a cancellation) per turn.

The keeper renews every lease that is due in one write. A renewal that
finds the lease taken cuts the turn's body short (`Slot.body_scope`): the
turn must write nothing. A turn lets go of its lease (`LeaseKeeper.release`)
only once no renewal of it is in flight, so a renewal never lands after the
turn's last write gave the lease back (it would take the lease again).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, final

import attrs
import trio

from .._base._exceptions import StoreError
from .._stores._ops import LockRun

if TYPE_CHECKING:
    from .._base._clock import Clock
    from .._stores._base import Store
    from ._scheduler import Slot

logger = logging.getLogger("trio_durable")


@attrs.define(eq=False)
class HeldLease:
    """One turn's hold on its run's lease (see `LeaseKeeper.hold`)."""

    run_id: str
    slot: Slot
    # When the keeper renews it next (Trio time).
    due: float
    # Set while a renewal of it is in flight.
    renewing: trio.Event | None = None


@final
class LeaseKeeper:
    """Renews the leases of an engine's turns in flight.

    Args:
      store: Where the leases are.
      engine_id: Their owner.
      lease_ttl: How long a renewal makes a lease last; leases are renewed
        every third of it.
      clock: Stamps the renewals (durable time).
    """

    def __init__(self, store: Store, engine_id: str, lease_ttl: float, clock: Clock) -> None:
        self._store = store
        self._engine_id = engine_id
        self._ttl = lease_ttl
        self._clock = clock
        # In the order they are due: each hold is due a third of the lease
        # after it was taken or last renewed, and Trio time only grows.
        self._held: dict[str, HeldLease] = {}
        self._wait: trio.CancelScope | None = None
        self.renewals = 0

    @property
    def held(self) -> int:
        """How many turns hold a lease now."""
        return len(self._held)

    def hold(self, run_id: str, slot: Slot) -> HeldLease:
        """Keep ``run_id``'s lease (just taken) until `release`; if it is
        lost meanwhile, cancel ``slot.body_scope``."""
        held = HeldLease(run_id, slot, trio.current_time() + self._ttl / 3)
        if not self._held and self._wait is not None:
            self._wait.deadline = held.due
        self._held[run_id] = held
        return held

    async def release(self, held: HeldLease) -> None:
        """Stop renewing ``held`` once no renewal of it is in flight."""
        if held.renewing is not None:
            with trio.CancelScope(shield=True):
                await held.renewing.wait()
        if self._held.get(held.run_id) is held:
            del self._held[held.run_id]
            if not self._held and self._wait is not None:
                # Nothing to renew: no deadline of the keeper's is left for
                # an autojumping clock to jump to.
                self._wait.deadline = math.inf

    async def keep(self) -> None:
        """Renew leases as they come due, until cancelled."""
        while True:
            first = next(iter(self._held.values()), None)
            with trio.CancelScope(deadline=math.inf if first is None else first.due) as wait:
                self._wait = wait
                await trio.sleep_forever()
            self._wait = None
            await self._renew_due()

    async def _renew_due(self) -> None:
        now = trio.current_time()
        due: list[HeldLease] = []
        for held in self._held.values():
            if held.due > now:
                break
            due.append(held)
        if not due:
            return
        for held in due:
            held.renewing = trio.Event()
        stamp = self._clock.now()
        expiry = stamp + self._ttl
        try:
            kept = await self._store.apply(
                [LockRun(held.run_id, self._engine_id, expiry, stamp) for held in due]
            )
        except (StoreError, trio.ClosedResourceError) as exc:
            # Tried again a third of the ttl later. (A closed store ends the
            # turns themselves, on their own next write.)
            logger.warning("could not renew the leases of %d runs: %s", len(due), exc)
            kept = None
        finally:
            for held in due:
                assert held.renewing is not None
                held.renewing.set()
                held.renewing = None
        self.renewals += len(due)
        after = trio.current_time() + self._ttl / 3
        for index, held in enumerate(due):
            if self._held.get(held.run_id) is not held:
                continue  # released meanwhile
            del self._held[held.run_id]
            if kept is not None and not kept[index]:
                # Another engine took the run over: this turn must write nothing.
                logger.warning("lost the lease of run %r; abandoning its turn", held.run_id)
                if held.slot.body_scope is not None:
                    held.slot.body_scope.cancel()
                continue
            held.due = after
            self._held[held.run_id] = held
