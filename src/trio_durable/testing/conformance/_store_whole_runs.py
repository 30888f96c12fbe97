"""Store checks of flow-control queues whose holders are whole runs (a run
waiting for admission before its body runs, `WHOLE_RUN`): the record that
says a run holds its slot, releases by the run itself, and runs that ended."""

from __future__ import annotations

from ..._base._records import QueueDepth
from ..._stores._base import Store, WriteConflict
from ..._stores._ops import (
    QUEUE_SLOT,
    WHOLE_RUN,
    AdmitToQueue,
    ReleaseQueueSlot,
    UpdateRun,
    queue_slot_record,
)
from ._store_support import OpenStore, StoreFactory, fresh_store, make_run, raises


def ask(run_id: str, *, limit: int = 1, at: float = 0.0) -> AdmitToQueue:
    return AdmitToQueue("q", run_id, WHOLE_RUN, 0, limit, at)


def give_back(run_id: str, *, limit: int = 1) -> ReleaseQueueSlot:
    return ReleaseQueueSlot("q", run_id, WHOLE_RUN, limit)


async def holding(store: Store, *run_ids: str) -> list[bool]:
    """Whether each run has the record of a slot held."""
    found = []
    for run_id in run_ids:
        records = [r for r in await store.get_records(run_id) if r.kind == QUEUE_SLOT]
        assert records in ([], [queue_slot_record(run_id, "q")]), records
        found.append(bool(records))
    return found


async def check_a_whole_run_holds_its_slot_in_a_record(
    factory: StoreFactory | OpenStore,
) -> None:
    """A run given a slot as a whole run has a `QUEUE_SLOT` record, in the
    write that gives it (an `AdmitToQueue`, or a release that lets it in),
    read with its records; the release of its slot deletes it, whatever
    the run's status (the run gives it back itself)."""
    async with fresh_store(factory) as store:
        for run_id in ("a", "b", "c"):
            await store.create_run(make_run(run_id, status="suspended"))
        assert await store.apply([ask("a"), ask("b", at=1.0), ask("c", at=2.0)]) == [
            True,
            False,
            False,
        ]
        assert await holding(store, "a", "b", "c") == [True, False, False]
        # Asking again changes nothing.
        assert await store.apply([ask("a"), ask("b", at=5.0)]) == [True, False]
        assert await holding(store, "a", "b") == [True, False]
        state = await store.begin_turn("a", "e", 10.0, 0.0)
        assert state is not None
        assert [r.kind for r in state.records] == [QUEUE_SLOT]

        # Given back by "a" while it is still suspended: "b" is let in.
        assert await store.apply([give_back("a")]) == [[("b", WHOLE_RUN)]]
        assert await holding(store, "a", "b", "c") == [False, True, False]
        assert await store.apply([give_back("a")]) == [[]]
        assert await store.queue_depths() == [QueueDepth(queue="q", admitted=1, waiting=1)]


async def check_a_run_that_ended_needs_no_slot(factory: StoreFactory | OpenStore) -> None:
    """A whole run whose run has ended (or is gone) takes no slot when it
    asks and is passed by when a release reaches it in line."""
    async with fresh_store(factory) as store:
        for run_id in ("holder", "ended", "next"):
            await store.create_run(make_run(run_id, status="suspended"))
        await store.create_run(make_run("done", status="completed"))
        results = await store.apply(
            [ask("holder"), ask("ended", at=1.0), ask("next", at=2.0), ask("done", at=3.0)]
        )
        assert results == [True, False, False, False]
        assert await holding(store, "done") == [False]
        assert await store.queue_depths() == [QueueDepth(queue="q", admitted=1, waiting=2)]
        assert await store.apply([ask("gone")]) == [False]

        await store.apply([UpdateRun("ended", {"status": "cancelled"})])
        assert await store.apply([give_back("holder")]) == [[("next", WHOLE_RUN)]]
        assert await holding(store, "ended", "next") == [False, True]
        assert await store.queue_depths() == [QueueDepth(queue="q", admitted=1, waiting=0)]


async def check_whole_run_slots_roll_back_with_their_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """The record of a slot given or freed in a batch that fails is as it
    was before the batch."""
    async with fresh_store(factory) as store:
        for run_id in ("a", "b"):
            await store.create_run(make_run(run_id, status="suspended"))
        assert await store.apply([ask("a"), ask("b", at=1.0)]) == [True, False]
        with raises(WriteConflict):
            await store.apply(
                [give_back("a"), UpdateRun("a", {}, expect_status=frozenset({"running"}))]
            )
        assert await holding(store, "a", "b") == [True, False]


WHOLE_RUN_CHECKS = (
    check_a_whole_run_holds_its_slot_in_a_record,
    check_a_run_that_ended_needs_no_slot,
    check_whole_run_slots_roll_back_with_their_batch,
)
