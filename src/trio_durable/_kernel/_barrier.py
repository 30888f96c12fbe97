"""The join barrier: which runs to wake after their checkpoints changed.

A run waiting on checkpoints (a child, a remote step, the members of a fan)
is woken when one of them settles, so that it replays and moves on. A fan
member is the exception: while other members of its fan are still pending,
the parent would only replay to suspend again, so the barrier wakes it once
the last of them settled: once per wave, not once per member. A failure in a
``fail_fast`` fan wakes the parent at once (it cancels the rest).

Used wherever a write settles a checkpoint: the turn that ends a child (and
its repair after a write whose answer was lost), and the result consumer,
which settles remote results in batches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from .._base._exceptions import StoreError
from .._base._records import Checkpoint, CheckpointStatus
from .._stores._base import Store

logger = logging.getLogger("trio_durable")

_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)


async def join_barrier(
    store: Store, changed: Iterable[Checkpoint], *, wake_if_uncounted: bool = False
) -> list[str]:
    """The runs to wake, each once and in order, for checkpoints a write just
    changed.

    A checkpoint that is not a fan member, or is a failed member of a
    ``fail_fast`` fan, wakes its run; so does one still pending (a failed
    attempt rescheduled: the run takes up its due time). The runs of other
    fan members follow, each once no member of its fan is pending.

    Args:
      store: Where the fans' pending members are counted.
      changed: The checkpoints as the write left them.
      wake_if_uncounted: If counting a fan's members fails, wake its run
        anyway (a wake costs a turn at most) instead of raising.

    Raises:
      StoreError: A count failed, and ``wake_if_uncounted`` is False.
    """
    wakes: dict[str, None] = {}
    fans: dict[tuple[str, int, int], None] = {}
    for cp in changed:
        if (
            cp.parallel_group is None
            or cp.parallel_size is None
            or cp.status == "pending"
            or (cp.parallel_mode == "fail_fast" and cp.status == "failed")
        ):
            wakes[cp.run_id] = None
        else:
            fans[(cp.run_id, cp.parallel_group, cp.parallel_size)] = None
    for run_id, first, size in fans:
        if run_id in wakes:
            continue
        try:
            pending = await store.count_checkpoints(
                run_id, first, first + size - 1, _PENDING, limit=1
            )
        except StoreError as exc:
            if not wake_if_uncounted:
                raise
            logger.warning("could not count a fan's pending members: %s", exc)
            pending = 0
        if not pending:
            wakes[run_id] = None
    return list(wakes)
