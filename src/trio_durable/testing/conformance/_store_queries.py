"""Store checks of the queries for people and tools: finding and counting
runs, summing up fans, pages of checkpoints, pruning ended runs."""

from __future__ import annotations

from typing import Any

import trio

from ..._base._records import ErrorInfo, Mark, RunFilter, signal_token
from ..._stores._base import Store
from ..._stores._ops import AdmitToQueue, UpdateRun
from ._store_support import (
    OpenStore,
    StoreFactory,
    counters,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
)


async def _runs(store: Store) -> None:
    """Eight runs; ``f`` and ``g`` share a creation time (ties go by id)."""
    for run in (
        make_run("a", created_at=1.0, status="completed", tags=("vip", "eu")),
        make_run("b", created_at=2.0, status="failed", namespace="blue", tags=("eu",)),
        make_run("c", created_at=3.0, status="running", workflow="refund", parent_id="a"),
        make_run("d", created_at=4.0, status="completed", parent_id="a", tags=("vip",)),
        make_run("e", created_at=5.0, status="suspended", namespace="blue", tags=("vip", "eu")),
        make_run("f", created_at=6.0, status="completed", workflow="refund"),
        make_run("g", created_at=6.0, status="failed", tags=("eu", "vip", "eu")),
        make_run("h", created_at=7.0, status="pending", parent_id="b"),
    ):
        await store.create_run(run)


async def check_find_runs_filters_and_orders_newest_first(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.find_runs` orders by ``(created_at, id)`` descending, applies
    every filter given (tags: has all; an id prefix: case-sensitive, with
    no wildcard; top level: no parent), and goes on strictly after
    ``before``."""
    async with fresh_store(factory) as store:
        await _runs(store)

        async def ids(
            before: tuple[float, str] | None = None, limit: int = 100, **filters: Any
        ) -> list[str]:
            found = await store.find_runs(RunFilter(**filters), before=before, limit=limit)
            return [run.id for run in found]

        assert await ids() == ["h", "g", "f", "e", "d", "c", "b", "a"]
        assert await ids(limit=3) == ["h", "g", "f"]
        assert await ids(limit=0) == []
        assert await ids(before=(6.0, "g")) == ["f", "e", "d", "c", "b", "a"]
        assert await ids(before=(6.0, "f"), limit=2) == ["e", "d"]
        assert await ids(before=(1.0, "a")) == []
        assert await ids(statuses=frozenset({"completed"})) == ["f", "d", "a"]
        # Several statuses, newest first across them, limit across them.
        assert await ids(statuses=frozenset({"completed", "failed"}), limit=4) == [
            "g",
            "f",
            "d",
            "b",
        ]
        assert await ids(statuses=frozenset({"completed", "failed"}), before=(6.0, "g")) == [
            "f",
            "d",
            "b",
            "a",
        ]
        assert await ids(workflow="refund") == ["f", "c"]
        assert await ids(namespace="blue") == ["e", "b"]
        assert await ids(parent_id="a") == ["d", "c"]
        assert await ids(created_after=3.0, created_before=6.0) == ["e", "d", "c"]
        assert await ids(tags=("vip",)) == ["g", "e", "d", "a"]
        assert await ids(tags=("eu", "vip")) == ["g", "e", "a"]
        assert await ids(tags=("eu", "vip"), before=(6.0, "g"), limit=1) == ["e"]
        assert await ids(tags=("eu", "vip"), namespace="default") == ["g", "a"]
        assert await ids(tags=("eu",), created_after=2.0, created_before=6.0) == ["e", "b"]
        assert await ids(tags=("eu", "vip"), statuses=frozenset({"failed", "completed"})) == [
            "g",
            "a",
        ]
        assert await ids(tags=("nobody",)) == []
        assert await ids(tags=("vip",), parent_id="a", workflow="checkout") == ["d"]
        # Tags follow the run: an update replaces them.
        await store.apply([UpdateRun("d", {"tags": ("eu", "onError:*")})])
        assert await ids(tags=("vip",)) == ["g", "e", "a"]
        assert await ids(tags=("onError:*", "eu")) == ["d"]
        [found] = await store.find_runs(
            RunFilter(workflow="refund", statuses=frozenset({"running"}))
        )
        assert found == await store.get_run("c")
        assert await ids(top_level=True) == ["g", "f", "e", "b", "a"]
        assert await ids(top_level=True, tags=("vip",), limit=2) == ["g", "e"]
        for run_id, created in (("order-1", 8.0), ("order-10", 9.0), ("Order-2", 10.0)):
            await store.create_run(make_run(run_id, created_at=created))
        await store.create_run(make_run("order_%x", created_at=11.0, parent_id="order-1"))
        assert await ids(id_prefix="order-1") == ["order-10", "order-1"]
        assert await ids(id_prefix="order") == ["order_%x", "order-10", "order-1"]
        assert await ids(id_prefix="order", top_level=True) == ["order-10", "order-1"]
        # No wildcard: % and _ are themselves.
        assert await ids(id_prefix="order_%") == ["order_%x"]
        assert await ids(id_prefix="orde_") == []
        assert await ids(id_prefix="order-10", before=(9.0, "order-10")) == []


async def check_count_runs_per_status(factory: StoreFactory | OpenStore) -> None:
    """`Store.count_runs` counts the runs matching a filter, per status."""
    async with fresh_store(factory) as store:
        assert await store.count_runs(RunFilter()) == {}
        await _runs(store)
        assert await store.count_runs(RunFilter()) == {
            "completed": 3,
            "failed": 2,
            "pending": 1,
            "running": 1,
            "suspended": 1,
        }
        assert await store.count_runs(RunFilter(tags=("vip", "eu"))) == {
            "completed": 1,
            "failed": 1,
            "suspended": 1,
        }
        assert await store.count_runs(
            RunFilter(statuses=frozenset({"completed", "pending"}), created_after=4.0)
        ) == {"completed": 2, "pending": 1}
        assert await store.count_runs(RunFilter(namespace="blue", parent_id="zz")) == {}
        assert await store.count_runs(RunFilter(top_level=True, id_prefix="g")) == {"failed": 1}
        assert await store.count_runs(RunFilter(top_level=True)) == {
            "completed": 2,
            "failed": 2,
            "suspended": 1,
        }


async def check_find_runs_top_level_and_by_id_prefix(factory: StoreFactory | OpenStore) -> None:
    """`RunFilter.top_level` keeps runs without a parent; `RunFilter.id_prefix`
    runs whose id starts with it (case-sensitive, a character at a time,
    other filters and cursors applying as ever); `Store.count_runs` counts
    the same runs."""
    async with fresh_store(factory) as store:
        await _runs(store)
        for run in (
            make_run("order-1", created_at=8.0, status="completed"),
            make_run("order-10", created_at=9.0, status="failed"),
            make_run("order-1.child.1", created_at=10.0, parent_id="order-1"),
            make_run("Order-2", created_at=11.0),
            make_run("order_3", created_at=12.0),
            make_run("ordé-4", created_at=13.0),
        ):
            await store.create_run(run)

        async def ids(before: tuple[float, str] | None = None, **filters: Any) -> list[str]:
            found = await store.find_runs(RunFilter(**filters), before=before)
            return [run.id for run in found]

        assert await ids(top_level=True) == [
            "ordé-4",
            "order_3",
            "Order-2",
            "order-10",
            "order-1",
            "g",
            "f",
            "e",
            "b",
            "a",
        ]
        assert await ids(top_level=True, namespace="blue") == ["e", "b"]
        assert await ids(id_prefix="order-1") == ["order-1.child.1", "order-10", "order-1"]
        assert await ids(id_prefix="order-1", top_level=True) == ["order-10", "order-1"]
        assert await ids(id_prefix="order-1", before=(10.0, "order-1.child.1")) == [
            "order-10",
            "order-1",
        ]
        assert await ids(id_prefix="ord") == [
            "ordé-4",
            "order_3",
            "order-1.child.1",
            "order-10",
            "order-1",
        ]
        assert await ids(id_prefix="ordé") == ["ordé-4"]
        # Neither a wildcard nor case-folded.
        assert await ids(id_prefix="order%") == []
        assert await ids(id_prefix="order_") == ["order_3"]
        assert await ids(id_prefix="ORDER") == []
        assert await ids(id_prefix="order-1.child.1.x") == []
        assert await ids(id_prefix="order-1", statuses=frozenset({"failed"})) == ["order-10"]
        assert await store.count_runs(RunFilter(top_level=True)) == {
            "completed": 3,
            "failed": 3,
            "pending": 3,
            "suspended": 1,
        }
        assert await store.count_runs(RunFilter(id_prefix="order-1", top_level=True)) == {
            "completed": 1,
            "failed": 1,
        }


async def _fan(store: Store) -> None:
    """Run r1: a step at 1, a fan of 6 at 2..7 (two failed, one pending), a
    step at 8, a fan of 2 at 9..10."""
    await store.create_run(make_run("r1", status="suspended"))
    await store.save_checkpoint(make_checkpoint("r1", 1, status="completed"))
    boom = ErrorInfo(message="boom", code="x")
    statuses = ["completed", "failed", "completed", "failed", "pending", "completed"]
    for i, status in enumerate(statuses):
        await store.save_checkpoint(
            make_checkpoint(
                "r1",
                2 + i,
                name="ship",
                kind="remote",
                status=status,
                attempts=i % 3,
                error=boom if status == "failed" else None,
                parallel_group=2,
                parallel_size=6,
                enqueued_at=100.0 + i,
                finished_at=None if status == "pending" else 200.0 + i,
            )
        )
    await store.save_checkpoint(make_checkpoint("r1", 8, kind="timer", name="sleep"))
    for seq in (9, 10):
        await store.save_checkpoint(
            make_checkpoint(
                "r1", seq, kind="child", name="audit", parallel_group=9, parallel_size=2
            )
        )


async def check_fan_counts_sum_up_each_fan_by_status(factory: StoreFactory | OpenStore) -> None:
    """`Store.fan_counts` returns one row per fan and checkpoint status, by
    fan then status, and no row for checkpoints outside fans."""
    async with fresh_store(factory) as store:
        assert await store.fan_counts("r1") == []
        await _fan(store)
        rows = await store.fan_counts("r1")
        assert [(r.fan, r.status, r.count) for r in rows] == [
            (2, "completed", 3),
            (2, "failed", 2),
            (2, "pending", 1),
            (9, "pending", 2),
        ]
        completed, failed, pending, audit = rows
        assert (completed.first_seq, completed.last_seq, completed.size) == (2, 7, 6)
        assert (completed.attempts, failed.attempts, pending.attempts) == (0 + 2 + 2, 1 + 0, 1)
        assert (completed.first_enqueued_at, completed.last_finished_at) == (100.0, 205.0)
        assert (failed.first_seq, failed.last_seq) == (3, 5)
        assert (pending.first_enqueued_at, pending.last_finished_at) == (104.0, None)
        assert (completed.kind, completed.name) == ("remote", "ship")
        assert (audit.kind, audit.name, audit.size, audit.first_seq) == ("child", "audit", 2, 9)
        assert await store.fan_counts("missing") == []


async def check_fan_counts_find_every_fan_however_recorded(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.fan_counts` finds fans after many steps, fans side by side,
    fans whose first members are not recorded (yet, or any more: only
    members count), and a fan of one; the checkpoints between fans and
    after them never count."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run("r1", status="suspended"))
        for seq in range(1, 31):
            await store.save_checkpoint(make_checkpoint("r1", seq, status="completed"))

        async def member(seq: int, fan: int, size: int, status: str = "completed") -> None:
            await store.save_checkpoint(
                make_checkpoint(
                    "r1",
                    seq,
                    name=f"f{fan}",
                    kind="remote",
                    status=status,
                    attempts=1,
                    parallel_group=fan,
                    parallel_size=size,
                )
            )

        for seq in range(31, 35):  # a fan of 4 at 31..34
            await member(seq, 31, 4)
        for seq in range(35, 38):  # right after it, a fan of 3 at 35..37
            await member(seq, 35, 3, "failed" if seq == 36 else "completed")
        await store.save_checkpoint(make_checkpoint("r1", 38, status="completed"))
        for seq in (41, 42):  # a fan of 5 at 39..43: 39, 40 and 43 not recorded
            await member(seq, 39, 5, "pending")
        await member(44, 44, 1)  # a fan of one
        for seq in range(45, 60):
            await store.save_checkpoint(make_checkpoint("r1", seq, status="pending"))
        rows = await store.fan_counts("r1")
        assert [(r.fan, r.status, r.count, r.first_seq, r.last_seq, r.size) for r in rows] == [
            (31, "completed", 4, 31, 34, 4),
            (35, "completed", 2, 35, 37, 3),
            (35, "failed", 1, 36, 36, 3),
            (39, "pending", 2, 41, 42, 5),
            (44, "completed", 1, 44, 44, 1),
        ], rows
        assert [(r.kind, r.name, r.attempts) for r in rows] == [
            ("remote", "f31", 4),
            ("remote", "f35", 2),
            ("remote", "f35", 1),
            ("remote", "f39", 2),
            ("remote", "f44", 1),
        ]
        assert await store.fan_counts("r2") == []


async def check_find_checkpoints_pages_by_seq_and_status(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.find_checkpoints` reads a seq range by seq, of some statuses,
    from an offset, at most a limit; each row read is counted."""
    async with fresh_store(factory) as store:
        await _fan(store)

        async def seqs(first: int, last: int, **options: Any) -> list[int]:
            return [cp.seq for cp in await store.find_checkpoints("r1", first, last, **options)]

        assert await seqs(2, 7) == [2, 3, 4, 5, 6, 7]
        assert await seqs(2, 7, offset=1, limit=2) == [3, 4]
        assert await seqs(2, 7, offset=9) == []
        assert await seqs(2, 7, limit=0) == []
        assert await seqs(2, 7, statuses=["failed"]) == [3, 5]
        assert await seqs(2, 7, statuses=["failed"], offset=1) == [5]
        assert await seqs(2, 7, statuses=["failed", "pending"], limit=2) == [3, 5]
        assert await seqs(-5, 100, statuses=["pending"]) == [6, 8, 9, 10]
        before = counters(store)[4]
        [cp] = await store.find_checkpoints("r1", 3, 3)
        assert cp == (await store.get_checkpoints("r1", 3, 3))[0]
        assert counters(store)[4] == before + 2


QUEUED = Mark(code="queued", message="waiting for a slot of queue 'q'")


async def check_prune_runs_deletes_ended_runs_with_their_rows(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.prune_runs` deletes ended runs older than their status's cutoff
    (oldest first, at most ``limit``) with everything of theirs, and never a
    run that has not ended nor one whose parent has not ended."""
    async with fresh_store(factory) as store:
        for run in (
            make_run("old", status="completed", updated_at=10.0, tags=("vip",)),
            make_run("older", status="completed", updated_at=5.0),
            make_run("new", status="completed", updated_at=50.0),
            make_run("bad", status="failed", updated_at=10.0),
            make_run("gone", status="cancelled", updated_at=1.0),
            make_run("busy", status="suspended", updated_at=1.0),
            make_run("kid", status="completed", updated_at=1.0, parent_id="busy"),
            make_run("orphan", status="completed", updated_at=1.0, parent_id="pruned-long-ago"),
            make_run("old1", status="running", updated_at=1.0),
        ):
            await store.create_run(run)
        for run_id in ("old", "old1"):
            await store.save_checkpoint(make_checkpoint(run_id, 1, kind="signal", name="go"))
            await store.add_signal_waiter(signal_token(run_id, "go"), run_id, 1)
            await store.deliver_signal(signal_token(run_id, "spare"), '"x"')
        await store.save_checkpoint(make_checkpoint("old", 2, kind="remote", mark=QUEUED))
        assert await store.apply([AdmitToQueue("q", "old", 2, 0, 1, 0.0)]) == [True]

        cutoffs: dict[Any, float] = {"completed": 20.0, "cancelled": 0.5, "running": 99.0}
        assert await store.prune_runs(cutoffs, 2) == ["older", "orphan"]
        assert await store.prune_runs(cutoffs, 10) == ["old"]
        assert await store.prune_runs(cutoffs, 10) == []
        assert await store.prune_runs({"failed": 11.0, "cancelled": 2.0}, 10) == ["bad", "gone"]
        assert await store.get_run("old") is None
        assert await store.get_checkpoints("old") == []
        assert await store.signal_waiter(signal_token("old", "go")) is None
        assert await store.buffered_signals(signal_token("old", "spare")) == []
        assert await store.find_runs(RunFilter(tags=("vip",))) == []
        # The queue slot it held is free again.
        await store.create_run(make_run("c", status="suspended"))
        await store.save_checkpoint(make_checkpoint("c", 1, kind="remote", mark=QUEUED))
        assert await store.apply([AdmitToQueue("q", "c", 1, 0, 1, 0.0)]) == [True]
        # What is not its own is kept: a run whose id starts the same.
        assert await store.signal_waiter(signal_token("old1", "go")) == ("old1", 1)
        assert await store.buffered_signals(signal_token("old1", "spare")) == ['"x"']
        left = sorted(run.id for run in await store.find_runs(RunFilter()))
        assert left == ["busy", "c", "kid", "new", "old1"]
        assert await store.prune_runs({"completed": 1e9}, 0) == []
        # A new run may take a pruned run's id.
        await store.create_run(make_run("old", status="pending", created_at=3.0))
        assert [r.id for r in await store.find_runs(RunFilter(tags=("vip",)))] == []


async def check_queries_after_aclose_raise_closed_resource_error(
    factory: StoreFactory | OpenStore,
) -> None:
    """The queries raise `trio.ClosedResourceError` once the store is closed."""
    async with fresh_store(factory) as store:
        await store.aclose()
        with raises(trio.ClosedResourceError):
            await store.find_runs(RunFilter())
        with raises(trio.ClosedResourceError):
            await store.count_runs(RunFilter())
        with raises(trio.ClosedResourceError):
            await store.fan_counts("r1")
        with raises(trio.ClosedResourceError):
            await store.find_checkpoints("r1", 0, 1)
        with raises(trio.ClosedResourceError):
            await store.prune_runs({"completed": 1.0}, 1)


QUERIES_CHECKS = (
    check_find_runs_filters_and_orders_newest_first,
    check_count_runs_per_status,
    check_find_runs_top_level_and_by_id_prefix,
    check_fan_counts_sum_up_each_fan_by_status,
    check_fan_counts_find_every_fan_however_recorded,
    check_find_checkpoints_pages_by_seq_and_status,
    check_prune_runs_deletes_ended_runs_with_their_rows,
    check_queries_after_aclose_raise_closed_resource_error,
)
