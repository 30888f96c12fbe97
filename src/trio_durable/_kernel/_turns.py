"""The driver of an engine's turns: one `Turn` per wake of a run, timed and
traced, and the repair after a turn's write that raised `StoreError` (the
database may have committed it all the same)."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from .._wire._tracing import attributes
from ._barrier import join_barrier
from ._replay import TurnDraft
from ._turn import Turn

if TYPE_CHECKING:
    from .._wire._messages import Task
    from ._runtime import Runtime
    from ._scheduler import Slot


@final
class Turns:
    """Runs the turns of an engine's runs (what its scheduler drives)."""

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        # The turn whose last write raised StoreError, by run: it may have been
        # applied, and `repair` redoes what its effects would have done.
        self._failed_writes: dict[str, TurnDraft] = {}

    async def run(self, run_id: str, slot: Slot) -> None:
        """Run one turn of ``run_id`` in ``slot``."""
        rt = self._rt
        now = rt.clock.now()
        if slot.initial is not None:
            state, slot.initial = slot.initial, None
        else:
            began = await rt.store.begin_turn(run_id, rt.engine_id, now + rt.options.lease_ttl, now)
            rt.scheduler.signals.progress.set()
            if began is None:
                return
            state = TurnDraft(
                run=began.run,
                checkpoints={cp.seq: cp for cp in began.checkpoints},
                records={record.kind: record for record in began.records},
            )
            # Read under the lease: settled elsewhere means no result is
            # waited for here (it went to another engine, or got lost).
            rt.sent.observed(run_id, began.checkpoints, began.records)
        # The turn holds the run's lease until its last write gives it back
        # (or it is lost, or lapses): that is what the leases gauge counts.
        run = state.run
        telemetry = rt.telemetry
        telemetry.leases += 1
        try:
            if rt.tracing.enabled:
                with rt.tracing.span(
                    f"turn {run.workflow}",
                    attributes(run_id=run.id, workflow=run.workflow, namespace=run.namespace),
                ):
                    await Turn(rt, state, slot, self._failed_writes).run(now)
            else:
                await Turn(rt, state, slot, self._failed_writes).run(now)
        finally:
            telemetry.leases -= 1
        # Turns cut off by an error are not timed: their length says nothing.
        telemetry.metrics.observe_turn(run.workflow, rt.clock.now() - now)

    async def repair(self, run_id: str) -> None:
        """After a turn's write raised StoreError, do what its effects would
        have done if it was applied anyway (the database may commit a write
        whose answer is lost): send the tasks whose checkpoints are now
        recorded as sent, wake the children it created, and wake the parent a
        final write settled. Each of these is harmless if the write did not
        apply: a task is sent only if its checkpoint says so, and a wake only
        costs a turn.

        Its callers here are woken first, before any read that may fail
        too: a value the run published or an update's outcome the write
        may have committed (this engine's watch skips the announcement the
        write carried, and on a store that announces writes its callers
        read only when told), and its stream's readers. A wake only costs
        them a read."""
        turn = self._failed_writes.pop(run_id, None)
        if turn is None:
            return
        rt = self._rt
        rt.endings.changed(run_id)
        rt.features.committed(run_id)
        tasks: list[Task] = []
        for _, task in turn.dispatch:
            found = await rt.store.get_checkpoints(run_id, task.seq, task.seq)
            cp = found[0] if found else None
            if (
                cp is not None
                and cp.status == "pending"
                and cp.attempts == task.attempt
                and cp.started_at is not None
            ):
                tasks.append(task)
        if tasks:
            await rt.dispatcher.send(tasks)
        for child in turn.wake_after:
            rt.scheduler.wake(child)
        run = await rt.store.get_run(run_id)
        if (
            run is not None
            and run.done
            and run.parent_id is not None
            and run.parent_seq is not None
        ):
            found = await rt.store.get_checkpoints(run.parent_id, run.parent_seq, run.parent_seq)
            settled = found[0] if found else None
            if settled is not None and settled.status != "pending":
                await rt.features.settled(rt, [settled])
                for parent in await join_barrier(rt.store, [settled]):
                    rt.scheduler.wake(parent)
        if run is not None and run.done:
            rt.sent.run_ended(run_id)
            rt.endings.ended(run_id)
