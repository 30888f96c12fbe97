"""Runs whose payloads an engine cannot decode: reported once on the run,
and left for an engine that can.

A turn reads the run's history through the store's payload layers (a
codec's `CodecStore`, the blob store's `BlobbingStore`). When they cannot
decode it (its key is not in this engine's ring, a blob is missing or
corrupted, or this engine has no codec or no blob store for what is
marked as encoded or offloaded), `UndecodableGuard`, outermost, takes the
turn's place: it writes the reason as the run's error (code
`UNDECODABLE`, in the clear, under the layers), suspends the run until
`RETRY_AFTER` seconds on, gives its lease back (so an engine that takes
the run next takes no lapsed lease: no recovery is counted) and logs a
warning. The run is never failed for it. The next engine to take it,
when it is due or woken (a signal, a result), tries again: one that can
decode it clears the report and goes on; one that cannot leaves the same
report as it is (written once: the log says it once per engine) and
suspends the run again. (A run being cancelled keeps its status: it is
held by the engine's lease, moved to `RETRY_AFTER` seconds on, instead.)
"""

from __future__ import annotations

import logging
from typing import Any, Final

import attrs

from .._base._exceptions import BlobCorrupted, BlobNotFound, CodecError, StoreError
from .._base._records import ErrorInfo
from .._payloads._stored_payloads import undecodable
from .._stores._base import Store, TurnState
from .._stores._blob_store import BlobbingStore
from .._stores._codec import CodecStore
from .._stores._ops import UpdateRun
from .._stores._wrapping import StoreWrapper, wrapped

logger = logging.getLogger("trio_durable")

UNDECODABLE: Final = "payload_undecodable"
"""The code of the error a run carries while its payloads cannot be decoded."""

RETRY_AFTER: Final = 60.0
"""Seconds a run whose payloads could not be decoded waits before an engine
tries again (sooner if something wakes it)."""

_UNDECODABLE_ERRORS: Final = (CodecError, BlobNotFound, BlobCorrupted)

_LOGGED_MAX: Final = 10_000
"""How many runs an engine remembers having logged the report of."""


class UndecodableGuard(StoreWrapper):
    """The engine's store: ``inner`` (its payload layers over ``raw``),
    with turns whose payloads cannot be decoded reported on their run and
    skipped (see the module's docstring).

    Args:
      inner: The store with its payload layers.
      raw: The store under them, where the report is written in the clear.
    """

    def __init__(self, inner: Store, raw: Store) -> None:
        self.inner = inner
        self.raw = raw
        # Runs reported by this engine, and why: each is logged once.
        self._logged: dict[str, str] = {}

    def __repr__(self) -> str:
        return repr(self.inner)

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        try:
            state = await self.inner.begin_turn(run_id, owner, expiry, now)
        except _UNDECODABLE_ERRORS as exc:
            # The layers read the rows under the lease the store gave.
            await self._report(run_id, owner, now, exc)
            return None
        if state is None:
            return None
        problem = undecodable(state.run, state.checkpoints)
        if problem is not None:
            await self._report(run_id, owner, now, problem)
            return None
        return await self._cleared(state, owner, now)

    async def _cleared(self, state: TurnState, owner: str, now: float) -> TurnState:
        """``state``, its run's report of undecodable payloads (if it has
        one) cleared: this engine decodes them."""
        error = state.run.error
        if error is None or error.code != UNDECODABLE:
            return state
        await self.raw.apply(
            [UpdateRun(state.run.id, {"error": None}, expect_owner=owner, now=now)]
        )
        self._logged.pop(state.run.id, None)
        logger.info("run %r: its payloads are decoded here; it goes on", state.run.id)
        return attrs.evolve(state, run=attrs.evolve(state.run, error=None))

    async def _report(self, run_id: str, owner: str, now: float, problem: StoreError) -> None:
        run = await self.raw.get_run(run_id)
        if run is None or run.lease_owner != owner:
            return
        report = _report_of(problem)
        changes: dict[str, Any] = {"error": report}
        if run.status == "running":
            changes.update(
                status="suspended", wake_at=now + RETRY_AFTER, lease_owner=None, lease_expiry=None
            )
        else:
            # A run being cancelled stays so, held until its lease lapses.
            changes["lease_expiry"] = now + RETRY_AFTER
        try:
            await self.raw.apply(
                [
                    UpdateRun(
                        run_id,
                        changes,
                        expect_status=frozenset({run.status}),
                        expect_owner=owner,
                        now=now,
                    )
                ]
            )
        except StoreError as exc:
            logger.warning("run %r: its report of undecodable payloads failed: %s", run_id, exc)
            return
        if self._logged.get(run_id) != report.message:
            self._logged[run_id] = report.message
            if len(self._logged) > _LOGGED_MAX:
                del self._logged[next(iter(self._logged))]
            logger.warning("run %r: %s", run_id, report.message)


def _report_of(problem: StoreError) -> ErrorInfo:
    details: dict[str, str] = {}
    if isinstance(problem, CodecError) and problem.key_id is not None:
        details["key_id"] = problem.key_id
    if isinstance(problem, BlobNotFound | BlobCorrupted):
        details["blob"] = problem.key
    return ErrorInfo(
        message=(
            f"its payloads cannot be decoded: {problem}; the run waits for an engine that can"
            f" (tried again {RETRY_AFTER:g} s on, or when something wakes it)"
        ),
        code=UNDECODABLE,
        details=details or None,
        type=type(problem).__name__,
    )


def payload_layers_under(store: Store) -> Store:
    """The store under ``store``'s payload layers (its codec's and its blob
    store's wrappers, and the guard over them), where rows are kept as they
    are."""
    while isinstance(store, CodecStore | BlobbingStore | UndecodableGuard):
        store = store.inner
    return store


def guarded(store: Store) -> Store:
    """``store`` (an engine's, with its payload layers) wrapped in an
    `UndecodableGuard`."""
    guard: Store = wrapped(UndecodableGuard, store)(store, payload_layers_under(store))
    return guard
