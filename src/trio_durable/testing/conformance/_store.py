"""The store conformance suite: every `Store` behaves as `MemoryStore` does.

Each check is an ``async def check_...(factory)`` that opens the fresh, empty
stores it needs from ``factory`` (a `StoreFactory`, or a plain `OpenStore`),
runs operations on them and asserts what the engine relies on: atomic
batches, exactly one winner of a claim, settles bound to execution ids,
leases, the join barrier's counts, flow-control queues, signals, webhooks
and breakpoints, keyed values, due times, pruning (and the optional
`RunDeleter.delete_runs`), statistics and closing.
`STORE_CHECKS` lists them all, for ``pytest.mark.parametrize``; `check_store` runs them one
after another.

The checks use plain ``assert`` statements and no pytest fixtures; under
pytest, ``pytest.register_assert_rewrite("trio_durable.testing.conformance")``
in a ``conftest.py`` makes their failures explain themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..._stores._base import RunWatch, Store, StoreStatistics, WriteConflict
from ..._stores._ops import Announce, CreateRun, PutCheckpoint, UpdateRun
from ._outcomes import CheckResult, run_suite, skip
from ._store_attempts import ATTEMPTS_CHECKS
from ._store_checkpoints import CHECKPOINTS_CHECKS
from ._store_deletes import DELETES_CHECKS
from ._store_executions import EXECUTIONS_CHECKS
from ._store_hooks import HOOKS_CHECKS
from ._store_queries import QUERIES_CHECKS
from ._store_queues import QUEUES_CHECKS
from ._store_records import RECORDS_CHECKS
from ._store_runs import RUNS_CHECKS
from ._store_search import SEARCH_CHECKS
from ._store_signals import SIGNALS_CHECKS
from ._store_stamps import STAMPS_CHECKS
from ._store_support import (
    OpenStore,
    StoreCheck,
    StoreFactory,
    counters,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
    two_handles,
)
from ._store_values import VALUES_CHECKS
from ._store_whole_runs import WHOLE_RUN_CHECKS


async def check_statistics_are_a_live_store_statistics(factory: StoreFactory | OpenStore) -> None:
    """`Store.statistics` returns a `StoreStatistics`, zero in a fresh store."""
    async with fresh_store(factory) as store:
        stats = store.statistics()
        assert isinstance(stats, StoreStatistics)
        assert stats == StoreStatistics()


async def check_handles_share_one_store(factory: StoreFactory | OpenStore) -> None:
    """Two handles on one store (as two engine processes have) see each
    other's writes, and a lease or a claim won through one holds against the
    other."""
    async with two_handles(factory) as (first, second):
        await first.create_run(make_run())
        assert await second.try_lock_run("r1", "e2", 10.0, 0.0)
        assert await first.try_lock_run("r1", "e1", 10.0, 1.0) is False
        run = await first.get_run("r1")
        assert run is not None
        assert run.lease_owner == "e2"

        pending = make_checkpoint()
        await first.save_checkpoint(pending)
        wins: list[int] = []

        async def deliver(store: Store, i: int) -> None:
            settled = make_checkpoint(status="completed", output=str(i))
            if await store.save_checkpoint_if_pending(settled):
                wins.append(i)

        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(deliver, first if i % 2 else second, i)
        assert len(wins) == 1
        [stored] = await second.get_checkpoints("r1", 1, 1)
        assert stored.output == str(wins[0])

        # A signal buffered through one handle is consumed through the other.
        await second.save_checkpoint(make_checkpoint(seq=2, kind="signal"))
        assert await first.deliver_signal("tok", '"x"') is None
        assert await second.add_signal_waiter("tok", "r1", 2) == '"x"'
        [signalled] = await first.get_checkpoints("r1", 2, 2)
        assert (signalled.status, signalled.output) == ("completed", '"x"')


async def check_statistics_count_rows_read(factory: StoreFactory | OpenStore) -> None:
    """The statistics count batches, operations, transactions and rows read."""
    async with fresh_store(factory) as store:
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


async def check_calls_after_aclose_raise_closed_resource_error(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.aclose` may be called twice; every call after it raises `trio.ClosedResourceError`."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run())
        await store.aclose()
        await store.aclose()

        with raises(trio.ClosedResourceError):
            await store.apply([CreateRun(make_run("x"))])
        with raises(trio.ClosedResourceError):
            await store.create_run(make_run("x"))
        with raises(trio.ClosedResourceError):
            await store.begin_turn("r1", "e", 1.0, 0.0)
        with raises(trio.ClosedResourceError):
            await store.get_run("r1")
        with raises(trio.ClosedResourceError):
            await store.list_runs()
        with raises(trio.ClosedResourceError):
            await store.get_checkpoints("r1")
        with raises(trio.ClosedResourceError):
            await store.count_checkpoints("r1", 0, 1, ["pending"])
        with raises(trio.ClosedResourceError):
            await store.list_due_runs(0.0, 1)
        with raises(trio.ClosedResourceError):
            await store.next_due_time()
        with raises(trio.ClosedResourceError):
            await store.buffered_signals("t")
        with raises(trio.ClosedResourceError):
            await store.signal_waiter("t")
        with raises(trio.ClosedResourceError):
            await store.list_stalled_runs(1)


async def check_announcements_reach_the_watches_of_other_writers(
    factory: StoreFactory | OpenStore,
) -> None:
    """A store that is a `RunWatch` delivers the `Announce` operations of
    committed batches to every watch (through another handle too), in
    commit order, but the watch's own and those of batches that failed.
    Skipped for a store that is no `RunWatch` (it takes no announcements)."""
    async with two_handles(factory) as (first, second):
        if not isinstance(first, RunWatch):
            skip("the store is no RunWatch: it takes no announcements")
        heard: list[Announce] = []
        latest = trio.Event()

        def deliver(announced: Sequence[Announce] | None) -> None:
            # None (some may have been missed) only follows a lost
            # connection, which this check does not cause.
            assert announced is not None
            heard.extend(announced)
            if any(item.run_id == "last" for item in announced):
                latest.set()

        def said(run_id: str, origin: str) -> Announce:
            return Announce(run_id=run_id, kind="wake", workflow="w", version="1", origin=origin)

        async with trio.open_nursery() as nursery:
            await nursery.start(first.watch, "watcher", deliver)
            await second.create_run(make_run("r1"))
            await second.apply([said("r1", "writer"), said("mine", "watcher")])
            with raises(WriteConflict):
                await second.apply(
                    [
                        said("rolled-back", "writer"),
                        UpdateRun("r1", {}, expect_status=frozenset({"completed"})),
                    ]
                )
            end = Announce(run_id="r1", kind="end", origin="writer")
            await first.apply([end, said("last", "writer")])
            with trio.fail_after(10):
                await latest.wait()
            nursery.cancel_scope.cancel()
        assert heard == [said("r1", "writer"), end, said("last", "writer")]


STORE_CHECKS: tuple[StoreCheck, ...] = (
    check_statistics_are_a_live_store_statistics,
    *RUNS_CHECKS,
    *CHECKPOINTS_CHECKS,
    *ATTEMPTS_CHECKS,
    *EXECUTIONS_CHECKS,
    *RECORDS_CHECKS,
    *QUEUES_CHECKS,
    *WHOLE_RUN_CHECKS,
    *SIGNALS_CHECKS,
    *HOOKS_CHECKS,
    *QUERIES_CHECKS,
    *DELETES_CHECKS,
    *STAMPS_CHECKS,
    *VALUES_CHECKS,
    *SEARCH_CHECKS,
    check_handles_share_one_store,
    check_announcements_reach_the_watches_of_other_writers,
    check_statistics_count_rows_read,
    check_calls_after_aclose_raise_closed_resource_error,
)
"""Every store check, for ``pytest.mark.parametrize``::

    @pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.__name__)
    async def test_my_store(check):
        await check(open_my_store)
"""


async def check_store(factory: StoreFactory | OpenStore) -> list[CheckResult]:
    """Run every check of `STORE_CHECKS` against the stores ``factory`` opens.

    Args:
      factory: Opens fresh, empty stores of the kind under test: a
        zero-argument callable returning an async context manager that yields
        one (`OpenStore`), or a `StoreFactory` that can also open two handles
        on one store.

    Returns:
      One `CheckResult` per check, each ``"passed"`` or ``"skipped"`` (a
      protocol the store does not offer, such as `RunWatch`).

    Raises:
      AssertionError: The store does not behave as the engine needs (the
        traceback names the check).
    """
    return await run_suite(STORE_CHECKS, factory)
