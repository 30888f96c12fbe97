"""Store checks of runs: creating, updating, leasing, turns and listings."""

from __future__ import annotations

from typing import Any

import attrs

from ..._base._exceptions import LeaseLostError, StoreError
from ..._base._records import ErrorInfo, Run
from ..._stores._base import WriteConflict
from ..._stores._ops import (
    CreateRun,
    DeleteCheckpoints,
    LockRun,
    PutCheckpoint,
    ReleaseRun,
    SettleCheckpoint,
    UpdateRun,
    WaitSignal,
)
from ._store_support import (
    OpenStore,
    StoreFactory,
    counters,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
)

# -- CreateRun ----------------------------------------------------------------------


async def check_create_run_is_idempotent(factory: StoreFactory | OpenStore) -> None:
    """`CreateRun` keeps the first run of an id and returns it."""
    async with fresh_store(factory) as store:
        run = make_run(tags=("vip", "eu"), input='["sku-1", 2]', created_at=5.0, updated_at=5.0)
        assert await store.create_run(run) == (run, True)

        other = make_run(workflow="refund", status="running")
        stored, created = await store.create_run(other)
        assert (stored, created) == (run, False)
        assert await store.get_run("r1") == run


async def check_create_run_through_apply(factory: StoreFactory | OpenStore) -> None:
    """`CreateRun` through `Store.apply` sees a run created earlier in its batch."""
    async with fresh_store(factory) as store:
        first, second = make_run(), make_run(version="2")
        results = await store.apply([CreateRun(first), CreateRun(second)])
        assert results == [(first, True), (first, False)]
        assert await store.get_run("r1") == first


async def check_create_run_writes_its_checkpoints_only_with_the_run(
    factory: StoreFactory | OpenStore,
) -> None:
    """`CreateRun`'s checkpoints are written with a run it inserts, and not
    at all when the id is taken: a start that lost a race for an id leaves
    the winner's checkpoints (its first timer) as they are."""
    async with fresh_store(factory) as store:
        first = make_run()
        deadline = make_checkpoint(seq=2, name="sleep", kind="timer", wake_at=60.0)
        moved = attrs.evolve(deadline, wake_at=30.0)
        step = make_checkpoint(seq=1, status="completed", output='"kept"')
        results = await store.apply([CreateRun(first, (deadline, step))])
        assert results == [(first, True)]
        # In a later batch, and twice in one batch (on a store that layers
        # a batch's writes by run, the create that finds the id is the
        # second of two).
        assert await store.apply([CreateRun(make_run(version="2"), (moved,))]) == [(first, False)]
        other = make_run("r2")
        results = await store.apply(
            [CreateRun(other, (make_checkpoint("r2", seq=1),)), CreateRun(other, (moved,))]
        )
        assert results == [(other, True), (other, False)]
        assert await store.get_checkpoints("r1") == [step, deadline]
        assert await store.get_checkpoints("r2") == [make_checkpoint("r2", seq=1)]


async def check_every_run_field_round_trips(factory: StoreFactory | OpenStore) -> None:
    """Every field of a run is kept as it was written."""
    async with fresh_store(factory) as store:
        run = Run(
            id="full",
            workflow="checkout",
            version="7",
            namespace="tenant-a",
            status="failed",
            input='[{"a": 1}]',
            output='"out"',
            error=ErrorInfo(message="boom", code="card_declined", details={"n": [1, 2]}, type="E"),
            tags=("x", "y"),
            parent_id="parent",
            parent_seq=3,
            lease_owner="engine-1",
            lease_expiry=12.5,
            wake_at=99.25,
            compensate=True,
            recoveries=2,
            created_at=1.5,
            updated_at=2.5,
        )
        await store.create_run(run)
        assert await store.get_run("full") == run
        assert await store.get_run("missing") is None


# -- UpdateRun ----------------------------------------------------------------------


async def check_update_run_changes_fields(factory: StoreFactory | OpenStore) -> None:
    """`UpdateRun` changes the fields it names."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        error = ErrorInfo(message="nope", code="fatal", details={"why": "because"})
        results = await store.apply(
            [
                UpdateRun(
                    "r1",
                    {"status": "failed", "error": error, "tags": ("t",), "updated_at": 9.0},
                    expect_status=frozenset({"pending"}),
                )
            ]
        )
        assert results == [True]
        assert await store.get_run("r1") == make_run(
            status="failed", error=error, tags=("t",), updated_at=9.0
        )


async def check_update_run_of_a_missing_run_conflicts(factory: StoreFactory | OpenStore) -> None:
    """An `UpdateRun` of a missing run raises `WriteConflict`."""
    async with fresh_store(factory) as store:
        with raises(WriteConflict):
            await store.apply([UpdateRun("missing", {"status": "running"})])


async def check_failed_status_expectation_rolls_back_the_whole_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """A failed status expectation rolls back the whole batch, whatever its operations."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run("a"))
        await store.create_run(make_run("b"))
        await store.save_checkpoint(make_checkpoint("a", 1))
        await store.deliver_signal("tok", '"buffered"')
        before = counters(store)

        with raises(WriteConflict):
            await store.apply(
                [
                    CreateRun(make_run("c")),
                    UpdateRun("a", {"status": "running", "updated_at": 1.0}),
                    PutCheckpoint(make_checkpoint("a", 2)),
                    SettleCheckpoint("a", 1, "completed", output='"x"'),
                    DeleteCheckpoints("a", (1,)),
                    WaitSignal("tok", "a", 1),
                    LockRun("b", "engine", 10.0, 0.0),
                    UpdateRun("b", {"status": "completed"}, expect_status=frozenset({"running"})),
                ]
            )

        assert await store.get_run("c") is None
        assert await store.get_run("a") == make_run("a")
        assert await store.get_run("b") == make_run("b")
        assert await store.get_checkpoints("a") == [make_checkpoint("a", 1)]
        assert await store.buffered_signals("tok") == ['"buffered"']
        assert await store.signal_waiter("tok") is None
        # A failed batch is no batch: only the reads above were counted.
        batches, ops, transactions, _, _ = counters(store)
        assert (batches, ops, transactions) == before[:3]


async def check_failed_owner_expectation_raises_lease_lost(
    factory: StoreFactory | OpenStore,
) -> None:
    """A failed lease expectation raises `LeaseLostError` and writes nothing."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        assert await store.try_lock_run("r1", "engine-1", expiry=10.0, now=0.0)
        change = {"status": "completed"}

        with raises(LeaseLostError):
            await store.apply(
                [
                    PutCheckpoint(make_checkpoint()),
                    UpdateRun("r1", change, expect_owner="engine-2", now=1.0),
                ]
            )
        # Held by the owner, but lapsed at now.
        with raises(LeaseLostError):
            await store.apply([UpdateRun("r1", change, expect_owner="engine-1", now=10.0)])
        assert await store.get_checkpoints("r1") == []
        assert (await store.get_run("r1")) == make_run(lease_owner="engine-1", lease_expiry=10.0)

        # Live at now, or no time given: the owner may write.
        assert await store.apply(
            [UpdateRun("r1", {"wake_at": 3.0}, expect_owner="engine-1", now=9.5)]
        )
        assert await store.apply([UpdateRun("r1", change, expect_owner="engine-1")]) == [True]
        run = await store.get_run("r1")
        assert run is not None
        assert (run.status, run.wake_at) == ("completed", 3.0)


async def check_lease_lost_is_a_store_error_but_not_a_conflict(
    factory: StoreFactory | OpenStore,
) -> None:
    """`LeaseLostError` is a `StoreError`, not a `WriteConflict`."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        with raises(StoreError) as caught:
            await store.apply([UpdateRun("r1", {}, expect_owner="nobody")])
        assert not isinstance(caught.value, WriteConflict)


async def check_non_strict_update_skips_only_itself(factory: StoreFactory | OpenStore) -> None:
    """A failed expectation with ``strict=False`` skips only its own update."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        results = await store.apply(
            [
                UpdateRun(
                    "r1",
                    {"status": "running"},
                    expect_status=frozenset({"suspended"}),
                    strict=False,
                ),
                UpdateRun("missing", {"status": "running"}, strict=False),
                UpdateRun("r1", {"status": "cancelled"}, expect_owner="nobody", strict=False),
                PutCheckpoint(make_checkpoint()),
                UpdateRun(
                    "r1", {"wake_at": 4.0}, expect_status=frozenset({"pending"}), strict=False
                ),
            ]
        )
        assert results == [False, False, False, None, True]
        assert await store.get_run("r1") == make_run(wake_at=4.0)
        assert await store.get_checkpoints("r1") == [make_checkpoint()]


async def check_unknown_operations_are_refused(factory: StoreFactory | OpenStore) -> None:
    """An object that is no operation fails its batch with `TypeError`."""
    # Typed as an operation, as a caller that is not type-checked may pass it.
    not_an_operation: Any = "not an operation"
    async with fresh_store(factory) as store:
        with raises(TypeError):
            await store.apply([CreateRun(make_run()), not_an_operation])
        assert await store.get_run("r1") is None


async def check_update_run_with_an_unknown_field_changes_nothing(
    factory: StoreFactory | OpenStore,
) -> None:
    """An `UpdateRun` of a field `Run` lacks fails its batch with `TypeError`."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        with raises(TypeError):
            await store.apply(
                [PutCheckpoint(make_checkpoint()), UpdateRun("r1", {"no_such_field": 1})]
            )
        assert await store.get_checkpoints("r1") == []


# -- leases -------------------------------------------------------------------------


async def check_lock_run_rules(factory: StoreFactory | OpenStore) -> None:
    """`LockRun` takes a free or lapsed lease, extends its own, and refuses a live one."""
    async with fresh_store(factory) as store:
        assert await store.try_lock_run("missing", "e1", 10.0, 0.0) is False
        await store.create_run(make_run())

        # Free: taken.
        assert await store.try_lock_run("r1", "e1", expiry=10.0, now=0.0) is True
        assert await store.get_run("r1") == make_run(lease_owner="e1", lease_expiry=10.0)
        # Same owner: extended.
        assert await store.apply([LockRun("r1", "e1", 20.0, 5.0)]) == [True]
        assert await store.get_run("r1") == make_run(lease_owner="e1", lease_expiry=20.0)
        # Another owner while the lease is live: refused, nothing changes.
        assert await store.try_lock_run("r1", "e2", expiry=40.0, now=19.9) is False
        assert await store.get_run("r1") == make_run(lease_owner="e1", lease_expiry=20.0)
        # Lapsed (expiry is not after now): taken over, and counted as a recovery.
        assert await store.try_lock_run("r1", "e2", expiry=50.0, now=20.0) is True
        assert await store.get_run("r1") == make_run(
            lease_owner="e2", lease_expiry=50.0, recoveries=1
        )


async def check_release_run_only_by_its_owner(factory: StoreFactory | OpenStore) -> None:
    """`ReleaseRun` gives up a lease only for its owner."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        await store.try_lock_run("r1", "e1", 10.0, 0.0)

        await store.release_run_lock("r1", "e2")
        assert await store.get_run("r1") == make_run(lease_owner="e1", lease_expiry=10.0)
        assert await store.apply([ReleaseRun("r1", "e1"), ReleaseRun("missing", "e1")]) == [
            None,
            None,
        ]
        assert await store.get_run("r1") == make_run()
        # A released lease is free: taking it is no recovery.
        assert await store.try_lock_run("r1", "e2", 10.0, 1.0)
        run = await store.get_run("r1")
        assert run is not None
        assert run.recoveries == 0


# -- begin_turn ---------------------------------------------------------------------


async def check_begin_turn_returns_none_and_writes_nothing(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.begin_turn` of a missing, ended or leased run returns None and writes nothing."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run("done", status="completed"))
        await store.create_run(make_run("held", status="suspended"))
        await store.try_lock_run("held", "e1", 10.0, 0.0)
        before = counters(store)

        assert await store.begin_turn("missing", "e2", 20.0, 1.0) is None
        assert await store.begin_turn("done", "e2", 20.0, 1.0) is None
        assert await store.begin_turn("held", "e2", 20.0, 1.0) is None
        assert counters(store) == before
        assert await store.get_run("done") == make_run("done", status="completed")
        assert await store.get_run("held") == make_run(
            "held", status="suspended", lease_owner="e1", lease_expiry=10.0
        )


async def check_begin_turn_leases_and_reads_the_run(factory: StoreFactory | OpenStore) -> None:
    """`Store.begin_turn` leases the run, marks it running, and reads its checkpoints."""
    cases = [
        ("pending", "running"),
        ("suspended", "running"),
        ("running", "running"),
        ("cancelling", "cancelling"),
    ]
    for status, turn_status in cases:
        async with fresh_store(factory) as store:
            await store.create_run(make_run(status=status, wake_at=3.0))
            seqs = [2, -1, 1_000_000_000, 1, -2]
            for seq in seqs:
                await store.save_checkpoint(make_checkpoint(seq=seq))
            await store.save_checkpoint(make_checkpoint("other", 1))
            before = counters(store)

            turn = await store.begin_turn("r1", "e1", expiry=30.0, now=1.0)

            # One batch, one transaction, and the rows it returned.
            batches, ops, transactions, run_rows, checkpoint_rows = before
            assert counters(store) == (
                batches + 1,
                ops,
                transactions + 1,
                run_rows + 1,
                checkpoint_rows + 5,
            )
            assert turn is not None
            expected = make_run(
                status=turn_status, wake_at=3.0, lease_owner="e1", lease_expiry=30.0
            )
            assert turn.run == expected
            assert [cp.seq for cp in turn.checkpoints] == sorted(seqs)
            assert turn.checkpoints[0] == make_checkpoint(seq=-2)
            assert await store.get_run("r1") == expected


async def check_begin_turn_takes_over_a_lapsed_lease(factory: StoreFactory | OpenStore) -> None:
    """`Store.begin_turn` takes over a lapsed lease, and extends its own."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="running", lease_owner="dead", lease_expiry=5.0))
        turn = await store.begin_turn("r1", "e1", expiry=30.0, now=5.0)
        assert turn is not None
        assert turn.run == make_run(
            status="running", lease_owner="e1", lease_expiry=30.0, recoveries=1
        )
        assert turn.checkpoints == ()
        # The same owner may begin another turn while its lease is live.
        again = await store.begin_turn("r1", "e1", expiry=40.0, now=6.0)
        assert again is not None
        assert again.run == attrs.evolve(turn.run, lease_expiry=40.0)


# -- listing ------------------------------------------------------------------------


async def check_list_runs_filters_and_orders_oldest_first(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.list_runs` filters by status, workflow and parent, oldest first."""
    async with fresh_store(factory) as store:
        runs = [
            make_run("c", created_at=2.0, status="running"),
            make_run("a", created_at=3.0, workflow="refund", parent_id="c"),
            make_run("b", created_at=2.0, parent_id="c", status="completed"),
            make_run("d", created_at=1.0, status="failed"),
            make_run("e", created_at=4.0, status="running", parent_id="x"),
        ]
        for run in runs:
            await store.create_run(run)

        async def ids(**filters: Any) -> list[str]:
            return [run.id for run in await store.list_runs(**filters)]

        assert await ids() == ["d", "b", "c", "a", "e"]
        assert await ids(statuses={"running"}) == ["c", "e"]
        assert await ids(statuses=["running", "failed"]) == ["d", "c", "e"]
        assert await ids(statuses=[]) == []
        assert await ids(workflow="checkout") == ["d", "b", "c", "e"]
        assert await ids(parent_id="c") == ["b", "a"]
        assert await ids(parent_id="c", workflow="checkout") == ["b"]
        assert await ids(statuses={"running"}, parent_id="x", workflow="checkout") == ["e"]
        assert await ids(limit=2) == ["d", "b"]
        assert await ids(statuses={"running", "pending"}, limit=1) == ["c"]
        assert await ids(limit=0) == []
        assert (await store.list_runs(statuses={"failed"}))[0] == runs[3]


async def check_list_due_runs(factory: StoreFactory | OpenStore) -> None:
    """`Store.list_due_runs` lists runs by `run_due_at`, ties by id."""
    async with fresh_store(factory) as store:
        runs = [
            # Suspended: due at its wake time; without one, never.
            make_run("sleeper", status="suspended", wake_at=50.0, updated_at=1.0),
            make_run("forever", status="suspended", updated_at=1.0),
            # Pending without a lease: due at once (its updated_at).
            make_run("fresh", status="pending", updated_at=10.0),
            # Running: due when its lease lapses.
            make_run("lapsed", status="running", lease_owner="e", lease_expiry=30.0),
            make_run("live", status="running", lease_owner="e", lease_expiry=500.0),
            make_run("stopping", status="cancelling", updated_at=30.0),
            # Terminal: never due.
            make_run("done", status="completed", wake_at=1.0, updated_at=1.0),
            make_run("dead", status="dead", lease_owner="e", lease_expiry=2.0),
        ]
        for run in runs:
            await store.create_run(run)

        assert await store.list_due_runs(now=5.0, limit=10) == []
        assert await store.list_due_runs(now=10.0, limit=10) == ["fresh"]
        # Equal due times come out by id.
        assert await store.list_due_runs(now=100.0, limit=10) == [
            "fresh",
            "lapsed",
            "stopping",
            "sleeper",
        ]
        assert await store.list_due_runs(now=100.0, limit=2) == ["fresh", "lapsed"]
        assert await store.list_due_runs(now=100.0, limit=0) == []
        assert await store.list_due_runs(now=1e9, limit=10) == [
            "fresh",
            "lapsed",
            "stopping",
            "sleeper",
            "live",
        ]
        assert await store.next_due_time() == 10.0


async def check_list_stalled_runs(factory: StoreFactory | OpenStore) -> None:
    """`Store.list_stalled_runs` lists suspended runs that wait for nothing."""
    async with fresh_store(factory) as store:
        runs = [
            # Suspended, no wake time, nothing pending: stalled.
            make_run("lost", status="suspended", created_at=3.0),
            make_run("bare", status="suspended", created_at=1.0),
            make_run("retired", status="suspended", created_at=2.0),
            # Suspended with something still to come: not stalled.
            make_run("child-waits", status="suspended", created_at=1.0),
            make_run("remote-runs", status="suspended", created_at=1.0),
            make_run("sleeper", status="suspended", wake_at=50.0, created_at=1.0),
            # Not suspended: never stalled (the due listing covers them).
            make_run("fresh", status="pending", created_at=1.0),
            make_run("busy", status="running", lease_owner="e", lease_expiry=9.0),
            make_run("done", status="completed", created_at=1.0),
        ]
        for run in runs:
            await store.create_run(run)
        await store.save_checkpoint(make_checkpoint("lost", 1, kind="child", status="completed"))
        await store.save_checkpoint(make_checkpoint("lost", 2, kind="remote", status="failed"))
        # A child checkpoint whose child was detached from it (a retired
        # on-error handoff's) may stay pending for good: it does not count.
        await store.create_run(make_run("retired.h", status="running", parent_id="retired"))
        await store.save_checkpoint(
            make_checkpoint("retired", 1_000_000_001, kind="child", child_id="retired.h")
        )
        # One whose child reports to it does.
        await store.create_run(
            make_run("child-waits.c", status="running", parent_id="child-waits", parent_seq=1)
        )
        await store.save_checkpoint(
            make_checkpoint("child-waits", 1, kind="child", child_id="child-waits.c")
        )
        await store.save_checkpoint(
            make_checkpoint("remote-runs", 1, kind="remote", status="running")
        )

        # Oldest first, at most `limit`.
        assert await store.list_stalled_runs(limit=10) == ["bare", "retired", "lost"]
        assert await store.list_stalled_runs(limit=2) == ["bare", "retired"]
        assert await store.list_stalled_runs(limit=0) == []

        # Settling what a run waits for makes it stalled until it is woken.
        await store.save_checkpoint_if_pending(
            make_checkpoint("child-waits", 1, kind="child", status="completed")
        )
        assert "child-waits" in await store.list_stalled_runs(limit=10)
        await store.apply([UpdateRun("child-waits", {"status": "running"})])
        assert "child-waits" not in await store.list_stalled_runs(limit=10)


async def check_due_times_follow_every_run_write(factory: StoreFactory | OpenStore) -> None:
    """Due times follow every write of a run, and not a failed batch."""
    async with fresh_store(factory) as store:
        assert await store.next_due_time() is None
        await store.create_run(make_run(status="completed"))
        assert await store.next_due_time() is None

        await store.create_run(make_run("r2", updated_at=5.0))
        assert await store.next_due_time() == 5.0
        # Leasing moves the due time to the lease's expiry...
        await store.try_lock_run("r2", "e", expiry=60.0, now=5.0)
        assert await store.list_due_runs(now=59.0, limit=10) == []
        assert await store.next_due_time() == 60.0
        # ...a turn that suspends moves it to the wake time...
        await store.apply(
            [
                UpdateRun("r2", {"status": "suspended", "wake_at": 40.0}),
                ReleaseRun("r2", "e"),
            ]
        )
        assert await store.next_due_time() == 40.0
        assert await store.list_due_runs(now=40.0, limit=10) == ["r2"]
        # ...a failed batch leaves it where it was...
        with raises(WriteConflict):
            await store.apply(
                [
                    UpdateRun("r2", {"wake_at": 1.0}),
                    UpdateRun("r2", {}, expect_status=frozenset({"running"})),
                ]
            )
        assert await store.next_due_time() == 40.0
        # ...and the end of the run removes it.
        await store.apply([UpdateRun("r2", {"status": "completed"})])
        assert await store.next_due_time() is None
        assert await store.list_due_runs(now=1e9, limit=10) == []


RUNS_CHECKS = (
    check_create_run_is_idempotent,
    check_create_run_through_apply,
    check_create_run_writes_its_checkpoints_only_with_the_run,
    check_every_run_field_round_trips,
    check_update_run_changes_fields,
    check_update_run_of_a_missing_run_conflicts,
    check_failed_status_expectation_rolls_back_the_whole_batch,
    check_failed_owner_expectation_raises_lease_lost,
    check_lease_lost_is_a_store_error_but_not_a_conflict,
    check_non_strict_update_skips_only_itself,
    check_unknown_operations_are_refused,
    check_update_run_with_an_unknown_field_changes_nothing,
    check_lock_run_rules,
    check_release_run_only_by_its_owner,
    check_begin_turn_returns_none_and_writes_nothing,
    check_begin_turn_leases_and_reads_the_run,
    check_begin_turn_takes_over_a_lapsed_lease,
    check_list_runs_filters_and_orders_oldest_first,
    check_list_due_runs,
    check_list_stalled_runs,
    check_due_times_follow_every_run_write,
)
