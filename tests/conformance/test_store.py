"""The store conformance suite: every `Store` behaves like `MemoryStore`.

Each test runs against every store (the ``store`` fixture: memory, SQLite and
PostgreSQL, the last in a fresh schema of the ``real_server`` per test);
the tests at the end are about what only the SQLite store has (a file, a URL,
group commit).
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_durable._exceptions import InvalidURLError, LeaseLostError, StoreError
from trio_durable._records import Checkpoint, ErrorInfo, Run, RunStatus
from trio_durable._stores import _sqlite_schema
from trio_durable._stores._base import (
    AdmitToQueue,
    ClaimCheckpoint,
    CreateRun,
    DeleteCheckpoints,
    DeliverSignal,
    LockRun,
    PutCheckpoint,
    ReleaseQueueSlot,
    ReleaseRun,
    RemoveSignalWaiter,
    RescheduleCheckpoint,
    SettleCheckpoint,
    Store,
    StoreStatistics,
    UpdateRun,
    WaitSignal,
    WriteConflict,
)
from trio_durable._stores._memory import MemoryStore, open_memory_store
from trio_durable._stores._postgres import PostgresStore, open_postgres_store
from trio_durable._stores._sqlite import SQLiteStore, open_sqlite_store

AnyStore = MemoryStore | SQLiteStore | PostgresStore
"""A store the suite runs against (all offer the `StoreHelpers` forms)."""


# The fixtures live here rather than in a conftest.py: tests elsewhere import
# names from the top-level ``conftest`` module, which a second conftest.py
# (imported under the same name) would shadow.


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """The URL of a fresh SQLite file (four slashes: an absolute path)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
async def store(
    request: pytest.FixtureRequest, sqlite_url: str, real_server: Callable[[str], str]
) -> AsyncIterator[AnyStore]:
    """An open, empty store of each kind; closed after the test."""
    if request.param == "memory":
        async with open_memory_store() as memory_store:
            yield memory_store
    elif request.param == "sqlite":
        async with open_sqlite_store(sqlite_url) as sqlite_store:
            yield sqlite_store
    else:
        from servers.postgres import scratch_schema

        async with (
            scratch_schema(real_server("postgres")) as url,
            open_postgres_store(url) as postgres_store,
        ):
            yield postgres_store


def make_run(run_id: str = "r1", **fields: Any) -> Run:
    fields.setdefault("workflow", "checkout")
    return Run(id=run_id, **fields)


def make_checkpoint(run_id: str = "r1", seq: int = 1, **fields: Any) -> Checkpoint:
    fields.setdefault("name", f"step{seq}")
    fields.setdefault("kind", "local")
    return Checkpoint(run_id=run_id, seq=seq, **fields)


def counters(store: AnyStore) -> tuple[int, int, int, int, int]:
    stats = store.statistics()
    return (
        stats.batches,
        stats.ops,
        stats.transactions,
        stats.run_rows_read,
        stats.checkpoint_rows_read,
    )


async def test_stores_satisfy_the_protocol(store: AnyStore) -> None:
    # Checked by mypy: both stores are structurally a Store.
    typed: Store = store
    assert isinstance(typed.statistics(), StoreStatistics)


# -- CreateRun ----------------------------------------------------------------------


async def test_create_run_is_idempotent(store: AnyStore) -> None:
    run = make_run(tags=("vip", "eu"), input='["sku-1", 2]', created_at=5.0, updated_at=5.0)
    assert await store.create_run(run) == (run, True)

    other = make_run(workflow="refund", status="running")
    stored, created = await store.create_run(other)
    assert (stored, created) == (run, False)
    assert await store.get_run("r1") == run


async def test_create_run_through_apply(store: AnyStore) -> None:
    first, second = make_run(), make_run(version="2")
    results = await store.apply([CreateRun(first), CreateRun(second)])
    assert results == [(first, True), (first, False)]
    assert await store.get_run("r1") == first


async def test_every_run_field_round_trips(store: AnyStore) -> None:
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


async def test_update_run_changes_fields(store: AnyStore) -> None:
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


async def test_update_run_of_a_missing_run_conflicts(store: AnyStore) -> None:
    with pytest.raises(WriteConflict):
        await store.apply([UpdateRun("missing", {"status": "running"})])


async def test_failed_status_expectation_rolls_back_the_whole_batch(store: AnyStore) -> None:
    await store.create_run(make_run("a"))
    await store.create_run(make_run("b"))
    await store.save_checkpoint(make_checkpoint("a", 1))
    await store.deliver_signal("tok", '"buffered"')
    before = counters(store)

    with pytest.raises(WriteConflict):
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


async def test_failed_owner_expectation_raises_lease_lost(store: AnyStore) -> None:
    await store.create_run(make_run())
    assert await store.try_lock_run("r1", "engine-1", expiry=10.0, now=0.0)
    change = {"status": "completed"}

    with pytest.raises(LeaseLostError):
        await store.apply(
            [
                PutCheckpoint(make_checkpoint()),
                UpdateRun("r1", change, expect_owner="engine-2", now=1.0),
            ]
        )
    # Held by the owner, but lapsed at now.
    with pytest.raises(LeaseLostError):
        await store.apply([UpdateRun("r1", change, expect_owner="engine-1", now=10.0)])
    assert await store.get_checkpoints("r1") == []
    assert (await store.get_run("r1")) == make_run(lease_owner="engine-1", lease_expiry=10.0)

    # Live at now, or no time given: the owner may write.
    assert await store.apply([UpdateRun("r1", {"wake_at": 3.0}, expect_owner="engine-1", now=9.5)])
    assert await store.apply([UpdateRun("r1", change, expect_owner="engine-1")]) == [True]
    run = await store.get_run("r1")
    assert run is not None
    assert (run.status, run.wake_at) == ("completed", 3.0)


async def test_lease_lost_is_a_store_error_but_not_a_conflict(store: AnyStore) -> None:
    await store.create_run(make_run())
    with pytest.raises(StoreError) as caught:
        await store.apply([UpdateRun("r1", {}, expect_owner="nobody")])
    assert not isinstance(caught.value, WriteConflict)


async def test_non_strict_update_skips_only_itself(store: AnyStore) -> None:
    await store.create_run(make_run())
    results = await store.apply(
        [
            UpdateRun(
                "r1", {"status": "running"}, expect_status=frozenset({"suspended"}), strict=False
            ),
            UpdateRun("missing", {"status": "running"}, strict=False),
            UpdateRun("r1", {"status": "cancelled"}, expect_owner="nobody", strict=False),
            PutCheckpoint(make_checkpoint()),
            UpdateRun("r1", {"wake_at": 4.0}, expect_status=frozenset({"pending"}), strict=False),
        ]
    )
    assert results == [False, False, False, None, True]
    assert await store.get_run("r1") == make_run(wake_at=4.0)
    assert await store.get_checkpoints("r1") == [make_checkpoint()]


async def test_unknown_operations_are_refused(store: AnyStore) -> None:
    with pytest.raises(TypeError):
        await store.apply([CreateRun(make_run()), "not an operation"])  # type: ignore[list-item]
    assert await store.get_run("r1") is None


async def test_update_run_with_an_unknown_field_changes_nothing(store: AnyStore) -> None:
    await store.create_run(make_run())
    with pytest.raises(TypeError):
        await store.apply([PutCheckpoint(make_checkpoint()), UpdateRun("r1", {"no_such_field": 1})])
    assert await store.get_checkpoints("r1") == []


# -- checkpoints --------------------------------------------------------------------


async def test_put_checkpoint_inserts_or_replaces(store: AnyStore) -> None:
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


async def test_operations_see_earlier_operations_of_their_batch(store: AnyStore) -> None:
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


async def test_claim_writes_only_a_pending_checkpoint(store: AnyStore) -> None:
    pending = make_checkpoint(input='"in"')
    await store.save_checkpoint(pending)
    won = attrs.evolve(pending, status="completed", output='"first"', attempts=1)
    late = attrs.evolve(pending, status="completed", output='"second"', attempts=2)

    assert await store.save_checkpoint_if_pending(won) is True
    assert await store.save_checkpoint_if_pending(late) is False
    assert await store.save_checkpoint_if_pending(make_checkpoint(seq=9)) is False
    assert await store.get_checkpoints("r1") == [won]


async def test_claim_has_exactly_one_winner_among_racers(store: AnyStore) -> None:
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


async def test_batch_claim_returns_one_result_per_checkpoint(store: AnyStore) -> None:
    await store.save_checkpoint(make_checkpoint(seq=1))
    await store.save_checkpoint(make_checkpoint(seq=2, status="completed"))
    await store.save_checkpoint(make_checkpoint(seq=3, status="running"))
    claims = [make_checkpoint(seq=s, status="completed", output='"r"') for s in (1, 2, 3, 4)]

    assert await store.save_checkpoints_if_pending(claims) == [True, False, False, False]
    assert await store.save_checkpoints_if_pending([]) == []
    statuses = [(cp.seq, cp.status) for cp in await store.get_checkpoints("r1")]
    assert statuses == [(1, "completed"), (2, "completed"), (3, "running")]


async def test_settle_returns_the_settled_row_once(store: AnyStore) -> None:
    pending = make_checkpoint(kind="remote", input='"in"', attempts=3, group="g", enqueued_at=1.0)
    await store.save_checkpoint(pending)
    error = ErrorInfo(message="bad", code="c", details={"k": "v"})
    settle = SettleCheckpoint("r1", 1, "failed", output=None, error=error, finished_at=5.0)

    [settled] = await store.apply([settle])
    assert settled == attrs.evolve(pending, status="failed", error=error, finished_at=5.0)
    assert await store.apply([settle]) == [None]
    assert await store.apply([SettleCheckpoint("r1", 2, "completed")]) == [None]
    assert await store.get_checkpoints("r1") == [settled]


async def test_settle_of_a_superseded_attempt_changes_nothing(store: AnyStore) -> None:
    pending = make_checkpoint(kind="remote", attempts=2, errors=(ErrorInfo(message="first"),))
    await store.save_checkpoint(pending)
    late = ErrorInfo(message="attempt 1 failed late", code="timeout")

    assert await store.apply([SettleCheckpoint("r1", 1, "failed", error=late, attempt=1)]) == [None]
    assert await store.apply([SettleCheckpoint("r1", 1, "failed", error=late, attempt=3)]) == [None]
    assert await store.get_checkpoints("r1") == [pending]

    [settled] = await store.apply(
        [SettleCheckpoint("r1", 1, "completed", output='"ok"', finished_at=4.0, attempt=2)]
    )
    assert settled == attrs.evolve(pending, status="completed", output='"ok"', finished_at=4.0)
    assert await store.get_checkpoints("r1") == [settled]


@pytest.mark.parametrize("run_status", ["cancelled", "completed"])
async def test_settle_unless_run_status_drops_results_of_ended_runs(
    store: AnyStore, run_status: RunStatus
) -> None:
    unless: frozenset[RunStatus] = frozenset({"cancelled", "completed"})
    await store.create_run(make_run("ended", status=run_status))
    await store.create_run(make_run("live", status="suspended"))
    await store.save_checkpoint(make_checkpoint("ended", kind="remote"))
    await store.save_checkpoint(make_checkpoint("live", kind="remote"))

    results = await store.apply(
        [
            SettleCheckpoint("ended", 1, "completed", output='"x"', unless_run_status=unless),
            SettleCheckpoint("live", 1, "completed", output='"x"', unless_run_status=unless),
        ]
    )
    settled = attrs.evolve(make_checkpoint("live", kind="remote"), status="completed", output='"x"')
    assert results == [None, settled]
    assert await store.get_checkpoints("ended") == [make_checkpoint("ended", kind="remote")]
    assert await store.get_checkpoints("live") == [settled]
    # The condition only guards: without it the ended run's checkpoint settles.
    [forced] = await store.apply([SettleCheckpoint("ended", 1, "failed")])
    assert forced is not None
    assert forced.status == "failed"


async def test_settle_and_reschedule_check_kind_and_name_when_given(store: AnyStore) -> None:
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


async def test_settle_or_failed_with_also_settles_a_checkpoint_failed_with_that_code(
    store: AnyStore,
) -> None:
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
        seq=2, kind="remote", name="w", status="failed", error=ErrorInfo(message="x", code="boom")
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
    assert await store.apply([SettleCheckpoint("r1", 1, "completed", output='"late"')]) == [None]
    results = await store.apply(
        [
            keep("r1", 1, kind="remote", name="other"),
            keep("ended", 1),
            keep("r1", 2),
            keep("r1", 3),
        ]
    )
    assert results == [None, None, None, None]
    kept = attrs.evolve(frozen, status="completed", output='"late"', error=None, finished_at=9.0)
    settled = attrs.evolve(pending, status="completed", output='"late"', finished_at=9.0)
    assert await store.apply([keep("r1", 1, kind="remote", name="w"), keep("r1", 4)]) == [
        kept,
        settled,
    ]
    assert await store.get_checkpoints("r1") == [kept, failed, done, settled]
    assert await store.count_checkpoints("r1", 1, 4, ["completed"]) == 3
    assert await store.apply([keep("r1", 1)]) == [None]


# -- RescheduleCheckpoint -----------------------------------------------------------


async def test_reschedule_records_the_attempt_and_schedules_the_next(store: AnyStore) -> None:
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
    assert again == attrs.evolve(expected, attempts=3, errors=(first, second, third), wake_at=20.0)


async def test_reschedule_applies_only_to_a_pending_checkpoint_of_a_live_run(
    store: AnyStore,
) -> None:
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


async def test_reschedule_and_conditional_settle_roll_back_with_their_batch(
    store: AnyStore,
) -> None:
    await store.create_run(make_run(status="suspended"))
    retried = make_checkpoint(seq=1, kind="remote", attempts=1, started_at=3.0)
    settled = make_checkpoint(seq=2, kind="remote", attempts=1)
    await store.save_checkpoint(retried)
    await store.save_checkpoint(settled)

    with pytest.raises(WriteConflict):
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


async def test_delete_checkpoints(store: AnyStore) -> None:
    for seq in (1, 2, 3):
        await store.save_checkpoint(make_checkpoint(seq=seq))
    await store.save_checkpoint(make_checkpoint("other", 1))

    assert await store.apply([DeleteCheckpoints("r1", (1, 3, 99))]) == [None]
    assert [cp.seq for cp in await store.get_checkpoints("r1")] == [2]
    assert await store.count_checkpoints("r1", 0, 10, ["pending"]) == 1
    assert len(await store.get_checkpoints("other")) == 1


async def test_get_checkpoints_ranges(store: AnyStore) -> None:
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


async def test_count_checkpoints(store: AnyStore) -> None:
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


# -- flow-control queues ------------------------------------------------------------

QUEUED = ErrorInfo(message="waiting for a slot of queue 'q'", code="queued")


async def queued_steps(store: AnyStore, *keys: tuple[str, int]) -> None:
    """Suspended runs with a pending remote step carrying the queued mark at
    each ``(run_id, seq)``."""
    for run_id in dict.fromkeys(run_id for run_id, _ in keys):
        await store.create_run(make_run(run_id, status="suspended"))
    for run_id, seq in keys:
        await store.save_checkpoint(make_checkpoint(run_id, seq, kind="remote", error=QUEUED))


async def marks(store: AnyStore, *keys: tuple[str, int]) -> list[str | None]:
    """The error code of each checkpoint (``"queued"`` while it waits)."""
    codes: list[str | None] = []
    for run_id, seq in keys:
        [cp] = await store.get_checkpoints(run_id, seq, seq)
        codes.append(None if cp.error is None else cp.error.code)
    return codes


def admit(run_id: str, seq: int = 1, *, priority: int = 0, limit: int = 1, at: float = 0.0) -> Any:
    return AdmitToQueue("q", run_id, seq, priority, limit, at)


def release(run_id: str, seq: int = 1, *, limit: int = 1) -> Any:
    return ReleaseQueueSlot("q", run_id, seq, limit)


async def settle(store: AnyStore, run_id: str, seq: int = 1) -> None:
    [settled] = await store.apply([SettleCheckpoint(run_id, seq, "completed", output='"ok"')])
    assert settled is not None


async def test_admission_respects_the_limit(store: AnyStore) -> None:
    keys = [("a", 1), ("a", 2), ("b", 1)]
    await queued_steps(store, *keys)

    results = await store.apply(
        [admit(r, s, limit=2, at=float(i)) for i, (r, s) in enumerate(keys)]
    )
    assert results == [True, True, False]
    assert await marks(store, *keys) == [None, None, "queued"]
    # Other queues are counted apart.
    assert await store.apply([AdmitToQueue("other", "b", 1, 0, 1, 5.0)]) == [True]
    assert await marks(store, ("b", 1)) == [None]


async def test_asking_again_while_holding_or_waiting_changes_nothing(store: AnyStore) -> None:
    await queued_steps(store, ("a", 1), ("b", 1), ("c", 1))
    assert await store.apply([admit("a"), admit("b", at=1.0), admit("c", at=2.0)]) == [
        True,
        False,
        False,
    ]
    before = [await store.get_checkpoints(r) for r in "abc"]

    # A holder keeps its slot even when asking with a smaller limit; a waiter
    # keeps its place in line (it is not moved behind c, nor given a second one).
    results = await store.apply(
        [admit("a", limit=0), admit("a", at=9.0), admit("b", at=9.0, priority=5), admit("b")]
    )
    assert results == [True, True, False, False]
    assert [await store.get_checkpoints(r) for r in "abc"] == before

    await settle(store, "a")
    assert await store.apply([release("a")]) == [[("b", 1)]]
    await settle(store, "b")
    assert await store.apply([release("b")]) == [[("c", 1)]]
    await settle(store, "c")
    assert await store.apply([release("c")]) == [[]]


async def test_admission_clears_only_the_queued_mark(store: AnyStore) -> None:
    await store.create_run(make_run(status="suspended"))
    blocked = ErrorInfo(message="no worker offers gpu", code="blocked")
    await store.save_checkpoint(make_checkpoint(seq=1, kind="remote", error=blocked))
    await store.save_checkpoint(make_checkpoint(seq=2, kind="remote", error=QUEUED))
    await store.save_checkpoint(make_checkpoint(seq=3, kind="remote", error=blocked))

    assert await store.apply([admit("r1", 1, limit=2), admit("r1", 2, limit=2)]) == [True, True]
    assert await store.apply([admit("r1", 3, limit=2)]) == [False]
    assert await marks(store, ("r1", 1), ("r1", 2), ("r1", 3)) == ["blocked", None, "blocked"]

    # Let in by a release, a waiter keeps a mark that is not "queued" too.
    await settle(store, "r1", 1)
    assert await store.apply([release("r1", 1, limit=2)]) == [[("r1", 3)]]
    assert await marks(store, ("r1", 3)) == ["blocked"]


async def test_a_waiter_let_in_is_due_at_once(store: AnyStore) -> None:
    # A waiter's next look at the line is its checkpoint's wake time; let in,
    # it is due at once, so the wake of its run sends it without waiting.
    for run_id in ("a", "b", "c"):
        await store.create_run(make_run(run_id, status="suspended", wake_at=50.0))
        await store.save_checkpoint(
            make_checkpoint(run_id, 1, kind="remote", error=QUEUED, wake_at=50.0)
        )
    assert await store.apply([admit("a"), admit("b", at=1.0), admit("c", at=2.0)]) == [
        True,
        False,
        False,
    ]
    await settle(store, "a")
    assert await store.apply([release("a")]) == [[("b", 1)]]
    [b] = await store.get_checkpoints("b")
    [c] = await store.get_checkpoints("c")
    assert (b.error, b.wake_at) == (None, None)
    assert c.error == QUEUED
    assert c.wake_at == 50.0


async def test_waiters_are_let_in_by_priority_then_arrival(store: AnyStore) -> None:
    keys = [(name, 1) for name in ("holder", "low1", "high1", "mid", "high2", "low2")]
    await queued_steps(store, *keys)
    priorities = {"holder": 0, "low1": 0, "high1": 9, "mid": 4, "high2": 9, "low2": 0}
    results = await store.apply(
        [admit(r, priority=priorities[r], at=float(i)) for i, (r, _) in enumerate(keys)]
    )
    assert results == [True, False, False, False, False, False]

    order: list[str] = []
    current = "holder"
    for _ in range(5):
        await settle(store, current)
        [admitted] = await store.apply([release(current)])
        [(current, _seq)] = admitted
        order.append(current)
        # Only the one let in loses its mark; the others still wait.
        assert (await marks(store, (current, 1))) == [None]
    assert order == ["high1", "high2", "mid", "low1", "low2"]
    await settle(store, current)
    assert await store.apply([release(current)]) == [[]]


async def test_a_higher_priority_arrival_goes_ahead_of_earlier_waiters(store: AnyStore) -> None:
    await queued_steps(store, ("holder", 1), ("early", 1), ("urgent", 1))
    assert await store.apply(
        [admit("holder"), admit("early", at=1.0), admit("urgent", priority=1, at=2.0)]
    ) == [True, False, False]
    await settle(store, "holder")
    assert await store.apply([release("holder")]) == [[("urgent", 1)]]
    assert await marks(store, ("early", 1), ("urgent", 1)) == ["queued", None]


async def test_release_needs_the_step_to_be_over(store: AnyStore) -> None:
    await queued_steps(store, ("a", 1), ("b", 1))
    assert await store.apply([admit("a"), admit("b", at=1.0)]) == [True, False]

    # Still pending in a live run: the slot stays taken.
    assert await store.apply([release("a")]) == [[]]
    assert await marks(store, ("b", 1)) == ["queued"]
    assert await store.apply([admit("a")]) == [True]

    # The run ended with the step still pending: the slot is given back.
    await store.apply([UpdateRun("a", {"status": "cancelled"})])
    assert await store.apply([release("a")]) == [[("b", 1)]]
    [cp] = await store.get_checkpoints("a")
    assert (cp.status, cp.error) == ("pending", None)
    assert await marks(store, ("b", 1)) == [None]


async def test_a_slot_is_released_exactly_once(store: AnyStore) -> None:
    await queued_steps(store, ("a", 1), ("b", 1), ("c", 1))
    assert await store.apply([admit("a"), admit("b", at=1.0), admit("c", at=2.0)]) == [
        True,
        False,
        False,
    ]
    await settle(store, "a")

    # Two deliveries of a's result race to release its slot: one wins. The
    # loser gives back nothing, so it lets nobody in even with room to spare
    # (its limit raised by a deploy in between).
    results = await store.apply([release("a"), release("a", limit=3)])
    assert results == [[("b", 1)], []]
    assert await store.apply([release("a", limit=3)]) == [[]]
    # A step that never held a slot releases nothing either.
    assert await store.apply([release("nobody", limit=3), release("c", limit=3)]) == [[], []]
    assert await marks(store, ("b", 1), ("c", 1)) == [None, "queued"]
    # b holds the only slot: c is still in line behind it.
    assert await store.apply([admit("c", at=3.0)]) == [False]
    await settle(store, "b")
    assert await store.apply([release("b")]) == [[("c", 1)]]


async def test_release_lets_waiters_in_while_slots_are_free(store: AnyStore) -> None:
    keys = [(name, 1) for name in ("a", "b", "c", "d", "e")]
    await queued_steps(store, *keys)
    results = await store.apply([admit(r, limit=2, at=float(i)) for i, (r, _) in enumerate(keys)])
    assert results == [True, True, False, False, False]

    await settle(store, "a")
    # The limit is the releaser's: raised to 4, three slots are free.
    assert await store.apply([release("a", limit=4)]) == [[("c", 1), ("d", 1), ("e", 1)]]
    assert await marks(store, *keys) == [None] * 5


async def test_release_drops_waiters_that_no_longer_need_a_slot(store: AnyStore) -> None:
    keys = [(name, 1) for name in ("holder", "settled", "ended", "next", "last")]
    await queued_steps(store, *keys)
    results = await store.apply([admit(r, at=float(i)) for i, (r, _) in enumerate(keys)])
    assert results == [True, False, False, False, False]
    await settle(store, "settled")
    await store.apply([UpdateRun("ended", {"status": "failed"})])
    await settle(store, "holder")

    assert await store.apply([release("holder")]) == [[("next", 1)]]
    assert await marks(store, ("ended", 1), ("next", 1), ("last", 1)) == ["queued", None, "queued"]
    # The skipped ones left the line for good: even pending again (a retried
    # run), they are not let in ahead of "last".
    await store.save_checkpoint(make_checkpoint("settled", 1, kind="remote", error=QUEUED))
    await store.apply([UpdateRun("ended", {"status": "suspended"})])
    await settle(store, "next")
    assert await store.apply([release("next")]) == [[("last", 1)]]
    await settle(store, "last")
    assert await store.apply([release("last")]) == [[]]


async def test_queue_operations_roll_back_with_their_batch(store: AnyStore) -> None:
    keys = [(name, 1) for name in ("a", "b", "c", "d")]
    await queued_steps(store, *keys)
    assert await store.apply([admit("a"), admit("b", at=1.0)]) == [True, False]
    await settle(store, "a")
    checkpoints = [await store.get_checkpoints(r) for r in "abcd"]

    with pytest.raises(WriteConflict):
        await store.apply(
            [
                release("a"),
                admit("c", at=2.0),
                AdmitToQueue("other", "d", 1, 0, 1, 3.0),
                UpdateRun("a", {}, expect_status=frozenset({"running"})),
            ]
        )
    assert [await store.get_checkpoints(r) for r in "abcd"] == checkpoints

    # a still holds its slot (so its release lets b in), c never joined the
    # line, and d never took the other queue's slot.
    assert await store.apply([AdmitToQueue("other", "c", 1, 0, 1, 4.0)]) == [True]
    assert await store.apply([release("a")]) == [[("b", 1)]]
    assert await store.apply([admit("d", at=5.0)]) == [False]
    await settle(store, "b")
    assert await store.apply([release("b")]) == [[("d", 1)]]


# -- signals ------------------------------------------------------------------------


async def test_wait_registers_a_waiter_and_delivery_settles_it(store: AnyStore) -> None:
    pending = make_checkpoint(seq=2, kind="signal", name="approved")
    await store.save_checkpoint(pending)

    assert await store.add_signal_waiter("r1/approved", "r1", 2) is None
    assert await store.signal_waiter("r1/approved") == ("r1", 2)

    assert await store.deliver_signal("r1/approved", "true", at=8.0) == ("r1", 2)
    assert await store.signal_waiter("r1/approved") is None
    assert await store.buffered_signals("r1/approved") == []
    assert await store.get_checkpoints("r1") == [
        attrs.evolve(pending, status="completed", output="true", finished_at=8.0)
    ]


async def test_signals_without_a_waiter_are_buffered_in_order(store: AnyStore) -> None:
    await store.save_checkpoint(make_checkpoint(seq=1, kind="signal"))
    await store.save_checkpoint(make_checkpoint(seq=2, kind="signal"))

    assert await store.apply([DeliverSignal("tok", '"one"'), DeliverSignal("tok", '"two"')]) == [
        None,
        None,
    ]
    assert await store.deliver_signal("tok", '"three"') is None
    assert await store.deliver_signal("elsewhere", '"x"') is None
    assert await store.buffered_signals("tok") == ['"one"', '"two"', '"three"']

    # A wait consumes the oldest payload, settles its checkpoint, registers nothing.
    assert await store.apply([WaitSignal("tok", "r1", 1, at=4.0)]) == ['"one"']
    assert await store.add_signal_waiter("tok", "r1", 2) == '"two"'
    assert await store.signal_waiter("tok") is None
    assert await store.buffered_signals("tok") == ['"three"']
    assert await store.buffered_signals("elsewhere") == ['"x"']
    assert await store.buffered_signals("never") == []
    first, second = await store.get_checkpoints("r1")
    assert (first.status, first.output, first.finished_at) == ("completed", '"one"', 4.0)
    assert (second.status, second.output, second.finished_at) == ("completed", '"two"', None)


async def test_delivery_to_a_settled_waiter_is_buffered(store: AnyStore) -> None:
    # The wait timed out: its checkpoint settled before the signal arrived.
    timed_out = make_checkpoint(seq=1, kind="signal", status="failed")
    await store.save_checkpoint(timed_out)
    await store.add_signal_waiter("tok", "r1", 1)
    # A waiter whose checkpoint is gone altogether.
    await store.add_signal_waiter("gone", "r1", 7)

    assert await store.deliver_signal("tok", '"late"') is None
    assert await store.deliver_signal("gone", '"late too"') is None
    assert await store.signal_waiter("tok") is None
    assert await store.signal_waiter("gone") is None
    assert await store.buffered_signals("tok") == ['"late"']
    assert await store.buffered_signals("gone") == ['"late too"']
    assert await store.get_checkpoints("r1") == [timed_out]


async def test_remove_signal_waiter(store: AnyStore) -> None:
    await store.save_checkpoint(make_checkpoint(kind="signal"))
    await store.add_signal_waiter("tok", "r1", 1)
    await store.add_signal_waiter("keep", "r1", 1)

    await store.remove_signal_waiter("tok")
    assert await store.apply([RemoveSignalWaiter("never-registered")]) == [None]
    assert await store.signal_waiter("tok") is None
    assert await store.signal_waiter("keep") == ("r1", 1)
    assert await store.deliver_signal("tok", '"x"') is None
    assert await store.buffered_signals("tok") == ['"x"']


async def test_a_new_waiter_replaces_the_old_one(store: AnyStore) -> None:
    await store.add_signal_waiter("tok", "r1", 1)
    await store.add_signal_waiter("tok", "r1", 5)
    assert await store.signal_waiter("tok") == ("r1", 5)


# -- leases -------------------------------------------------------------------------


async def test_lock_run_rules(store: AnyStore) -> None:
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
    assert await store.get_run("r1") == make_run(lease_owner="e2", lease_expiry=50.0, recoveries=1)


async def test_release_run_only_by_its_owner(store: AnyStore) -> None:
    await store.create_run(make_run())
    await store.try_lock_run("r1", "e1", 10.0, 0.0)

    await store.release_run_lock("r1", "e2")
    assert await store.get_run("r1") == make_run(lease_owner="e1", lease_expiry=10.0)
    assert await store.apply([ReleaseRun("r1", "e1"), ReleaseRun("missing", "e1")]) == [None, None]
    assert await store.get_run("r1") == make_run()
    # A released lease is free: taking it is no recovery.
    assert await store.try_lock_run("r1", "e2", 10.0, 1.0)
    run = await store.get_run("r1")
    assert run is not None
    assert run.recoveries == 0


# -- begin_turn ---------------------------------------------------------------------


async def test_begin_turn_returns_none_and_writes_nothing(store: AnyStore) -> None:
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


@pytest.mark.parametrize(
    ("status", "turn_status"),
    [
        ("pending", "running"),
        ("suspended", "running"),
        ("running", "running"),
        ("cancelling", "cancelling"),
    ],
)
async def test_begin_turn_leases_and_reads_the_run(
    store: AnyStore, status: str, turn_status: str
) -> None:
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
    expected = make_run(status=turn_status, wake_at=3.0, lease_owner="e1", lease_expiry=30.0)
    assert turn.run == expected
    assert [cp.seq for cp in turn.checkpoints] == sorted(seqs)
    assert turn.checkpoints[0] == make_checkpoint(seq=-2)
    assert await store.get_run("r1") == expected


async def test_begin_turn_takes_over_a_lapsed_lease(store: AnyStore) -> None:
    await store.create_run(make_run(status="running", lease_owner="dead", lease_expiry=5.0))
    turn = await store.begin_turn("r1", "e1", expiry=30.0, now=5.0)
    assert turn is not None
    assert turn.run == make_run(status="running", lease_owner="e1", lease_expiry=30.0, recoveries=1)
    assert turn.checkpoints == ()
    # The same owner may begin another turn while its lease is live.
    again = await store.begin_turn("r1", "e1", expiry=40.0, now=6.0)
    assert again is not None
    assert again.run == attrs.evolve(turn.run, lease_expiry=40.0)


# -- listing ------------------------------------------------------------------------


async def test_list_runs_filters_and_orders_oldest_first(store: AnyStore) -> None:
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


async def test_list_due_runs(store: AnyStore) -> None:
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


async def test_list_stalled_runs(store: AnyStore) -> None:
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
    # A retired handoff may stay pending for good: it does not count.
    await store.save_checkpoint(
        make_checkpoint("retired", 1_000_000_001, kind="child", name="onError:retried:x")
    )
    await store.save_checkpoint(make_checkpoint("child-waits", 1, kind="child"))
    await store.save_checkpoint(make_checkpoint("remote-runs", 1, kind="remote", status="running"))

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


async def test_due_times_follow_every_run_write(store: AnyStore) -> None:
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
    with pytest.raises(WriteConflict):
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


# -- statistics and closing ---------------------------------------------------------


async def test_statistics_count_rows_read(store: AnyStore) -> None:
    assert counters(store) == (0, 0, 0, 0, 0)
    await store.apply([CreateRun(make_run("a")), CreateRun(make_run("b"))])
    await store.apply([PutCheckpoint(make_checkpoint("a", s)) for s in (1, 2, 3)])
    assert counters(store) == (2, 5, 2, 0, 0)

    await store.get_run("a")
    await store.get_run("missing")
    await store.list_runs()
    await store.get_checkpoints("a")
    await store.get_checkpoints("a", 2, 2)
    assert counters(store) == (2, 5, 2, 3, 4)

    # Counts, due runs and signals return no rows.
    await store.count_checkpoints("a", 1, 3, ["pending"])
    await store.list_due_runs(1e9, 10)
    await store.next_due_time()
    await store.buffered_signals("t")
    await store.signal_waiter("t")
    assert counters(store) == (2, 5, 2, 3, 4)

    await store.apply([])
    assert counters(store) == (3, 5, 3, 3, 4)
    assert store.statistics() is store.statistics()


async def test_calls_after_aclose_raise_closed_resource_error(store: AnyStore) -> None:
    await store.create_run(make_run())
    await store.aclose()
    await store.aclose()

    with pytest.raises(trio.ClosedResourceError):
        await store.apply([CreateRun(make_run("x"))])
    with pytest.raises(trio.ClosedResourceError):
        await store.create_run(make_run("x"))
    with pytest.raises(trio.ClosedResourceError):
        await store.begin_turn("r1", "e", 1.0, 0.0)
    with pytest.raises(trio.ClosedResourceError):
        await store.get_run("r1")
    with pytest.raises(trio.ClosedResourceError):
        await store.list_runs()
    with pytest.raises(trio.ClosedResourceError):
        await store.get_checkpoints("r1")
    with pytest.raises(trio.ClosedResourceError):
        await store.count_checkpoints("r1", 0, 1, ["pending"])
    with pytest.raises(trio.ClosedResourceError):
        await store.list_due_runs(0.0, 1)
    with pytest.raises(trio.ClosedResourceError):
        await store.next_due_time()
    with pytest.raises(trio.ClosedResourceError):
        await store.buffered_signals("t")
    with pytest.raises(trio.ClosedResourceError):
        await store.signal_waiter("t")


# -- SQLite only --------------------------------------------------------------------


async def test_sqlite_data_survives_reopening(sqlite_url: str) -> None:
    run = make_run(tags=("a",), error=ErrorInfo(message="m", details={"x": 1}))
    checkpoint = make_checkpoint(errors=(ErrorInfo(message="e1"),), attempts=1)
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(run)
        await store.save_checkpoint(checkpoint)
        await store.add_signal_waiter("waiting", "r1", 1)
        await store.deliver_signal("buffered", '"p1"')
        await store.deliver_signal("buffered", '"p2"')

    async with open_sqlite_store(sqlite_url) as store:
        assert await store.get_run("r1") == run
        assert await store.get_checkpoints("r1") == [checkpoint]
        assert await store.signal_waiter("waiting") == ("r1", 1)
        assert await store.buffered_signals("buffered") == ['"p1"', '"p2"']
        assert await store.next_due_time() == 0.0


@pytest.mark.parametrize(
    "url",
    [
        "sqlite://",
        "sqlite:///",
        "sqlite:////",
        "sqlite:///dir/",
        "sqlite://host/x.db",
        "sqlite://localhost//abs/x.db",
        "sqlite:x.db",
        "sqlite:/x.db",
        "sqlite:///:memory:",
        "sqlite:///x.db?timeout=5",
        "sqlite:///x.db?synchronous=OFF",
        "sqlite:///x.db?synchronous=",
        "sqlite:///x.db?synchronous",
        "sqlite:///x.db?synchronous=NORMAL&synchronous=NORMAL",
        "sqlite:///x.db?synchronous=NORMAL&mode=ro",
        "sqlite:///x.db#fragment",
        "memory://",
    ],
)
async def test_sqlite_rejects_malformed_urls(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidURLError):
        async with open_sqlite_store(url):
            pass  # pragma: no cover
    assert list(await trio.Path(tmp_path).iterdir()) == []


async def test_sqlite_relative_and_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    async with open_sqlite_store("sqlite:///data/rel.db") as store:
        await store.create_run(make_run())
    assert (tmp_path / "data" / "rel.db").exists()
    absolute = tmp_path / "data" / "rel.db"
    async with open_sqlite_store(f"sqlite:///{absolute}") as store:
        assert store.path == str(absolute)
        assert await store.get_run("r1") == make_run()


async def test_sqlite_defaults_to_wal_and_synchronous_full(sqlite_url: str, tmp_path: Path) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        assert store.synchronous == "FULL"
    async with open_sqlite_store(f"{sqlite_url}?synchronous=NORMAL") as store:
        assert store.synchronous == "NORMAL"
    async with open_sqlite_store(f"{sqlite_url}?synchronous=normal") as store:
        assert store.synchronous == "NORMAL"
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert connection.execute("PRAGMA user_version").fetchone() == (_sqlite_schema.SCHEMA_VERSION,)
    connection.close()


async def test_sqlite_refuses_a_newer_schema(sqlite_url: str, tmp_path: Path) -> None:
    async with open_sqlite_store(sqlite_url):
        pass
    newer = _sqlite_schema.SCHEMA_VERSION + 1
    with sqlite3.connect(tmp_path / "store.db") as connection:
        connection.execute(f"PRAGMA user_version = {newer}")
    connection.close()

    with pytest.raises(StoreError, match=f"schema version {newer}"):
        async with open_sqlite_store(sqlite_url):
            pass  # pragma: no cover


async def test_sqlite_migrates_a_version_1_file(sqlite_url: str, tmp_path: Path) -> None:
    run = make_run(input='{"big":"input"}', tags=("a",))
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(run)
    # Version 1 kept the input in the runs row: put the file back that way.
    with sqlite3.connect(tmp_path / "store.db", isolation_level=None) as connection:
        connection.executescript(
            """
            BEGIN;
            ALTER TABLE runs ADD COLUMN input TEXT NOT NULL DEFAULT '';
            UPDATE runs SET input = (SELECT input FROM run_inputs WHERE run_id = runs.id);
            DROP TABLE run_inputs;
            PRAGMA user_version = 1;
            COMMIT;
            """
        )
    connection.close()

    async with open_sqlite_store(sqlite_url) as store:
        assert await store.get_run("r1") == run
        await store.create_run(make_run("r2"))
        assert [r.id for r in await store.list_runs()] == ["r1", "r2"]
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (_sqlite_schema.SCHEMA_VERSION,)
        columns = {row[1] for row in connection.execute("PRAGMA table_info(runs)")}
        assert "input" not in columns
    connection.close()


async def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not a database, not at all" * 100)
    with pytest.raises(StoreError) as caught:
        async with open_sqlite_store(f"sqlite:///{tmp_path / 'junk.db'}"):
            pass  # pragma: no cover
    assert isinstance(caught.value.__cause__, sqlite3.DatabaseError)


async def test_sqlite_stores_share_one_file(sqlite_url: str) -> None:
    # Two engines (processes, in production) on one file see each other's writes.
    async with open_sqlite_store(sqlite_url) as first, open_sqlite_store(sqlite_url) as second:
        await first.create_run(make_run())
        assert await second.try_lock_run("r1", "e2", 10.0, 0.0)
        assert await first.try_lock_run("r1", "e1", 10.0, 1.0) is False
        run = await first.get_run("r1")
        assert run is not None
        assert run.lease_owner == "e2"


async def test_sqlite_translates_database_errors(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sqlite_schema, "BUSY_TIMEOUT", 0.01)
    async with open_sqlite_store(sqlite_url) as store:
        await store.create_run(make_run())
        # Another process holds the write lock past the busy timeout.
        blocker = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            with pytest.raises(StoreError) as caught:
                await store.apply([UpdateRun("r1", {"status": "running"})])
            assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
            assert not isinstance(caught.value, WriteConflict)
            # Readers are not held up by a writer (WAL).
            assert await store.get_run("r1") == make_run()
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
        # The store recovers once the lock is free.
        assert await store.apply([UpdateRun("r1", {"status": "running"})]) == [True]
        assert store.statistics().batches == 2


async def hold_connection(store: SQLiteStore, task_status: Any) -> None:
    """Hold the store's one connection until cancelled, so that trips queue."""
    async with store._limiter:
        task_status.started()
        await trio.sleep_forever()


async def test_sqlite_group_commit(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        await store.apply([CreateRun(make_run(f"r{i}")) for i in range(20)])
        base = store.statistics().transactions
        outcomes: dict[int, Any] = {}

        async def write(i: int) -> None:
            expect: frozenset[RunStatus] = frozenset({"running" if i == 7 else "pending"})
            try:
                outcomes[i] = await store.apply(
                    [
                        PutCheckpoint(make_checkpoint(f"r{i}", 1)),
                        UpdateRun(f"r{i}", {"wake_at": float(i)}, expect_status=expect),
                    ]
                )
            except WriteConflict as exc:
                outcomes[i] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            # The first writer leads a trip and waits for the connection; the
            # others queue behind it and all go in the next trip.
            nursery.start_soon(write, 0)
            await trio.testing.wait_all_tasks_blocked()
            for i in range(1, 20):
                nursery.start_soon(write, i)
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert isinstance(outcomes.pop(7), WriteConflict)
        assert all(result == [None, True] for result in outcomes.values())
        assert store.statistics().transactions == base + 2
        assert store.statistics().batches == 1 + 19
        assert await store.get_checkpoints("r7") == []
        assert await store.get_run("r7") == make_run("r7")
        assert await store.count_checkpoints("r8", 1, 1, ["pending"]) == 1
        due = await store.list_due_runs(now=100.0, limit=100)
        assert len(due) == 20


async def test_sqlite_many_concurrent_writers_share_transactions(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:

        async def workflow(i: int) -> None:
            await store.create_run(make_run(f"r{i}"))
            turn = await store.begin_turn(f"r{i}", "e", 10.0, 0.0)
            assert turn is not None
            await store.apply(
                [
                    PutCheckpoint(make_checkpoint(f"r{i}", 1, status="completed")),
                    UpdateRun(f"r{i}", {"status": "completed"}, expect_owner="e", now=1.0),
                ]
            )

        async with trio.open_nursery() as nursery:
            for i in range(200):
                nursery.start_soon(workflow, i)

        stats = store.statistics()
        assert stats.batches == 600
        assert stats.transactions < stats.batches // 10
        assert len(await store.list_runs(statuses={"completed"})) == 200


async def test_sqlite_cancelled_queued_caller_withdraws_its_batch(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        outcomes: list[str] = []

        async def write(run_id: str, scope: trio.CancelScope) -> None:
            with scope:
                await store.create_run(make_run(run_id))
                outcomes.append(run_id)

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            leader, queued = trio.CancelScope(), trio.CancelScope()
            nursery.start_soon(write, "taken", leader)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write, "queued", queued)
            await trio.testing.wait_all_tasks_blocked()
            # The leader's batch is taken: it commits, and its caller learns
            # so. The queued one is withdrawn.
            leader.cancel()
            queued.cancel()
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes == ["taken"]
        assert await store.get_run("taken") == make_run("taken")
        assert await store.get_run("queued") is None
        assert store.statistics().batches == 1


async def test_sqlite_aclose_fails_queued_callers(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        outcomes: dict[str, Any] = {}

        async def write(run_id: str) -> None:
            try:
                outcomes[run_id] = await store.create_run(make_run(run_id))
            except trio.ClosedResourceError as exc:
                outcomes[run_id] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            nursery.start_soon(write, "taken")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(write, "queued")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(store.aclose)
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes["taken"] == (make_run("taken"), True)
        assert isinstance(outcomes["queued"], trio.ClosedResourceError)

    async with open_sqlite_store(sqlite_url) as store:
        assert [run.id for run in await store.list_runs()] == ["taken"]


async def test_sqlite_batch_failing_in_the_database_fails_alone(sqlite_url: str) -> None:
    async with open_sqlite_store(sqlite_url) as store:
        await store.apply([CreateRun(make_run("good")), CreateRun(make_run("bad"))])
        outcomes: dict[str, Any] = {}

        async def write(run_id: str, value: Any) -> None:
            try:
                outcomes[run_id] = await store.apply(
                    [
                        PutCheckpoint(make_checkpoint(run_id, 1)),
                        UpdateRun(run_id, {"output": value}),
                    ]
                )
            except StoreError as exc:
                outcomes[run_id] = exc

        async with trio.open_nursery() as nursery:
            holder = trio.CancelScope()

            async def hold(task_status: Any) -> None:
                with holder:
                    await hold_connection(store, task_status)

            await nursery.start(hold)
            nursery.start_soon(store.get_run, "good")
            await trio.testing.wait_all_tasks_blocked()
            # sqlite3 cannot bind an object(): the error comes from the
            # database layer, in the middle of the batch.
            nursery.start_soon(write, "bad", object())
            nursery.start_soon(write, "good", '"fine"')
            await trio.testing.wait_all_tasks_blocked()
            holder.cancel()

        assert outcomes["good"] == [None, True]
        error = outcomes["bad"]
        assert isinstance(error, StoreError)
        assert isinstance(error.__cause__, sqlite3.Error)
        assert await store.get_checkpoints("bad") == []
        assert await store.get_run("bad") == make_run("bad")
        good = await store.get_run("good")
        assert good is not None
        assert good.output == '"fine"'
        assert store.statistics().transactions == 2
