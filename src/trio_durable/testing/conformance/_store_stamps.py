"""Store checks of `Store.run_stamp`: what the console's ETags are made of."""

from __future__ import annotations

from ..._base._records import ErrorInfo, RunStamp
from ..._stores._base import Store
from ..._stores._ops import (
    ClaimCheckpoint,
    DeleteCheckpoints,
    PutCheckpoint,
    RescheduleCheckpoint,
    SettleCheckpoint,
    UpdateRun,
)
from ._store_support import OpenStore, StoreFactory, fresh_store, make_checkpoint, make_run


async def check_run_stamp_changes_with_every_write_of_the_run(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.run_stamp` is None for an unknown run; it reads the run's
    state and an aggregate of its checkpoints, stays equal while nothing is
    written (reads, writes to other runs), and changes with each write to
    the run's row and each checkpoint recorded, claimed, rescheduled,
    settled or deleted."""
    async with fresh_store(factory) as store:
        assert await store.run_stamp("missing") is None
        await store.create_run(
            make_run("r1", namespace="blue", status="suspended", created_at=1.0, updated_at=1.0)
        )
        await store.create_run(make_run("other", created_at=1.0, updated_at=1.0))
        first = await store.run_stamp("r1")
        assert first == RunStamp(
            run_id="r1", namespace="blue", status="suspended", updated_at=1.0
        ), first
        seen = [first]

        async def changed(what: str) -> RunStamp:
            stamp = await store.run_stamp("r1")
            assert stamp is not None
            assert stamp not in seen, f"the stamp did not change when {what}: {stamp}"
            seen.append(stamp)
            # Reading, and writing another run, leave it as it is.
            await store.get_checkpoints("r1")
            await store.fan_counts("r1")
            await store.apply([UpdateRun("other", {"updated_at": float(len(seen))})])
            await store.apply([PutCheckpoint(make_checkpoint("other", len(seen)))])
            assert await store.run_stamp("r1") == stamp, f"the stamp changed after {what}"
            return stamp

        await _put(store, 1, kind="remote", attempts=1, enqueued_at=2.0)
        stamp = await changed("a checkpoint was recorded")
        assert (stamp.checkpoints, stamp.pending, stamp.attempts, stamp.seq_sum) == (1, 1, 1, 1)
        assert stamp.last_enqueued_at == 2.0
        await _put(store, 2, kind="remote", status="running", attempts=1, started_at=3.0)
        stamp = await changed("a checkpoint started running")
        assert (stamp.pending, stamp.running, stamp.last_started_at) == (1, 1, 3.0)
        failure = ErrorInfo(message="try again")
        [rescheduled] = await store.apply([RescheduleCheckpoint("r1", 1, 1, failure, 9.0)])
        assert rescheduled is not None
        stamp = await changed("a checkpoint was rescheduled")
        assert stamp.attempts == 3
        [settled] = await store.apply(
            [SettleCheckpoint("r1", 1, "failed", error=failure, finished_at=4.0)]
        )
        assert settled is not None
        stamp = await changed("a checkpoint failed")
        assert (stamp.failed, stamp.last_finished_at) == (1, 4.0)
        await _put(store, 3, kind="remote", attempts=1, enqueued_at=2.0)
        await changed("a third one was recorded")
        claimed = make_checkpoint(
            "r1", 3, kind="remote", status="completed", output='"ok"', attempts=1, finished_at=4.0
        )
        assert await store.apply([ClaimCheckpoint(claimed)]) == [True]
        stamp = await changed("a checkpoint was settled by a claim, at the same time")
        assert (stamp.pending, stamp.running, stamp.completed, stamp.failed) == (0, 1, 1, 1)
        await store.apply([UpdateRun("r1", {"status": "running", "updated_at": 5.0})])
        stamp = await changed("the run's status changed")
        assert (stamp.status, stamp.updated_at) == ("running", 5.0)
        await store.apply([UpdateRun("r1", {"lease_owner": "e1", "lease_expiry": 30.0})])
        stamp = await changed("the run's lease changed (its updated_at did not)")
        assert (stamp.lease_owner, stamp.lease_expiry) == ("e1", 30.0)
        await store.apply([DeleteCheckpoints("r1", (1,))])
        stamp = await changed("a checkpoint was deleted")
        assert (stamp.checkpoints, stamp.seq_sum) == (2, 5)


async def _put(store: Store, seq: int, **fields: object) -> None:
    await store.apply([PutCheckpoint(make_checkpoint("r1", seq, **fields))])


STAMPS_CHECKS = (check_run_stamp_changes_with_every_write_of_the_run,)
