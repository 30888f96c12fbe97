"""The turn of a cancelling run that replays its body to deliver
`Cancelled` (see `_cancellation`), before the cancel ends the run."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from ..._base import _serde
from ..._base._exceptions import Cancelled, StoreError
from ..._base._on_error import active_handoff
from ..._base._records import ACTIVE_STATUSES
from ..._kernel._cancellation import CancelDelivery, recorded_delivery
from ..._kernel._markers import body_seqs
from ..._kernel._replay import Replay, Suspend
from ._lifecycle import ContinueAsNew

if TYPE_CHECKING:
    from ..._kernel._scheduler import Slot
    from ..._kernel._turn import Turn

logger = logging.getLogger("trio_durable")


async def deliver_cancel(
    turn: Turn, slot: Slot, renew_lease: Callable[[], Awaitable[None]]
) -> bool:
    """Replay a cancelling run's body to deliver `Cancelled` to it (see the
    module's docstring). Returns True if the turn is over (the body was
    interrupted, or its cleanup waits: a later turn takes it up), False
    when the cancel goes on to end the run."""
    rt, state = turn.runtime, turn.state
    run = state.run
    wf = rt.app.find_workflow(run.workflow, run.version)
    if (
        wf is None
        or wf.remote
        or not body_seqs(state.checkpoints)
        or active_handoff(state.checkpoints) is not None
    ):
        # No body here, none that recorded anything yet (a run waiting for
        # its admission, its debounce window, its first turn), or one that
        # already failed and was handed to an on-error handler: there is
        # nothing to clean up, and its body must not run now.
        return False
    replay = Replay.on_engine(rt, state)
    replay.cancellation = CancelDelivery(recorded_delivery(state.records))
    ctx = rt.app.context(replay)
    failure: StoreError | None = None
    waits: Suspend | None = None
    interrupted = True
    async with trio.open_nursery() as nursery:
        nursery.start_soon(renew_lease)
        with trio.CancelScope() as scope:
            slot.body_scope = scope
            try:
                waits = await _run_body(wf.fn, ctx, run.id, run.input)
            except StoreError as exc:
                failure = exc
            interrupted = False
        slot.body_scope = None
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    if not interrupted:
        if waits is None or state.nondeterminism is not None:
            return False
        # The cleanup waits (a timer, a signal, a remote step, a child):
        # suspend the run as any waiting run; its `cancelled_at` record
        # makes the turn that wakes it go on with the cleanup.
        await turn.suspend(waits, cleanup=True)
        return True
    # Interrupted (another cancel, or the lease was lost): keep what the
    # cleanup did, fenced by the lease, and let the next turn go on.
    slot.again = True
    if state.ops and state.nondeterminism is None:
        results = await turn.write(turn.fence({}, ACTIVE_STATUSES))
        if results is not None:
            await turn.after_commit(results)
    else:
        await rt.store.release_run_lock(run.id, rt.engine_id)
    return True


async def _run_body(
    fn: Callable[..., Awaitable[Any]], ctx: Any, run_id: str, input: str
) -> Suspend | None:
    """Run the body to its end; the `Suspend` its cleanup raised, if it
    waits."""
    try:
        args = _serde.load_args(input, fn, skip=1)
        await fn(ctx, *args)
    except Suspend as suspend:
        # Before the delivery, every operation replays a settled outcome:
        # only a cleanup operation suspends.
        return suspend
    except (Cancelled, ContinueAsNew):
        pass
    except StoreError:
        raise
    except Exception as exc:
        logger.warning("run %r raised in its cleanup after its cancellation: %r", run_id, exc)
    return None
