"""Store checks of flow-control queues: admission, the line and releases."""

from __future__ import annotations

from typing import Any

from ..._base._records import Mark, QueueDepth
from ..._stores._base import Store, WriteConflict
from ..._stores._ops import AdmitToQueue, ReleaseQueueSlot, SettleCheckpoint, UpdateRun
from ._store_support import (
    OpenStore,
    StoreFactory,
    fresh_store,
    make_checkpoint,
    make_run,
    raises,
)

# -- flow-control queues ------------------------------------------------------------

QUEUED = Mark(code="queued", message="waiting for a slot of queue 'q'")


async def queued_steps(store: Store, *keys: tuple[str, int]) -> None:
    """Suspended runs with a pending remote step carrying the queued mark at
    each ``(run_id, seq)``."""
    for run_id in dict.fromkeys(run_id for run_id, _ in keys):
        await store.create_run(make_run(run_id, status="suspended"))
    for run_id, seq in keys:
        await store.save_checkpoint(make_checkpoint(run_id, seq, kind="remote", mark=QUEUED))


async def marks(store: Store, *keys: tuple[str, int]) -> list[str | None]:
    """The code of each checkpoint's mark (``"queued"`` while it waits)."""
    codes: list[str | None] = []
    for run_id, seq in keys:
        [cp] = await store.get_checkpoints(run_id, seq, seq)
        codes.append(None if cp.mark is None else cp.mark.code)
    return codes


def admit(run_id: str, seq: int = 1, *, priority: int = 0, limit: int = 1, at: float = 0.0) -> Any:
    return AdmitToQueue("q", run_id, seq, priority, limit, at)


def release(run_id: str, seq: int = 1, *, limit: int = 1) -> Any:
    return ReleaseQueueSlot("q", run_id, seq, limit)


async def settle(store: Store, run_id: str, seq: int = 1) -> None:
    [settled] = await store.apply([SettleCheckpoint(run_id, seq, "completed", output='"ok"')])
    assert settled is not None


async def check_admission_respects_the_limit(factory: StoreFactory | OpenStore) -> None:
    """`AdmitToQueue` lets in at most ``limit`` steps per queue."""
    async with fresh_store(factory) as store:
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


async def check_asking_again_while_holding_or_waiting_changes_nothing(
    factory: StoreFactory | OpenStore,
) -> None:
    """Asking again for a slot, while holding it or waiting in line, changes nothing."""
    async with fresh_store(factory) as store:
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


async def check_admission_clears_only_the_queued_mark(factory: StoreFactory | OpenStore) -> None:
    """Admission clears a ``queued`` mark, and no other mark."""
    async with fresh_store(factory) as store:
        await store.create_run(make_run(status="suspended"))
        blocked = Mark(code="blocked", message="no worker offers gpu")
        await store.save_checkpoint(make_checkpoint(seq=1, kind="remote", mark=blocked))
        await store.save_checkpoint(make_checkpoint(seq=2, kind="remote", mark=QUEUED))
        await store.save_checkpoint(make_checkpoint(seq=3, kind="remote", mark=blocked))

        assert await store.apply([admit("r1", 1, limit=2), admit("r1", 2, limit=2)]) == [True, True]
        assert await store.apply([admit("r1", 3, limit=2)]) == [False]
        assert await marks(store, ("r1", 1), ("r1", 2), ("r1", 3)) == ["blocked", None, "blocked"]

        # Let in by a release, a waiter keeps a mark that is not "queued" too.
        await settle(store, "r1", 1)
        assert await store.apply([release("r1", 1, limit=2)]) == [[("r1", 3)]]
        assert await marks(store, ("r1", 3)) == ["blocked"]


async def check_a_waiter_let_in_is_due_at_once(factory: StoreFactory | OpenStore) -> None:
    """A waiter let in has its wake time cleared: it is due at once."""
    async with fresh_store(factory) as store:
        # A waiter's next look at the line is its checkpoint's wake time; let in,
        # it is due at once, so the wake of its run sends it without waiting.
        for run_id in ("a", "b", "c"):
            await store.create_run(make_run(run_id, status="suspended", wake_at=50.0))
            await store.save_checkpoint(
                make_checkpoint(run_id, 1, kind="remote", mark=QUEUED, wake_at=50.0)
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
        assert (b.mark, b.wake_at) == (None, None)
        assert c.mark == QUEUED
        assert c.wake_at == 50.0


async def check_waiters_are_let_in_by_priority_then_arrival(
    factory: StoreFactory | OpenStore,
) -> None:
    """Waiters are let in by priority, then by arrival."""
    async with fresh_store(factory) as store:
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


async def check_a_higher_priority_arrival_goes_ahead_of_earlier_waiters(
    factory: StoreFactory | OpenStore,
) -> None:
    """A waiter of higher priority goes ahead of earlier ones."""
    async with fresh_store(factory) as store:
        await queued_steps(store, ("holder", 1), ("early", 1), ("urgent", 1))
        assert await store.apply(
            [admit("holder"), admit("early", at=1.0), admit("urgent", priority=1, at=2.0)]
        ) == [True, False, False]
        await settle(store, "holder")
        assert await store.apply([release("holder")]) == [[("urgent", 1)]]
        assert await marks(store, ("early", 1), ("urgent", 1)) == ["queued", None]


async def check_release_needs_the_step_to_be_over(factory: StoreFactory | OpenStore) -> None:
    """A slot is released only once its step settled or its run ended."""
    async with fresh_store(factory) as store:
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


async def check_a_slot_is_released_exactly_once(factory: StoreFactory | OpenStore) -> None:
    """Of several releases of one slot, exactly one lets a waiter in."""
    async with fresh_store(factory) as store:
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


async def check_release_lets_waiters_in_while_slots_are_free(
    factory: StoreFactory | OpenStore,
) -> None:
    """A release lets waiters in while slots are free, by the releaser's limit."""
    async with fresh_store(factory) as store:
        keys = [(name, 1) for name in ("a", "b", "c", "d", "e")]
        await queued_steps(store, *keys)
        results = await store.apply(
            [admit(r, limit=2, at=float(i)) for i, (r, _) in enumerate(keys)]
        )
        assert results == [True, True, False, False, False]

        await settle(store, "a")
        # The limit is the releaser's: raised to 4, three slots are free.
        assert await store.apply([release("a", limit=4)]) == [[("c", 1), ("d", 1), ("e", 1)]]
        assert await marks(store, *keys) == [None] * 5


async def check_release_drops_waiters_that_no_longer_need_a_slot(
    factory: StoreFactory | OpenStore,
) -> None:
    """A release drops the waiters that no longer need a slot."""
    async with fresh_store(factory) as store:
        keys = [(name, 1) for name in ("holder", "settled", "ended", "next", "last")]
        await queued_steps(store, *keys)
        results = await store.apply([admit(r, at=float(i)) for i, (r, _) in enumerate(keys)])
        assert results == [True, False, False, False, False]
        await settle(store, "settled")
        await store.apply([UpdateRun("ended", {"status": "failed"})])
        await settle(store, "holder")

        assert await store.apply([release("holder")]) == [[("next", 1)]]
        assert await marks(store, ("ended", 1), ("next", 1), ("last", 1)) == [
            "queued",
            None,
            "queued",
        ]
        # The skipped ones left the line for good: even pending again (a retried
        # run), they are not let in ahead of "last".
        await store.save_checkpoint(make_checkpoint("settled", 1, kind="remote", mark=QUEUED))
        await store.apply([UpdateRun("ended", {"status": "suspended"})])
        await settle(store, "next")
        assert await store.apply([release("next")]) == [[("last", 1)]]
        await settle(store, "last")
        assert await store.apply([release("last")]) == [[]]


async def check_queue_operations_roll_back_with_their_batch(
    factory: StoreFactory | OpenStore,
) -> None:
    """Queue operations roll back with their batch."""
    async with fresh_store(factory) as store:
        keys = [(name, 1) for name in ("a", "b", "c", "d")]
        await queued_steps(store, *keys)
        assert await store.apply([admit("a"), admit("b", at=1.0)]) == [True, False]
        await settle(store, "a")
        checkpoints = [await store.get_checkpoints(r) for r in "abcd"]

        with raises(WriteConflict):
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


async def check_queue_depths_count_holders_and_waiters(factory: StoreFactory | OpenStore) -> None:
    """`Store.queue_depths` counts each queue's slot holders and waiters, by
    queue name, leaving out queues nobody holds or waits for."""
    async with fresh_store(factory) as store:
        assert await store.queue_depths() == []
        keys = [(name, 1) for name in ("a", "b", "c", "d", "e")]
        await queued_steps(store, *keys)
        results = await store.apply(
            [admit(r, limit=2, at=float(i)) for i, (r, _) in enumerate(keys[:4])]
            + [AdmitToQueue("other", "e", 1, 0, 1, 9.0)]
        )
        assert results == [True, True, False, False, True]
        assert await store.queue_depths() == [
            QueueDepth(queue="other", admitted=1, waiting=0),
            QueueDepth(queue="q", admitted=2, waiting=2),
        ]

        # A release lets the first waiter in; the queue empties as steps end.
        await settle(store, "a")
        assert await store.apply([release("a", limit=2)]) == [[("c", 1)]]
        assert await store.queue_depths() == [
            QueueDepth(queue="other", admitted=1, waiting=0),
            QueueDepth(queue="q", admitted=2, waiting=1),
        ]
        for run_id in ("b", "c", "d"):
            await settle(store, run_id)
            await store.apply([release(run_id, limit=2)])
        await settle(store, "e")
        await store.apply([ReleaseQueueSlot("other", "e", 1, 1)])
        assert await store.queue_depths() == []


async def check_queue_position_is_the_place_a_release_lets_a_waiter_in(
    factory: StoreFactory | OpenStore,
) -> None:
    """`Store.queue_position` is a waiter's place in its queue's line, in the
    order releases let waiters in (priority, then arrival; two that came at
    the same time, in the order they asked); None for a step that holds a
    slot or waits in no line of that queue."""
    async with fresh_store(factory) as store:
        names = ("holder", "low1", "high1", "mid", "high2", "low2", "low3")
        keys = [(name, 1) for name in names]
        await queued_steps(store, *keys)
        priorities = {"high1": 9, "mid": 4, "high2": 9}
        # low2 and low3 come at the same time: low2 asked first.
        times = {"holder": 0.0, "low1": 1.0, "high1": 2.0, "mid": 3.0, "high2": 4.0}
        await store.apply(
            [admit(r, priority=priorities.get(r, 0), at=times.get(r, 5.0)) for r, _ in keys]
        )
        await store.apply([AdmitToQueue("other", "elsewhere", 1, 0, 0, 0.0)])

        async def line() -> list[str]:
            places = {r: await store.queue_position("q", r, 1) for r in names}
            assert places["holder"] is None
            waiting = sorted((p, r) for r, p in places.items() if p is not None)
            assert [p for p, _ in waiting] == list(range(1, len(waiting) + 1))
            return [r for _, r in waiting]

        expected = ["high1", "high2", "mid", "low1", "low2", "low3"]
        assert await line() == expected
        assert await store.queue_position("q", "high1", 2) is None
        assert await store.queue_position("other", "high1", 1) is None
        assert await store.queue_position("other", "elsewhere", 1) == 1
        # Each release lets the first in: the rest move up.
        current = "holder"
        while expected:
            await settle(store, current)
            [[(current, _)]] = await store.apply([release(current)])
            assert current == expected.pop(0)
            assert await store.queue_position("q", current, 1) is None
            assert await line() == expected


QUEUES_CHECKS = (
    check_admission_respects_the_limit,
    check_asking_again_while_holding_or_waiting_changes_nothing,
    check_admission_clears_only_the_queued_mark,
    check_a_waiter_let_in_is_due_at_once,
    check_waiters_are_let_in_by_priority_then_arrival,
    check_a_higher_priority_arrival_goes_ahead_of_earlier_waiters,
    check_release_needs_the_step_to_be_over,
    check_a_slot_is_released_exactly_once,
    check_release_lets_waiters_in_while_slots_are_free,
    check_release_drops_waiters_that_no_longer_need_a_slot,
    check_queue_operations_roll_back_with_their_batch,
    check_queue_depths_count_holders_and_waiters,
    check_queue_position_is_the_place_a_release_lets_a_waiter_in,
)
