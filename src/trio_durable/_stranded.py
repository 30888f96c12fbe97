"""Runs whose remote steps nothing would move on: looked for once, when an
engine opens.

A run suspended on a remote step (or on a remote workflow's decision task)
waits for its result, and has no due time unless ``remote_redispatch``
gave it one. Two kinds of such runs need a turn that nothing else would
give them:

- those with an attempt out on a broker that keeps nothing across its own
  process (`Broker.durable` is False) and is not this engine's own: the
  engine that sent it was killed, or closed with its memory broker, and
  the task went with it. Their turn sends the attempt again at once, as a
  new attempt (see `_remote.out_verdict`);
- with ``remote_redispatch`` on this engine, those with an attempt out
  whose lost deadline is not the one this engine's setting gives (sent
  while it was off, or set otherwise): their turn sets it, or sends the
  attempt again if it has passed.

An engine whose broker is not durable, or that has ``remote_redispatch``,
reads the suspended and cancelling runs once as it opens, a page at a time
(`PAGE` runs, and a page of each one's pending checkpoints), and wakes
these; engines with a durable broker and no ``remote_redispatch`` skip
it. `Engine.drain` waits for the pass.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

import trio

from ._exceptions import StoreError
from ._records import Checkpoint, CheckpointStatus, RunFilter
from ._wire import MAX_SEQ

if TYPE_CHECKING:
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

PAGE: Final = 200
"""Runs read at a time, and pending checkpoints of one run."""

_WAITING: Final = RunFilter(statuses=frozenset({"suspended", "cancelling"}))
_STORE_TRIES: Final = 6
_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)


def needs_turn(rt: Runtime, cp: Checkpoint) -> bool:
    """Whether a pending checkpoint's attempt that is out needs a turn of
    its run now: lost with its broker, or judged by another lost deadline
    than this engine's ``remote_redispatch`` gives."""
    if cp.kind not in ("remote", "decision") or cp.started_at is None:
        return False
    if rt.dispatcher.carrier.lost(cp):
        return True
    policy = rt.options.remote_redispatch
    return policy is not None and cp.wake_at != cp.started_at + policy[0]


async def wake_stranded(rt: Runtime, task_status: trio.TaskStatus[None]) -> None:
    """Wake the runs this engine finds stranded (see the module), once.

    Started before the due-run poller; reports started at once, and holds
    the engine busy (for `Engine.drain`) until the pass is over.
    """
    if rt.dispatcher.carrier.durable and rt.options.remote_redispatch is None:
        task_status.started()
        return
    with rt.scheduler.settling():
        task_status.started()
        woken = 0
        cursor: tuple[float, str] | None = None
        failures = 0
        while True:
            try:
                runs = await rt.store.find_runs(_WAITING, before=cursor, limit=PAGE)
                for run in runs:
                    if not rt.scheduler.has_turn(run.id) and await _stranded(rt, run.id):
                        woken += 1
                        rt.scheduler.wake(run.id)
            except StoreError as exc:
                failures += 1
                if failures >= _STORE_TRIES:
                    logger.error("could not look for runs with steps stranded: %s", exc)
                    return
                await trio.sleep(0.1 * 2**failures * rt.rng.uniform(0.5, 1.0))
                continue
            if len(runs) < PAGE:
                break
            cursor = (runs[-1].created_at, runs[-1].id)
        if woken:
            logger.warning("woke %d runs with remote steps to send again or to judge lost", woken)


async def _stranded(rt: Runtime, run_id: str) -> bool:
    offset = 0
    while True:
        page = await rt.store.find_checkpoints(
            run_id, -MAX_SEQ, MAX_SEQ, statuses=_PENDING, offset=offset, limit=PAGE
        )
        if any(needs_turn(rt, cp) for cp in page):
            return True
        if len(page) < PAGE:
            return False
        offset += PAGE
