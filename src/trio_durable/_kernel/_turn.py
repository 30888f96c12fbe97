"""The turn: one run, leased, replayed, and written in one batch.

A turn leases the run, reads its checkpoints, replays the body (see
`_context`) until it completes, fails, or reaches a durable wait, and then
writes everything it did in one atomic batch, fenced by the lease, which
also gives the lease back. Effects that must follow a write (sending the
tasks it recorded, starting the children it created, waking a parent
through the join barrier, waking the run again for a signal that was
already buffered) happen only after that batch committed. While the body
runs, the lease is renewed; a turn that loses it writes nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._base import _serde
from .._base._exceptions import LeaseLostError, NonDeterminismError, StoreError
from .._base._failures import error_info
from .._base._frames import folded_text
from .._base._on_error import RETIRED_PREFIX
from .._base._records import (
    ACTIVE_STATUSES,
    LATEST_VERSION,
    CheckpointStatus,
    ErrorInfo,
    Run,
    RunStatus,
    signal_token,
)
from .._stores._base import WriteConflict
from .._stores._ops import Op, RemoveSignalWaiter, UpdateRun, WaitSignal
from .._stores._record_ops import SettleRecord
from ._cancellation import in_cleanup, terminate_reason
from ._decision_record import DECISION, decision_of
from ._decision_turn import cancel_remote, decision_route, remote_turn
from ._replay import ContinueAsNew, Replay, Suspend, TurnDraft
from ._wakes import announce, announces_ends

if TYPE_CHECKING:
    from .._base._observe import EventKind
    from ._definitions import Workflow
    from ._runtime import Runtime
    from ._scheduler import Slot

logger = logging.getLogger("trio_durable")

WRITE_CHUNK: Final = 200
_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)
_CANCELLING: Final[frozenset[RunStatus]] = frozenset({"cancelling"})
_RUNNING: Final[frozenset[RunStatus]] = frozenset({"running"})
# What the write that ends a run expects it to be. A run taken over too often
# is dead whether or not it was told to cancel (expecting it running would
# loop its turns on a write conflict).
_END_EXPECTS: Final[dict[RunStatus, frozenset[RunStatus]]] = {
    "cancelled": _CANCELLING,
    "terminated": _CANCELLING,
    "dead": frozenset({"running", "cancelling"}),
}
_UNKNOWN_VERSION_BACKOFF: Final = 60.0


@final
class Turn:
    """One turn of one run: what it read and collected (``state``), and the
    writes that end it.

    Attributes:
      runtime: The engine's parts.
      state: What the turn read and is about to write.
    """

    def __init__(
        self,
        runtime: Runtime,
        state: TurnDraft,
        slot: Slot,
        failed_writes: dict[str, TurnDraft],
    ) -> None:
        self.runtime = runtime
        self.state = state
        self._slot = slot
        self._failed_writes = failed_writes

    async def run(self, now: float) -> None:
        """Take the run on from where its record stands."""
        rt, state, slot = self.runtime, self.state, self._slot
        run = state.run
        if run.recoveries > rt.options.max_recoveries:
            error = ErrorInfo(
                message=f"run was taken over {run.recoveries} times from engines that died",
                code="dead",
            )
            await self.end("dead", error=error)
            return
        if run.status != "cancelling" and in_cleanup(state.records):
            # Its cleanup waited, suspended: it is being cancelled again.
            state.ops.append(UpdateRun(run.id, {"status": "cancelling"}, expect_owner=rt.engine_id))
            state.run = attrs.evolve(run, status="cancelling")
        # A deadline that passed makes the run cancelling.
        rt.features.turn_starts(self, now)
        run = state.run
        if run.status == "cancelling" and (reason := terminate_reason(state.records)):
            # Terminated: it ends now, its body, compensation and cleanup
            # never run (not even a cleanup a cancel began).
            await self._finish_cancel(terminated=reason)
            return
        if run.status == "cancelling":
            # Cancelled before it ever ran here, it still ends as the version
            # it would have run (its history and views name it).
            run = self._pin_version(run)
            # Its body's cleanup runs, or waits.
            if await rt.features.cancel_turn(self, slot, self._renew_lease):
                return
            route = await decision_route(rt, run)
            if route is not None and await cancel_remote(self, route, now):
                return
            await self._finish_cancel(compensated=route is not None)
            return
        # It follows its on-error handler, or waits for admission.
        if await rt.features.take_turn(self, now):
            return
        run = self._pin_version(run)
        route = await decision_route(rt, run)
        if route is not None:
            await remote_turn(self, route, now)
            return
        if not rt.app.has_workflow(run.workflow, run.version):
            # Another engine of a newer or older deploy may know it: leave the
            # run untouched but for a later wake. The backoff holds on this
            # engine's own clock too: an engine that has the workflow may
            # write a due time this engine's clock already passed (see
            # `_passed_on`), and taking the run again at once would hand it
            # back and forth for ever.
            rt.passed_on.passed(run.id, rt.clock.to_trio(now + _UNKNOWN_VERSION_BACKOFF))
            logger.warning(
                "run %r needs workflow %r version %r, which this engine lacks",
                run.id,
                run.workflow,
                run.version,
            )
            await self.write(
                UpdateRun(
                    run.id,
                    {
                        "status": "suspended",
                        "wake_at": now + _UNKNOWN_VERSION_BACKOFF,
                        "lease_owner": None,
                        "lease_expiry": None,
                    },
                    expect_status=frozenset({"running"}),
                    expect_owner=rt.engine_id,
                ),
                # An engine watching the store that has it takes the run
                # at once, rather than when this backoff ends.
                *announce(rt.store, rt.engine_id, "wake", [run]),
            )
            return
        wf = rt.app.get_workflow(run.workflow, run.version)
        replay = Replay.on_engine(rt, state)
        ctx = rt.app.context(replay)
        after_body = await rt.features.before_body(self, replay, now)
        outcome: tuple[str, Any] = ("interrupted", None)
        held = rt.leases.hold(run.id, slot)
        try:
            with trio.CancelScope(deadline=rt.features.body_deadline(self, now)) as scope:
                slot.body_scope = scope
                outcome = await self._run_body(wf, ctx)
            slot.body_scope = None
        finally:
            await rt.leases.release(held)
        kind, value = outcome
        if kind in ("suspended", "completed") and state.nondeterminism is None:
            for then in after_body:
                await then(kind == "completed")
        if kind == "store_error":
            raise value
        if kind == "interrupted":
            # cancel() interrupted the body (or the lease was lost): let the
            # next turn see the cancellation. Keep the steps the body did
            # complete, since a cancel with compensation must undo them too;
            # the lease fences that write, so a lost lease writes nothing.
            slot.again = True
            if state.ops and state.nondeterminism is None:
                results = await self.write(self.fence({}, ACTIVE_STATUSES))
                if results is not None:
                    await self.after_commit(results)
            else:
                await rt.store.release_run_lock(run.id, rt.engine_id)
        elif kind == "suspended":
            await self.suspend(value)
        elif kind == "completed":
            await self.end("completed", output=value)
        elif kind == "continued":
            await rt.features.continue_run(self, value)
        else:
            await self._fail(replay, value, wf)

    def _pin_version(self, run: Run) -> Run:
        """A run started by name where no app told the version runs the one
        registered last here, written with this turn's writes so that every
        later turn, here or elsewhere, replays the same one."""
        rt, state = self.runtime, self.state
        if run.version != LATEST_VERSION or not any(
            wf.name == run.workflow for wf in rt.app.workflows
        ):
            return run
        version = rt.app.get_workflow(run.workflow).version
        state.run = attrs.evolve(run, version=version)
        state.ops.append(UpdateRun(run.id, {"version": version}, expect_owner=rt.engine_id))
        return state.run

    async def _run_body(self, wf: Workflow[..., Any], ctx: object) -> tuple[str, Any]:
        state = self.state
        try:
            args = _serde.load_args(state.run.input, wf.fn, skip=1)
            value = await wf.fn(ctx, *args)
            if state.nondeterminism is not None:
                return ("failed", state.nondeterminism)
            output = _serde.dumps(value)
        except Suspend as suspend:
            if state.nondeterminism is not None:
                return ("failed", state.nondeterminism)
            return ("suspended", suspend)
        except ContinueAsNew as cont:
            return ("failed", state.nondeterminism) if state.nondeterminism else ("continued", cont)
        except StoreError as exc:
            # A durable operation's own write failed: that is no failure of
            # the run; the turn is abandoned and run again.
            return ("store_error", exc)
        except Exception as exc:
            if state.nondeterminism is not None:
                return ("failed", state.nondeterminism)
            return ("failed", exc)
        return ("completed", output)

    async def _renew_lease(self) -> None:
        """Keep the run's lease until cancelled (the engine's lease keeper
        renews it; see `_leases`)."""
        leases = self.runtime.leases
        held = leases.hold(self.state.run.id, self._slot)
        try:
            await trio.sleep_forever()
        finally:
            await leases.release(held)

    def fence(self, changes: dict[str, Any], expect: frozenset[Any]) -> UpdateRun:
        """The write that changes the run as ``changes`` say and gives the
        lease back, applied only while this engine holds the lease and the
        run's status is in ``expect``."""
        changes = {
            **changes,
            "lease_owner": None,
            "lease_expiry": None,
            "updated_at": self.runtime.clock.now(),
        }
        return UpdateRun(
            self.state.run.id, changes, expect_status=expect, expect_owner=self.runtime.engine_id
        )

    async def write(self, *final_ops: Op) -> list[Any] | None:
        """Commit the turn's writes; None if the run changed under it.

        If a cancel moved the run to ``cancelling`` meanwhile, the turn's
        writes are committed without ``final_ops`` (and their effects
        follow), and None is returned: a step that ran is always recorded.

        A turn that records a wide fan writes its checkpoints in chunks of
        `WRITE_CHUNK`, each fenced by the lease, before the final write that
        suspends the run: a database transaction stays bounded, and every
        member is durable before any of its tasks is sent.
        """
        rt, turn = self.runtime, self.state
        ops = turn.ops
        results: list[Any] = []
        try:
            try:
                start = 0
                while len(ops) - start > WRITE_CHUNK:
                    fence = UpdateRun(turn.run.id, {}, expect_owner=rt.engine_id)
                    results.extend(
                        (await rt.store.apply([*ops[start : start + WRITE_CHUNK], fence]))[:-1]
                    )
                    start += WRITE_CHUNK
                try:
                    results.extend(await rt.store.apply([*ops[start:], *final_ops]))
                    return results
                except WriteConflict:
                    # A cancel() moved the run to cancelling while the turn ran
                    # (on another engine, or here after the body's last step,
                    # where no interrupt reaches it). The steps this turn
                    # completed did run: record them all the same, so that the
                    # cancel undoes them, in one write fenced by the lease
                    # that leaves the run for the next turn to end.
                    kept = await rt.store.apply([*ops[start:], self.fence({}, _CANCELLING)])
                    results.extend(kept[:-1])
            except StoreError as exc:
                if not isinstance(exc, LeaseLostError | WriteConflict):
                    self._failed_writes[turn.run.id] = turn
                # Chunks that did commit recorded their members as sent, so no
                # later turn sends them: send them now, or a fan waits forever.
                committed = [
                    task
                    for index, task in turn.dispatch
                    if index < len(results) and results[index] is not False
                ]
                if committed:
                    await rt.dispatcher.send(committed)
                raise
        except LeaseLostError:
            logger.warning("run %r was taken over; dropping its turn", turn.run.id)
            return None
        except WriteConflict:
            # Typically a cancel() landed during the turn: run another turn,
            # which sees the new status.
            self._slot.again = True
            return None
        self._slot.again = True
        await self.after_commit(results)
        return None

    async def after_commit(self, results: list[Any]) -> None:
        """The effects of the turn's writes, once they committed."""
        rt, turn = self.runtime, self.state
        if turn.dispatch:
            tasks = [task for index, task in turn.dispatch if results[index] is not False]
            await rt.dispatcher.send(tasks)
        for child in turn.started_children:
            rt.telemetry.emit_run("run.started", child)
        for run_id in turn.cancelled_children:
            rt.scheduler.interrupt(run_id)
        # By id: a turn that starts a fan of thousands wakes each of them.
        started = {child.id: child for child in turn.started_children}
        for run_id in turn.wake_after:
            leased = _leased_child(started, run_id, rt.engine_id)
            initial = None if leased is None else TurnDraft(run=leased, checkpoints={})
            rt.scheduler.wake(run_id, initial=initial)
        # What the turn itself decided (a lost step, a fail_fast fan that
        # froze its members, an attempt sent again) waits for no result.
        rt.sent.observed(turn.run.id, turn.checkpoints.values(), turn.records.values())
        for callback in turn.committed:
            callback()
        rt.features.committed(turn.run.id)

    async def suspend(self, suspend: Suspend, *, cleanup: bool = False) -> None:
        """Suspend the run with the turn's writes, as ``suspend`` says; with
        ``cleanup``, a cancelling run whose cleanup waits (its deadline no
        longer wakes it: the cancel is under way)."""
        # Its traceback holds the body's frames and their locals: dropped
        # before the write, so that the turns waiting for a group commit do
        # not keep them alive for every collection to walk. A suspend is
        # read, never shown.
        suspend.__traceback__ = None
        rt, turn = self.runtime, self.state
        run = turn.run
        if cleanup:
            wake_at, expect = suspend.wake_at, _CANCELLING
        else:
            wake_at = rt.features.wake_by(self, suspend.wake_at)
            expect = _RUNNING
        results = await self.write(self.fence({"status": "suspended", "wake_at": wake_at}, expect))
        if results is None:
            return
        await self.after_commit(results)
        if any(
            isinstance(op, WaitSignal) and result is not None
            for op, result in zip(turn.ops, results, strict=False)
        ):
            # A buffered signal was handed over by the same write.
            self._slot.again = True
        rt.telemetry.emit_run("run.suspended", run, wake_at=wake_at)
        if wake_at is not None:
            rt.scheduler.signals.wake_at(wake_at)
        if suspend.watch is not None:
            # A remote result or a child's end that settled the last pending
            # checkpoint while this turn held the lease woke nobody (the
            # engine that settled it could not take the run): look once
            # more, now that the lease is given back.
            first, last = suspend.watch
            pending = await rt.store.count_checkpoints(run.id, first, last, _PENDING, limit=1)
            if not pending:
                self._slot.again = True
        if suspend.recheck is not None and await suspend.recheck(rt.store):
            self._slot.again = True

    async def _fail(self, replay: Replay, exc: BaseException, wf: Workflow[..., Any]) -> None:
        rt = self.runtime
        error = error_info(exc, traceback_limit=rt.options.traceback_limit)
        if not isinstance(exc, NonDeterminismError):
            await self._compensate(replay)
        # An on-error route may hand it to its handler.
        if await rt.features.failed(self, wf, error):
            return
        await self.end("failed", error=error)

    async def _compensate(self, replay: Replay) -> None:
        """Run the saga's undos, renewing the lease meanwhile: undos and their
        retries may outlast it, and a lapsed lease would let another engine
        take the run over and run the same undos again."""
        failure: StoreError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._renew_lease)
            try:
                await self.runtime.features.undo(replay)
            except StoreError as exc:
                # Raised after the nursery, so it is not wrapped in a group.
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def end(
        self,
        status: RunStatus,
        *,
        output: str | None = None,
        error: ErrorInfo | None = None,
        returned_by: tuple[str, str] | None = None,
    ) -> None:
        """End the run as ``status``, settling its parent's checkpoint in the
        same write and waking the parent through the join barrier. A run that
        completes writes the turn's `TurnDraft.end_ops` with its end, and
        only with it (not if a cancel landed)."""
        rt, turn = self.runtime, self.state
        run = turn.run
        expect = _END_EXPECTS.get(status, _RUNNING)
        ops: list[Op] = [
            self.fence(
                {"status": status, "output": output, "error": error, "wake_at": None}, expect
            ),
        ]
        if status == "completed":
            ops.extend(turn.end_ops)
        if announces_ends(rt.store):
            # For callers of `result` in other processes.
            ops.extend(announce(rt.store, rt.engine_id, "end", [run]))
        # The admission given back, the parent's checkpoint settled.
        ops.extend(rt.features.end_ops(self, status, output, error, returned_by))
        results = await self.write(*ops)
        if results is None:
            return
        rt.sent.run_ended(run.id)
        await self.after_commit(results)
        if status in ("failed", "dead") and error is not None:
            _log_failed_run(run, status, error)
            rt.tracing.failed(f"run {status}: {error.message}")
        kind: EventKind = {
            "completed": "run.completed",
            "cancelled": "run.cancelled",
            "terminated": "run.terminated",
        }.get(status, "run.failed")  # type: ignore[assignment]
        rt.telemetry.emit_run(
            kind,
            run,
            **({} if error is None else {"error": error.message, "code": error.code}),
        )
        rt.endings.ended(
            run.id,
            attrs.evolve(
                run,
                status=status,
                output=output,
                error=error,
                wake_at=None,
                lease_owner=None,
                lease_expiry=None,
            ),
        )
        # The runs let in, the parent woken.
        await rt.features.ended(self, ops, results)

    async def _finish_cancel(
        self, *, compensated: bool = False, terminated: str | None = None
    ) -> None:
        """End a cancelling run ``cancelled``, after its undos if asked for;
        or, ``terminated`` (with that reason), ``terminated`` without them.
        Either way its signal waits go, a decision it waits for changes
        nothing when it comes back, and its children are cancelled."""
        rt, turn = self.runtime, self.state
        run = turn.run
        now = rt.clock.now()
        if terminated is not None:
            error = ErrorInfo(message=terminated, code="terminated")
        else:
            if run.compensate and not compensated:
                await self._compensate(Replay.on_engine(rt, turn))
            now = rt.clock.now()
            error = rt.features.cancel_error(self) or ErrorInfo(
                message="cancelled", code="cancelled"
            )
        for cp in sorted(turn.checkpoints.values(), key=lambda cp: cp.seq):
            if cp.status != "pending" or cp.name.startswith(RETIRED_PREFIX):
                # A retired handoff's handler is no longer the run's to wait
                # for or to cancel, and its record stays as it was.
                continue
            if cp.kind == "signal":
                turn.ops.append(RemoveSignalWaiter(signal_token(run.id, cp.name)))
        decision = decision_of(turn.records)
        if decision is not None and decision.status == "pending":
            # A decision that comes back now changes nothing.
            turn.ops.append(SettleRecord(run.id, DECISION, "failed", None, error, now))
        # Its children cancelled.
        await rt.features.cancelling(self, error)
        await self.end("cancelled" if terminated is None else "terminated", error=error)


def _log_failed_run(run: Run, status: RunStatus, error: ErrorInfo) -> None:
    """Log a run's failure once, when it is written, with its traceback."""
    logger.error(
        "run %r (workflow %r) %s%s: %s%s",
        run.id,
        run.workflow,
        "failed" if status == "failed" else "is dead",
        "" if error.step is None else f" in step {error.step!r}",
        error.message,
        # trio-durable's own frames folded: the history keeps every frame.
        "" if error.traceback is None else "\n" + folded_text(error.traceback.rstrip("\n")),
        extra={"run_id": run.id, "workflow": run.workflow, "step": error.step},
    )


def _leased_child(started: dict[str, Run], run_id: str, owner: str) -> Run | None:
    """The run of a child a turn started (``started``: its started
    children by id) leased to ``owner``, as created: what its first turn
    reads, as a turn that took the lease would (a new child has no
    checkpoints). None for any other run."""
    child = started.get(run_id)
    if child is not None and child.lease_owner == owner and child.status == "running":
        return child
    return None
