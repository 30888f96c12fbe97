"""Store checks of execution ids: a checkpoint keeps the ids of its
dispatches, and a settle or reschedule that names one applies only to a
checkpoint that holds it (see docs/writing-a-store.md)."""

from __future__ import annotations

import attrs

from ..._base._records import Checkpoint, ErrorInfo
from ..._stores._ops import (
    ClaimCheckpoint,
    CreateRun,
    PutCheckpoint,
    RescheduleCheckpoint,
    SettleCheckpoint,
)
from ._store_support import (
    OpenStore,
    StoreFactory,
    fresh_store,
    make_checkpoint,
    make_run,
)

FIRST = "0123456789abcdef0123456789abcdef"
SECOND = "fedcba9876543210fedcba9876543210"
OTHER = "00000000000000000000000000000001"


def _out(seq: int = 1, executions: tuple[str, ...] = (FIRST,)) -> Checkpoint:
    """A remote step's pending checkpoint whose attempts went out as
    ``executions``."""
    return make_checkpoint(
        seq=seq,
        kind="remote",
        name="charge",
        attempts=len(executions),
        executions=executions,
        started_at=2.0,
    )


async def check_checkpoints_keep_their_executions_and_rerun(
    factory: StoreFactory | OpenStore,
) -> None:
    """A checkpoint's ``executions`` (in order) and ``rerun`` are kept by every
    write of a whole checkpoint (put, claim, a run's own checkpoints) and
    left as they are by settles and reschedules."""
    async with fresh_store(factory) as store:
        own = attrs.evolve(_out(seq=7), rerun=True)
        await store.apply([CreateRun(make_run(status="suspended"), (own,))])
        first = _out()
        await store.apply([PutCheckpoint(first), PutCheckpoint(make_checkpoint(seq=2))])
        assert await store.get_checkpoints("r1", 1, 2) == [first, make_checkpoint(seq=2)]
        assert await store.get_checkpoints("r1", 7, 7) == [own]
        # The next dispatch of seq 1 adds its id, in the claim that sends it.
        again = attrs.evolve(first, attempts=2, executions=(FIRST, SECOND), rerun=True)
        assert await store.apply([ClaimCheckpoint(again, attempt=1)]) == [True]
        assert await store.get_checkpoints("r1", 1, 1) == [again]
        error = ErrorInfo(message="down")
        [rescheduled] = await store.apply(
            [RescheduleCheckpoint("r1", 1, 2, error, wake_at=9.0, execution=SECOND)]
        )
        assert rescheduled is not None
        assert (rescheduled.executions, rescheduled.rerun) == ((FIRST, SECOND), True)
        [settled] = await store.apply(
            [SettleCheckpoint("r1", 7, "completed", output='"v"', execution=FIRST)]
        )
        assert settled is not None
        assert (settled.executions, settled.rerun) == ((FIRST,), True)
        assert await store.get_checkpoints("r1", 7, 7) == [settled]


async def check_settle_with_an_execution_needs_one_the_checkpoint_holds(
    factory: StoreFactory | OpenStore,
) -> None:
    """A settle that names an execution applies only to a checkpoint whose
    ``executions`` hold it (any of them: a late success of an earlier
    dispatch of the same checkpoint settles it); a checkpoint with none
    (written before execution ids) takes no settle that names one."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        await store.apply(
            [
                PutCheckpoint(_out(1, (FIRST, SECOND))),
                PutCheckpoint(_out(2, (FIRST, SECOND))),
                PutCheckpoint(_out(3, ())),
                PutCheckpoint(_out(4, (SECOND,))),
            ]
        )
        results = await store.apply(
            [
                SettleCheckpoint("r1", 1, "completed", output='"x"', execution=OTHER),
                SettleCheckpoint("r1", 2, "completed", output='"x"', execution=OTHER),
                SettleCheckpoint("r1", 3, "completed", output='"x"', execution=FIRST),
                # Another checkpoint's id is not this one's.
                SettleCheckpoint("r1", 4, "completed", output='"x"', execution=FIRST),
            ]
        )
        assert results == [None, None, None, None]
        assert all(cp.status == "pending" for cp in await store.get_checkpoints("r1"))
        results = await store.apply(
            [
                # The earlier dispatch's success, and the latest's failure
                # at its attempt.
                SettleCheckpoint("r1", 1, "completed", output='"a"', execution=FIRST),
                SettleCheckpoint(
                    "r1", 2, "failed", error=ErrorInfo(message="x"), attempt=2, execution=SECOND
                ),
                # Without an execution id, as before they existed.
                SettleCheckpoint("r1", 3, "completed", output='"c"', attempt=0),
                SettleCheckpoint("r1", 4, "completed", output='"d"', execution=SECOND),
            ]
        )
        assert [None if cp is None else (cp.seq, cp.status) for cp in results] == [
            (1, "completed"),
            (2, "failed"),
            (3, "completed"),
            (4, "completed"),
        ]
        # Once settled, its own executions' duplicates change nothing.
        assert await store.apply(
            [SettleCheckpoint("r1", 1, "completed", output='"b"', execution=SECOND)]
        ) == [None]
        [one] = await store.get_checkpoints("r1", 1, 1)
        assert one.output == '"a"'


async def check_settle_or_failed_with_needs_the_execution_too(
    factory: StoreFactory | OpenStore,
) -> None:
    """``or_failed_with`` settles a checkpoint failed with that code only if
    it holds the execution the settle names."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="failed"))
        frozen = attrs.evolve(
            _out(1, (FIRST,)),
            status="failed",
            error=ErrorInfo(message="cancelled", code="fan_cancelled"),
        )
        await store.save_checkpoint(frozen)
        late = SettleCheckpoint(
            "r1", 1, "completed", output='"late"', or_failed_with="fan_cancelled", execution=OTHER
        )
        assert await store.apply([late]) == [None]
        [kept] = await store.apply([attrs.evolve(late, execution=FIRST)])
        assert kept is not None
        assert (kept.status, kept.output, kept.executions) == ("completed", '"late"', (FIRST,))


async def check_reschedule_with_an_execution_needs_one_the_checkpoint_holds(
    factory: StoreFactory | OpenStore,
) -> None:
    """A reschedule that names an execution applies only to a checkpoint
    whose ``executions`` hold it (at its attempt, as always)."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        pending = _out(1, (FIRST,))
        await store.save_checkpoint(pending)
        error = ErrorInfo(message="down")
        assert await store.apply(
            [RescheduleCheckpoint("r1", 1, 1, error, wake_at=5.0, execution=OTHER)]
        ) == [None]
        assert await store.get_checkpoints("r1") == [pending]
        [retry] = await store.apply(
            [RescheduleCheckpoint("r1", 1, 1, error, wake_at=5.0, execution=FIRST)]
        )
        assert retry == attrs.evolve(
            pending, attempts=2, errors=(error,), started_at=None, wake_at=5.0
        )


async def check_unless_rerun_skips_a_rerun_checkpoint(
    factory: StoreFactory | OpenStore,
) -> None:
    """With ``unless_rerun``, a settle or reschedule changes nothing on a
    checkpoint that is ``rerun``, and applies as usual to one that is not."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        rerun = attrs.evolve(_out(1, (FIRST,)), rerun=True)
        await store.apply(
            [
                PutCheckpoint(rerun),
                PutCheckpoint(attrs.evolve(_out(2, (FIRST,)), rerun=True)),
                PutCheckpoint(_out(3, (FIRST,))),
                PutCheckpoint(_out(4, (FIRST,))),
            ]
        )
        error = ErrorInfo(message="down")
        results = await store.apply(
            [
                SettleCheckpoint("r1", 1, "completed", output='"x"', attempt=1, unless_rerun=True),
                RescheduleCheckpoint("r1", 2, 1, error, wake_at=5.0, unless_rerun=True),
                SettleCheckpoint("r1", 3, "completed", output='"x"', attempt=1, unless_rerun=True),
                RescheduleCheckpoint("r1", 4, 1, error, wake_at=5.0, unless_rerun=True),
            ]
        )
        assert [None if cp is None else (cp.seq, cp.status, cp.attempts) for cp in results] == [
            None,
            None,
            (3, "completed", 1),
            (4, "pending", 2),
        ]
        assert (await store.get_checkpoints("r1", 1, 1)) == [rerun]
        # Without it, a rerun checkpoint settles as any other.
        [settled] = await store.apply(
            [SettleCheckpoint("r1", 1, "completed", output='"y"', execution=FIRST)]
        )
        assert settled is not None
        assert settled.status == "completed"


EXECUTIONS_CHECKS = (
    check_checkpoints_keep_their_executions_and_rerun,
    check_settle_with_an_execution_needs_one_the_checkpoint_holds,
    check_settle_or_failed_with_needs_the_execution_too,
    check_reschedule_with_an_execution_needs_one_the_checkpoint_holds,
    check_unless_rerun_skips_a_rerun_checkpoint,
)
