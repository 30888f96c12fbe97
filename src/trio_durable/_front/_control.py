"""Run control from outside a run: reading one, signalling, cancelling,
terminating and retrying it.

`Engine` and `Client` share these. Each checks its input and the run, then
writes in one batch with what its caller adds (``also``: the announcement
that wakes the run on an engine in another process), and returns what the
caller may wake itself. Nothing is written when a check fails.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from .._base import _serde
from .._base._bounds import check_name
from .._base._exceptions import InvalidRunStateError, UsageError
from .._base._records import (
    ACTIVE_STATUSES,
    TERMINAL_STATUSES,
    CheckpointStatus,
    Run,
    RunStatus,
    signal_token,
)
from .._features.children._children import cancel_request
from .._features.lifecycle._lifecycle import latest_generation
from .._features.lifecycle._saga import plan_retry
from .._features.steps._remote import resend_on_retry
from .._kernel._cancellation import TERMINATE, terminate_record
from .._kernel._decision_record import decision_of
from .._kernel._run_reads import Also as Also
from .._kernel._run_reads import read_run as read_run
from .._kernel._run_reads import write_nothing
from .._stores._base import WriteConflict
from .._stores._ops import ClaimCheckpoint, DeliverSignal, Op, UpdateRun
from .._stores._record_ops import ClaimRecord, PutRecord
from .._wire._messages import MAX_SEQ

if TYPE_CHECKING:
    from .._stores._base import Store
    from ._app import App

RETRYABLE: Final[frozenset[RunStatus]] = frozenset({"failed", "dead"})
_PAGE: Final = 500
_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)


async def signal_run(
    store: Store,
    now: float,
    run_id: str,
    name: str,
    payload: Any,
    namespace: str | None,
    also: Also = write_nothing,
) -> tuple[Run, bool]:
    """Deliver the signal ``name`` to a run, or buffer it for the run's next
    wait of that name. Returns the run and whether a wait of it took the
    signal (then the run needs a turn, and is made due in the store).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run already ended.
      SerializationError: The payload cannot be serialized.
      UsageError: ``name`` is not a non-empty string.
    """
    check_name("signal name", name)
    payload_json = _serde.dumps(payload)
    run = await latest_generation(store, await read_run(store, run_id, namespace))
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run_id!r} is {run.status}; it takes no signals")
    deliver = DeliverSignal(signal_token(run.id, name), payload_json, now)
    [waiter, *_] = await store.apply([deliver, *also([run])])
    if waiter is not None:
        # Due now in the store, so that an engine opened later (or one that
        # missed the announcement) resumes the run at once, not when its
        # reconcile pass finds it; a run whose turn is in flight is left
        # alone (that turn's end would overwrite its wake time). A crash
        # between the two writes leaves the reconcile pass to find it.
        due = UpdateRun(run.id, {"wake_at": now}, expect_status=_WAITING, strict=False)
        await store.apply([due])
    return run, waiter is not None


_WAITING: Final[frozenset[RunStatus]] = frozenset({"suspended"})


async def cancel_run(
    store: Store,
    now: float,
    run_id: str,
    compensate: bool,
    namespace: str | None,
    also: Also = write_nothing,
) -> Run:
    """Mark a run ``cancelling`` (with its undos to run first if
    ``compensate``); returns the run as read before.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run already ended (or ended meanwhile).
    """
    run, ops = await cancel_ops(store, now, run_id, compensate, namespace)
    try:
        await store.apply([*ops, *also([run])])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run_id!r} ended before it could be cancelled") from exc
    return run


async def cancel_ops(
    store: Store, now: float, run_id: str, compensate: bool, namespace: str | None
) -> tuple[Run, list[Op]]:
    """The run `cancel_run` cancels, as read, and the writes that do it
    (which raise `WriteConflict` if it ended meanwhile).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run already ended.
    """
    run = await latest_generation(store, await read_run(store, run_id, namespace))
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run_id!r} is {run.status}; it cannot be cancelled")
    return run, [attrs.evolve(cancel_request(run.id, compensate, now), strict=True)]


async def terminate_run(
    store: Store,
    now: float,
    run_id: str,
    reason: str | None,
    namespace: str | None,
    also: Also = write_nothing,
) -> Run:
    """Ask a run to end ``terminated``: it is marked ``cancelling`` with a
    `TERMINATE` record, in one write, and its next turn (on any engine of
    the store, whether or not it has the workflow) ends it without running
    anything of its body. Returns the run as read before.

    A turn of it in flight elsewhere is fenced as a cancel fences it: its
    write expects the run ``running``, so it records the steps it did (as
    history) and leaves the run ``cancelling`` to the turn that ends it.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run already ended (or ended meanwhile), or
        a terminate of it was already asked for.
      UsageError: ``reason`` is not a string.
    """
    run, ops = await terminate_ops(store, now, run_id, reason, namespace)
    try:
        await store.apply([*ops, *also([run])])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run_id!r} ended before it could be terminated") from exc
    return run


async def terminate_ops(
    store: Store, now: float, run_id: str, reason: str | None, namespace: str | None
) -> tuple[Run, list[Op]]:
    """The run `terminate_run` terminates, as read, and the writes that do
    it (which raise `WriteConflict` if it ended meanwhile).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run already ended, or a terminate of it
        was already asked for.
      UsageError: ``reason`` is not a string.
    """
    if reason is not None and not isinstance(reason, str):
        raise UsageError(f"a terminate's reason is a string, not {type(reason).__name__}")
    run = await latest_generation(store, await read_run(store, run_id, namespace))
    if run.status in TERMINAL_STATUSES:
        raise InvalidRunStateError(f"run {run_id!r} is {run.status}; it cannot be terminated")
    if run.status == "cancelling" and any(
        record.kind == TERMINATE for record in await store.get_records(run.id)
    ):
        raise InvalidRunStateError(f"run {run_id!r} is being terminated already")
    request = UpdateRun(
        run.id,
        {"status": "cancelling", "compensate": False, "updated_at": now},
        expect_status=ACTIVE_STATUSES,
    )
    return run, [request, PutRecord(terminate_record(run.id, reason, now))]


async def retry_run(
    store: Store,
    app: App,
    now: float,
    run_id: str,
    namespace: str | None,
    also: Also = write_nothing,
) -> list[Run]:
    """Put a failed or dead run back to ``pending`` from its checkpoints
    (see `Engine.retry`), with the failed children it retries; or send
    again the remote steps a suspended run waits on. Returns the runs to
    wake, the retried run last.

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      InvalidRunStateError: The run is neither failed nor dead, nor
        suspended with remote steps pending, or changed meanwhile; nothing
        changed.
    """
    run = await read_run(store, run_id, namespace)
    if run.status == "suspended":
        return await _resend_pending(store, now, run, also)
    ops, wakes = await retry_ops(store, app, now, run)
    try:
        await store.apply([*ops, *also(wakes)])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run_id!r} changed while being retried") from exc
    return wakes


async def retry_ops(store: Store, app: App, now: float, run: Run) -> tuple[list[Op], list[Run]]:
    """The writes that retry ``run``, failed or dead, from its checkpoints
    (which raise `WriteConflict` if it changed meanwhile), and the runs
    they wake, ``run`` last.

    Raises:
      InvalidRunStateError: The run is neither failed nor dead (the
        message names the way out for a suspended one).
    """
    if run.status not in RETRYABLE:
        raise InvalidRunStateError(
            f"run {run.id!r} is {run.status}; only failed or dead runs, or suspended runs"
            " waiting on remote steps, can be retried"
        )
    ops: list[Op] = []
    wakes: list[Run] = []
    await plan_retry(store, app, now, run, ops, wakes, RETRYABLE)
    return ops, wakes


async def _resend_pending(store: Store, now: float, run: Run, also: Also) -> list[Run]:
    """Retry a suspended run: each remote step (or decision task) it waits
    on is sent again as a new attempt, or at once if its send was refused
    (`resend_on_retry`), in one write of claims that makes the run due now.

    Raises:
      InvalidRunStateError: It waits on no remote step, or changed meanwhile.
    """
    ops: list[Op] = []
    offset = 0
    while True:
        page = await store.find_checkpoints(
            run.id, -MAX_SEQ, MAX_SEQ, statuses=_PENDING, offset=offset, limit=_PAGE
        )
        for cp in page:
            again = resend_on_retry(cp)
            if again is not None:
                ops.append(ClaimCheckpoint(again, attempt=cp.attempts))
        if len(page) < _PAGE:
            break
        offset += _PAGE
    decision = decision_of({record.kind: record for record in await store.get_records(run.id)})
    again_decision = None if decision is None else resend_on_retry(decision)
    if decision is not None and again_decision is not None:
        ops.append(ClaimRecord(again_decision, attempt=decision.attempts))
    if not ops:
        raise InvalidRunStateError(
            f"run {run.id!r} is suspended and waits on no remote step; it cannot be retried"
        )
    changes: dict[str, Any] = {"wake_at": now, "updated_at": now}
    ops.append(UpdateRun(run.id, changes, expect_status=frozenset({"suspended"})))
    retried = attrs.evolve(run, wake_at=now, updated_at=now)
    try:
        await store.apply([*ops, *also([retried])])
    except WriteConflict as exc:
        raise InvalidRunStateError(f"run {run.id!r} changed while being retried") from exc
    return [retried]
