"""Retention: pruning ended runs, and the records that outlive them, once
they are older than a policy says.

A record a run leaves is kept either as a row of the run (its input,
checkpoints, signals, queue entries, webhooks, pauses) or as a keyed value
that goes with it (`PutValue.run_id`: published values, streams, updates,
fan windows, claims, debounce windows): `Store.prune_runs` deletes both with
the run, in one transaction. Blobs go once no run refers to them (the
`BlobbingStore` wrapping the store sees to that as runs are pruned). Event
records belong to no run, and go by age (`Store.prune_values`).
docs/operations.md has the table of every kind of record.

`prune` deletes in batches of `Retention.batch` runs (or event records),
each batch one store write; `prune_forever` is the engine's pruner, a task
in its nursery that prunes every `Retention.interval` seconds of Trio time
(`trio.sleep`, so `MockClock` drives it) and judges ages by durable time
(the engine's `Clock`), the time the store's ``updated_at`` stamps are in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from ..._base._clock import Clock
from ..._base._exceptions import StoreError, UsageError
from ..._kernel._views import Retention
from ..._stores._base import Store
from ..events._events import EVENT_SCOPE

logger = logging.getLogger("trio_durable")


async def prune(
    store: Store,
    retention: Retention,
    now: float,
    limit: int | None = None,
    aged: Sequence[str] = (),
) -> int:
    """Delete the runs ``retention`` no longer keeps at durable time ``now``,
    at most ``limit`` (None: all), and the event records, and the values of
    the scopes of ``aged``, older than its ``events`` age (see
    `prune_events`); return how many runs were deleted.

    Raises:
      UsageError: ``retention`` is not a `Retention` or ``limit`` is not an
        integer >= 0.
      StoreError: The store failed; the batches before it stay deleted.
    """
    if not isinstance(retention, Retention):
        raise UsageError(f"prune needs a td.Retention, not {retention!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise UsageError(f"limit must be None or an integer >= 0, not {limit!r}")
    cutoffs = retention.cutoffs(now)
    total = 0
    while cutoffs and (limit is None or total < limit):
        size = retention.batch if limit is None else min(retention.batch, limit - total)
        pruned = await store.prune_runs(cutoffs, size)
        total += len(pruned)
        if len(pruned) < size:
            break
    events = await prune_events(store, retention, now, aged)
    if events:
        logger.info("pruned %d event records", events)
    return total


async def prune_events(
    store: Store, retention: Retention, now: float, aged: Sequence[str] = ()
) -> int:
    """Delete the event records older than ``retention.events`` at durable
    time ``now``, and the values of the scopes of ``aged`` (records that go
    with no run and by the same age: the states of bulk operations, whose
    scope the engine passes) last written before then, a batch per write;
    return how many."""
    if retention.events is None:
        return 0
    total = 0
    for scope in (EVENT_SCOPE, *aged):
        while True:
            deleted = await store.prune_values(scope, now - retention.events, retention.batch)
            total += deleted
            if deleted < retention.batch:
                break
    return total


async def prune_forever(
    store: Store, retention: Retention, clock: Clock, aged: Sequence[str] = ()
) -> None:
    """Prune at once, then every ``retention.interval`` seconds, forever.

    A store failure is logged and the pass is tried again an interval later:
    retention is housekeeping and must never take the engine down.
    """
    while True:
        try:
            pruned = await prune(store, retention, clock.now(), aged=aged)
        except StoreError as exc:
            logger.warning("pruning ended runs failed, trying again later: %s", exc)
        else:
            if pruned:
                logger.info("pruned %d ended runs", pruned)
        await trio.sleep(retention.interval)
