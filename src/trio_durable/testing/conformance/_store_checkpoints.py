"""Store checks of checkpoints: puts, claims, settles, reschedules, reads."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..._base._exceptions import StoreError
from ..._base._records import Checkpoint, ErrorInfo, Mark, RunStatus
from ..._stores._base import WriteConflict
from ..._stores._ops import (
    ClaimCheckpoint,
    DeleteCheckpoints,
    PutCheckpoint,
    RescheduleCheckpoint,
    SettleCheckpoint,
    UpdateRun,
)
from ._store_support import (
    OpenStore,
    StoreFactory,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
)

# -- checkpoints --------------------------------------------------------------------


async def check_put_checkpoint_inserts_or_replaces(factory: StoreFactory | OpenStore) -> None:
    """`PutCheckpoint` inserts a checkpoint, every field kept, or replaces it."""
    async with fresh_store(factory) as store:
        full = Checkpoint(
            run_id="r1",
            seq=4,
            name="charge",
            kind="remote",
            status="failed",
            input='[{"amount": 3}]',
            output=None,
            error=ErrorInfo(message="declined", code="card_declined", details=[1, "two"]),
            errors=(ErrorInfo(message="timeout", code="timeout"), ErrorInfo(message="declined")),
            attempts=2,
            group="payments",
            child_id="r1.child.4",
            compensation="refund",
            parallel_group=3,
            parallel_size=5,
            parallel_mode="settled",
            wake_at=7.5,
            enqueued_at=1.0,
            started_at=2.0,
            finished_at=3.0,
        )
        assert await store.apply([PutCheckpoint(make_checkpoint(seq=4))]) == [None]
        await store.save_checkpoint(full)
        assert await store.get_checkpoints("r1") == [full]

        replaced = attrs.evolve(full, status="completed", error=None, errors=(), output='"ok"')
        await store.save_checkpoint(replaced)
        assert await store.get_checkpoints("r1") == [replaced]


async def check_a_mark_is_kept_while_pending_and_cleared_by_a_settle(
    factory: StoreFactory | OpenStore,
) -> None:
    """A pending checkpoint's `Mark` (what it waits for) is kept, details and
    all, apart from its error; a settle clears it, a reschedule keeps it."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        mark = Mark(code="out", message="out on amqp://h", details={"broker": "amqp://h"})
        marked = make_checkpoint(seq=1, kind="remote", attempts=1, started_at=2.0, mark=mark)
        other = make_checkpoint(seq=2, kind="remote", attempts=1, started_at=2.0, mark=mark)
        await store.apply([PutCheckpoint(marked), PutCheckpoint(other)])
        assert await store.get_checkpoints("r1") == [marked, other]
        [first, second] = await store.apply(
            [
                SettleCheckpoint("r1", 1, "completed", '"ok"', None, 3.0),
                RescheduleCheckpoint("r1", 2, 1, ErrorInfo(message="no"), 9.0),
            ]
        )
        assert first == attrs.evolve(
            marked, status="completed", output='"ok"', finished_at=3.0, mark=None, error=None
        )
        assert second is not None
        assert second.mark == mark
        assert await store.get_checkpoints("r1") == [first, second]
        # While pending, its error shows its mark (as the releases before
        # kept it there).
        assert second.error == ErrorInfo(message=mark.message, code="out", details=mark.details)


async def check_operations_see_earlier_operations_of_their_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """Each operation of a batch sees what the ones before it wrote."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint(seq=1)
        done = attrs.evolve(pending, status="completed", output='"won"')
        results = await store.apply(
            [
                PutCheckpoint(pending),
                PutCheckpoint(make_checkpoint(seq=2)),
                ClaimCheckpoint(done),
                ClaimCheckpoint(done),
                PutCheckpoint(make_checkpoint(seq=3)),
                PutCheckpoint(attrs.evolve(make_checkpoint(seq=3), attempts=5)),
                DeleteCheckpoints("r1", (2,)),
                SettleCheckpoint("r1", 3, "failed", error=ErrorInfo(message="x")),
            ]
        )
        assert results[:7] == [None, None, True, False, None, None, None]
        settled = attrs.evolve(
            make_checkpoint(seq=3), attempts=5, status="failed", error=ErrorInfo(message="x")
        )
        assert results[7] == settled
        assert await store.get_checkpoints("r1") == [done, settled]


async def check_claim_writes_only_a_pending_checkpoint(factory: StoreFactory | OpenStore) -> None:
    """`ClaimCheckpoint` replaces a pending checkpoint, and nothing else."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint(input='"in"')
        await store.save_checkpoint(pending)
        won = attrs.evolve(pending, status="completed", output='"first"', attempts=1)
        late = attrs.evolve(pending, status="completed", output='"second"', attempts=2)

        assert await store.save_checkpoint_if_pending(won) is True
        assert await store.save_checkpoint_if_pending(late) is False
        assert await store.save_checkpoint_if_pending(make_checkpoint(seq=9)) is False
        assert await store.get_checkpoints("r1") == [won]


async def check_claim_has_exactly_one_winner_among_racers(
    factory: StoreFactory | OpenStore,
) -> None:
    """Of 20 tasks claiming one checkpoint at once, exactly one wins."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint()
        await store.save_checkpoint(pending)
        wins: list[int] = []

        async def deliver(i: int) -> None:
            settled = attrs.evolve(pending, status="completed", output=str(i))
            if await store.save_checkpoint_if_pending(settled):
                wins.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(deliver, i)

        assert len(wins) == 1
        [stored] = await store.get_checkpoints("r1")
        assert stored.output == str(wins[0])


async def check_batch_claim_returns_one_result_per_checkpoint(
    factory: StoreFactory | OpenStore,
) -> None:
    """A batch of claims is answered claim by claim."""
    async with fresh_store(factory) as store:
        await store.save_checkpoint(make_checkpoint(seq=1))
        await store.save_checkpoint(make_checkpoint(seq=2, status="completed"))
        await store.save_checkpoint(make_checkpoint(seq=3, status="running"))
        claims = [make_checkpoint(seq=s, status="completed", output='"r"') for s in (1, 2, 3, 4)]

        assert await store.save_checkpoints_if_pending(claims) == [True, False, False, False]
        assert await store.save_checkpoints_if_pending([]) == []
        statuses = [(cp.seq, cp.status) for cp in await store.get_checkpoints("r1")]
        assert statuses == [(1, "completed"), (2, "completed"), (3, "running")]


async def check_settle_returns_the_settled_row_once(factory: StoreFactory | OpenStore) -> None:
    """`SettleCheckpoint` settles a pending checkpoint once and returns it."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint(
            kind="remote", input='"in"', attempts=3, group="g", enqueued_at=1.0
        )
        await store.save_checkpoint(pending)
        error = ErrorInfo(message="bad", code="c", details={"k": "v"})
        settle = SettleCheckpoint("r1", 1, "failed", output=None, error=error, finished_at=5.0)

        [settled] = await store.apply([settle])
        assert settled == attrs.evolve(pending, status="failed", error=error, finished_at=5.0)
        assert await store.apply([settle]) == [None]
        assert await store.apply([SettleCheckpoint("r1", 2, "completed")]) == [None]
        assert await store.get_checkpoints("r1") == [settled]


async def check_settle_of_a_superseded_attempt_changes_nothing(
    factory: StoreFactory | OpenStore,
) -> None:
    """A settle of an attempt that was superseded changes nothing."""
    async with fresh_store(factory) as store:
        pending = make_checkpoint(kind="remote", attempts=2, errors=(ErrorInfo(message="first"),))
        await store.save_checkpoint(pending)
        late = ErrorInfo(message="attempt 1 failed late", code="timeout")

        assert await store.apply([SettleCheckpoint("r1", 1, "failed", error=late, attempt=1)]) == [
            None
        ]
        assert await store.apply([SettleCheckpoint("r1", 1, "failed", error=late, attempt=3)]) == [
            None
        ]
        assert await store.get_checkpoints("r1") == [pending]

        [settled] = await store.apply(
            [SettleCheckpoint("r1", 1, "completed", output='"ok"', finished_at=4.0, attempt=2)]
        )
        assert settled == attrs.evolve(pending, status="completed", output='"ok"', finished_at=4.0)
        assert await store.get_checkpoints("r1") == [settled]


async def check_settle_unless_run_status_drops_results_of_ended_runs(
    factory: StoreFactory | OpenStore,
) -> None:
    """``unless_run_status`` drops the results of runs that ended."""
    unless: frozenset[RunStatus] = frozenset({"cancelled", "completed"})
    ended_as: RunStatus
    for ended_as in ("cancelled", "completed"):
        async with fresh_store(factory) as store:
            await store.create_run(make_run("ended", status=ended_as))
            await store.create_run(make_run("live", status="suspended"))
            await store.save_checkpoint(make_checkpoint("ended", kind="remote"))
            await store.save_checkpoint(make_checkpoint("live", kind="remote"))

            results = await store.apply(
                [
                    SettleCheckpoint(
                        "ended", 1, "completed", output='"x"', unless_run_status=unless
                    ),
                    SettleCheckpoint(
                        "live", 1, "completed", output='"x"', unless_run_status=unless
                    ),
                ]
            )
            settled = attrs.evolve(
                make_checkpoint("live", kind="remote"), status="completed", output='"x"'
            )
            assert results == [None, settled]
            assert await store.get_checkpoints("ended") == [make_checkpoint("ended", kind="remote")]
            assert await store.get_checkpoints("live") == [settled]
            # The condition only guards: without it the ended run's checkpoint settles.
            [forced] = await store.apply([SettleCheckpoint("ended", 1, "failed")])
            assert forced is not None
            assert forced.status == "failed"


async def check_settle_and_reschedule_check_kind_and_name_when_given(
    factory: StoreFactory | OpenStore,
) -> None:
    """Settles and reschedules apply only to a checkpoint of their kind and name."""
    async with fresh_store(factory) as store:
        # A stray result for seq 1 of another operation (a deploy changed the
        # body, or a retried run reused the seq) must not settle this one.
        timer = make_checkpoint(seq=1, kind="timer", name="sleep")
        remote = make_checkpoint(seq=2, kind="remote", name="charge", attempts=1)
        await store.save_checkpoint(timer)
        await store.save_checkpoint(remote)
        error = ErrorInfo(message="x")

        results = await store.apply(
            [
                SettleCheckpoint("r1", 1, "completed", output='"v"', kind="remote", name="sleep"),
                SettleCheckpoint("r1", 2, "completed", output='"v"', kind="remote", name="refund"),
                RescheduleCheckpoint("r1", 2, 1, error, 5.0, kind="timer", name="charge"),
                RescheduleCheckpoint("r1", 2, 1, error, 5.0, kind="remote", name="refund"),
            ]
        )
        assert results == [None, None, None, None]
        assert await store.get_checkpoints("r1") == [timer, remote]

        rescheduled = attrs.evolve(remote, attempts=2, errors=(error,), wake_at=5.0)
        settled = attrs.evolve(rescheduled, status="completed", output='"v"')
        results = await store.apply(
            [
                SettleCheckpoint("r1", 1, "completed", kind="timer"),
                RescheduleCheckpoint("r1", 2, 1, error, 5.0, kind="remote", name="charge"),
                SettleCheckpoint("r1", 2, "completed", output='"v"', name="charge"),
            ]
        )
        assert results == [attrs.evolve(timer, status="completed"), rescheduled, settled]


async def check_settle_or_failed_with_also_settles_a_checkpoint_failed_with_that_code(
    factory: StoreFactory | OpenStore,
) -> None:
    """``or_failed_with`` settles a checkpoint failed with that code too."""
    async with fresh_store(factory) as store:
        # A fail_fast fan settles the members it cancels as failed; a success
        # that arrives for one of them later is kept on it.
        unless: frozenset[RunStatus] = frozenset({"cancelled", "completed"})
        cancelled = ErrorInfo(message="cancelled: another member failed", code="fan_cancelled")
        await store.create_run(make_run("r1", status="failed"))
        await store.create_run(make_run("ended", status="cancelled"))
        frozen = make_checkpoint(
            seq=1, kind="remote", name="w", status="failed", error=cancelled, attempts=2
        )
        failed = make_checkpoint(
            seq=2,
            kind="remote",
            name="w",
            status="failed",
            error=ErrorInfo(message="x", code="boom"),
        )
        done = make_checkpoint(seq=3, kind="remote", name="w", status="completed", output='"a"')
        pending = make_checkpoint(seq=4, kind="remote", name="w")
        for cp in (frozen, failed, done, pending):
            await store.save_checkpoint(cp)
        await store.save_checkpoint(attrs.evolve(frozen, run_id="ended"))

        def keep(run_id: str, seq: int, **conditions: Any) -> SettleCheckpoint:
            return SettleCheckpoint(
                run_id,
                seq,
                "completed",
                output='"late"',
                finished_at=9.0,
                unless_run_status=unless,
                or_failed_with="fan_cancelled",
                **conditions,
            )

        # Without it, the frozen member is settled already.
        assert await store.apply([SettleCheckpoint("r1", 1, "completed", output='"late"')]) == [
            None
        ]
        results = await store.apply(
            [
                keep("r1", 1, kind="remote", name="other"),
                keep("ended", 1),
                keep("r1", 2),
                keep("r1", 3),
            ]
        )
        assert results == [None, None, None, None]
        kept = attrs.evolve(
            frozen, status="completed", output='"late"', error=None, finished_at=9.0
        )
        settled = attrs.evolve(pending, status="completed", output='"late"', finished_at=9.0)
        assert await store.apply([keep("r1", 1, kind="remote", name="w"), keep("r1", 4)]) == [
            kept,
            settled,
        ]
        assert await store.get_checkpoints("r1") == [kept, failed, done, settled]
        assert await store.count_checkpoints("r1", 1, 4, ["completed"]) == 3
        assert await store.apply([keep("r1", 1)]) == [None]


# -- RescheduleCheckpoint -----------------------------------------------------------


async def check_reschedule_records_the_attempt_and_schedules_the_next(
    factory: StoreFactory | OpenStore,
) -> None:
    """`RescheduleCheckpoint` records the failed attempt and schedules the next."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        first = ErrorInfo(message="down", code="unavailable")
        pending = make_checkpoint(
            kind="remote", attempts=1, errors=(first,), group="g", enqueued_at=1.0, started_at=2.0
        )
        await store.save_checkpoint(pending)
        second = ErrorInfo(message="still down", code="unavailable", details={"try": 2})

        [rescheduled] = await store.apply([RescheduleCheckpoint("r1", 1, 1, second, wake_at=9.5)])
        expected = attrs.evolve(
            pending, attempts=2, errors=(first, second), started_at=None, wake_at=9.5
        )
        assert rescheduled == expected
        assert await store.get_checkpoints("r1") == [expected]
        # A stale failure of attempt 1 (a duplicate delivery) changes nothing.
        assert await store.apply([RescheduleCheckpoint("r1", 1, 1, second, wake_at=50.0)]) == [None]
        assert await store.get_checkpoints("r1") == [expected]
        # The next attempt's failure builds on it.
        third = ErrorInfo(message="again")
        [again] = await store.apply([RescheduleCheckpoint("r1", 1, 2, third, wake_at=20.0)])
        assert again == attrs.evolve(
            expected, attempts=3, errors=(first, second, third), wake_at=20.0
        )


async def check_reschedule_applies_only_to_a_pending_checkpoint_of_a_live_run(
    factory: StoreFactory | OpenStore,
) -> None:
    """A reschedule applies only to a pending checkpoint of a live run."""
    async with fresh_store(factory) as store:
        unless: frozenset[RunStatus] = frozenset({"cancelled", "completed"})
        await store.create_run(make_run("done", status="completed"))
        await store.create_run(make_run("r1", status="suspended"))
        await store.save_checkpoint(make_checkpoint("done", kind="remote"))
        await store.save_checkpoint(make_checkpoint("r1", 1, kind="remote", status="completed"))
        await store.save_checkpoint(make_checkpoint("r1", 2, kind="remote", status="failed"))
        await store.save_checkpoint(make_checkpoint("r1", 3, kind="remote"))
        error = ErrorInfo(message="x")

        results = await store.apply(
            [
                RescheduleCheckpoint("done", 1, 0, error, 5.0, unless_run_status=unless),
                RescheduleCheckpoint("r1", 1, 0, error, 5.0),
                RescheduleCheckpoint("r1", 2, 0, error, 5.0),
                RescheduleCheckpoint("r1", 9, 0, error, 5.0),
                RescheduleCheckpoint("r1", 3, 0, error, 5.0, unless_run_status=unless),
            ]
        )
        live = attrs.evolve(make_checkpoint("r1", 3, kind="remote"), attempts=1, errors=(error,))
        assert results == [None, None, None, None, attrs.evolve(live, wake_at=5.0)]
        assert await store.get_checkpoints("done") == [make_checkpoint("done", kind="remote")]
        assert [(cp.seq, cp.status, cp.attempts) for cp in await store.get_checkpoints("r1")] == [
            (1, "completed", 0),
            (2, "failed", 0),
            (3, "pending", 1),
        ]


async def check_reschedule_and_conditional_settle_roll_back_with_their_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """Reschedules and conditional settles roll back with their batch."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        retried = make_checkpoint(seq=1, kind="remote", attempts=1, started_at=3.0)
        settled = make_checkpoint(seq=2, kind="remote", attempts=1)
        await store.save_checkpoint(retried)
        await store.save_checkpoint(settled)

        with raises(WriteConflict):
            await store.apply(
                [
                    RescheduleCheckpoint("r1", 1, 1, ErrorInfo(message="x"), wake_at=8.0),
                    SettleCheckpoint("r1", 2, "completed", output='"v"', attempt=1),
                    UpdateRun("r1", {"status": "running"}, expect_status=frozenset({"running"})),
                ]
            )
        assert await store.get_checkpoints("r1") == [retried, settled]
        # Nothing was used up: the same writes apply afterwards.
        results = await store.apply(
            [
                RescheduleCheckpoint("r1", 1, 1, ErrorInfo(message="x"), wake_at=8.0),
                SettleCheckpoint("r1", 2, "completed", output='"v"', attempt=1),
            ]
        )
        assert [None if cp is None else (cp.attempts, cp.status) for cp in results] == [
            (2, "pending"),
            (1, "completed"),
        ]


async def check_delete_checkpoints(factory: StoreFactory | OpenStore) -> None:
    """`DeleteCheckpoints` deletes the checkpoints it names, and no others."""
    async with fresh_store(factory) as store:
        for seq in (1, 2, 3):
            await store.save_checkpoint(make_checkpoint(seq=seq))
        await store.save_checkpoint(make_checkpoint("other", 1))

        assert await store.apply([DeleteCheckpoints("r1", (1, 3, 99))]) == [None]
        assert [cp.seq for cp in await store.get_checkpoints("r1")] == [2]
        assert await store.count_checkpoints("r1", 0, 10, ["pending"]) == 1
        assert len(await store.get_checkpoints("other")) == 1


async def check_get_checkpoints_ranges(factory: StoreFactory | OpenStore) -> None:
    """`Store.get_checkpoints` returns a seq range, in order, negative seqs too."""
    async with fresh_store(factory) as store:
        seqs = [5, -2, 1_000_000_000, 1, -1, 3]
        for seq in seqs:
            await store.save_checkpoint(make_checkpoint(seq=seq))
        await store.save_checkpoint(make_checkpoint("other", 2))

        async def seqs_in(from_seq: int | None, to_seq: int | None) -> list[int]:
            return [cp.seq for cp in await store.get_checkpoints("r1", from_seq, to_seq)]

        assert await seqs_in(None, None) == sorted(seqs)
        assert await seqs_in(1, None) == [1, 3, 5, 1_000_000_000]
        assert await seqs_in(None, -1) == [-2, -1]
        assert await seqs_in(3, 5) == [3, 5]
        assert await seqs_in(6, 999) == []
        assert await store.get_checkpoints("missing") == []


async def check_count_checkpoints(factory: StoreFactory | OpenStore) -> None:
    """`Store.count_checkpoints` counts by status over a seq range, up to a limit."""
    async with fresh_store(factory) as store:
        statuses = ["pending", "completed", "failed", "completed", "running", "completed", "failed"]
        for seq, status in enumerate(statuses, start=1):
            await store.save_checkpoint(make_checkpoint(seq=seq, status=status))
        await store.save_checkpoint(make_checkpoint("other", 2, status="completed"))

        assert await store.count_checkpoints("r1", 1, 7, ["completed"]) == 3
        assert await store.count_checkpoints("r1", 1, 7, ["completed", "failed"]) == 5
        assert await store.count_checkpoints("r1", 2, 4, {"completed", "failed"}) == 3
        assert await store.count_checkpoints("r1", 1, 7, ["completed", "failed"], limit=2) == 2
        assert await store.count_checkpoints("r1", 1, 7, ["completed"], limit=10) == 3
        assert await store.count_checkpoints("r1", 1, 7, ["completed"], limit=0) == 0
        assert await store.count_checkpoints("r1", 1, 7, []) == 0
        assert await store.count_checkpoints("r1", 1, 7, ["failed", "failed"]) == 2
        assert await store.count_checkpoints("r1", 8, 20, ["pending"]) == 0
        assert await store.count_checkpoints("missing", 1, 7, ["completed"]) == 0

        await store.apply([SettleCheckpoint("r1", 1, "completed")])
        assert await store.count_checkpoints("r1", 1, 1, ["completed"]) == 1
        assert await store.count_checkpoints("r1", 1, 1, ["pending"]) == 0


async def check_settle_append_error_adds_the_error_to_errors(
    factory: StoreFactory | OpenStore,
) -> None:
    """``append_error`` adds the settle's error at the end of ``errors``
    (a step's last attempt failed); without it ``errors`` stays as it is."""
    async with fresh_store(factory) as store:
        first = ErrorInfo(message="attempt 1", code="flaky")
        last = ErrorInfo(message="attempt 2", code="flaky", details={"n": 2})
        await store.create_run(make_run(status="suspended"))
        await store.save_checkpoint(
            make_checkpoint(seq=1, kind="remote", attempts=2, errors=(first,))
        )
        await store.save_checkpoint(make_checkpoint(seq=2, kind="remote", attempts=1))
        await store.save_checkpoint(make_checkpoint(seq=3, kind="remote", attempts=1))
        [one, two, three] = await store.apply(
            [
                SettleCheckpoint("r1", 1, "failed", error=last, attempt=2, append_error=True),
                SettleCheckpoint("r1", 2, "failed", error=last, append_error=True),
                SettleCheckpoint("r1", 3, "failed", error=last),
            ]
        )
        assert (one.errors, two.errors, three.errors) == ((first, last), (last,), ())
        assert [cp.errors for cp in await store.get_checkpoints("r1")] == [
            (first, last),
            (last,),
            (),
        ]
        # A settle that does not apply appends nothing.
        assert await store.apply(
            [SettleCheckpoint("r1", 1, "failed", error=first, append_error=True)]
        ) == [None]
        assert [cp.errors for cp in await store.get_checkpoints("r1", 1, 1)] == [(first, last)]


async def check_settle_or_failed_with_reads_the_code_of_an_error_holding_nul(
    factory: StoreFactory | OpenStore,
) -> None:
    """An error's message may hold a NUL character (its JSON spells it
    ``\\u0000``): ``or_failed_with`` still reads the error's code, on that
    checkpoint and on its neighbours."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="failed"))
        for seq, code in ((1, "lost"), (2, "boom")):
            error = ErrorInfo(message="gone\x00for\\u0000good", code=code)
            await store.save_checkpoint(
                make_checkpoint(seq=seq, kind="remote", status="failed", error=error)
            )
        settles = [
            SettleCheckpoint("r1", seq, "completed", output='"late"', or_failed_with="lost")
            for seq in (1, 2)
        ]
        try:
            kept, unchanged = await store.apply(settles)
        except StoreError as exc:
            raise AssertionError(
                f"a settle with or_failed_with failed on an error holding a NUL: {exc}"
            ) from exc
        assert unchanged is None
        assert (kept.status, kept.output, kept.error) == ("completed", '"late"', None)
        [boom] = await store.get_checkpoints("r1", 2, 2)
        assert boom.error == ErrorInfo(message="gone\x00for\\u0000good", code="boom")


CHECKPOINTS_CHECKS = (
    check_put_checkpoint_inserts_or_replaces,
    check_a_mark_is_kept_while_pending_and_cleared_by_a_settle,
    check_operations_see_earlier_operations_of_their_batch,
    check_claim_writes_only_a_pending_checkpoint,
    check_claim_has_exactly_one_winner_among_racers,
    check_batch_claim_returns_one_result_per_checkpoint,
    check_settle_returns_the_settled_row_once,
    check_settle_of_a_superseded_attempt_changes_nothing,
    check_settle_unless_run_status_drops_results_of_ended_runs,
    check_settle_and_reschedule_check_kind_and_name_when_given,
    check_settle_or_failed_with_also_settles_a_checkpoint_failed_with_that_code,
    check_settle_or_failed_with_reads_the_code_of_an_error_holding_nul,
    check_settle_append_error_adds_the_error_to_errors,
    check_reschedule_records_the_attempt_and_schedules_the_next,
    check_reschedule_applies_only_to_a_pending_checkpoint_of_a_live_run,
    check_reschedule_and_conditional_settle_roll_back_with_their_batch,
    check_delete_checkpoints,
    check_get_checkpoints_ranges,
    check_count_checkpoints,
)
