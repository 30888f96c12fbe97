"""The join barrier (`_barrier.join_barrier`) on its own: which runs a write
that changed checkpoints wakes, in which order, and what a count it cannot
make does. The engine-level behaviour (a parent resumes once per wave) is in
test_fans.py and test_step_fans.py."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

import trio_durable as td
from trio_durable._base._records import Checkpoint, CheckpointStatus, FanMode, Run
from trio_durable._kernel._barrier import join_barrier
from trio_durable._stores._ops import PutCheckpoint


def member(
    run_id: str, seq: int, status: CheckpointStatus, mode: FanMode = "wait_all", size: int = 3
) -> Checkpoint:
    return Checkpoint(
        run_id=run_id,
        seq=seq,
        name="kid",
        kind="child",
        status=status,
        parallel_group=1,
        parallel_size=size,
        parallel_mode=mode,
    )


async def stored(*checkpoints: Checkpoint) -> td.MemoryStore:
    store = td.MemoryStore()
    for run_id in dict.fromkeys(cp.run_id for cp in checkpoints):
        await store.create_run(Run(id=run_id, workflow="w", version="1", input="[]"))
    await store.apply([PutCheckpoint(cp) for cp in checkpoints])
    return store


async def test_a_checkpoint_outside_a_fan_wakes_its_run() -> None:
    lone = Checkpoint(run_id="a", seq=1, name="s", kind="remote", status="completed")
    store = await stored(lone)
    assert await join_barrier(store, [lone]) == ["a"]


async def test_a_fan_member_wakes_its_run_only_once_none_is_pending() -> None:
    first, second = member("p", 1, "completed"), member("p", 2, "completed")
    store = await stored(first, second, member("p", 3, "pending"))
    assert await join_barrier(store, [first, second]) == []
    last = member("p", 3, "completed")
    await store.apply([PutCheckpoint(last)])
    assert await join_barrier(store, [last]) == ["p"]


async def test_a_failure_in_a_fail_fast_fan_wakes_at_once() -> None:
    failed = member("p", 1, "failed", mode="fail_fast")
    store = await stored(failed, member("p", 2, "pending", mode="fail_fast"))
    assert await join_barrier(store, [failed]) == ["p"]
    # Not in a wait_all fan: there the parent waits for every member.
    waiting = member("q", 1, "failed")
    store = await stored(waiting, member("q", 2, "pending"))
    assert await join_barrier(store, [waiting]) == []


async def test_a_rescheduled_attempt_wakes_its_run_even_in_a_fan() -> None:
    # A retryable failure left the member pending with its next attempt's
    # due time: the run must take that time up.
    rescheduled = member("p", 1, "pending")
    store = await stored(rescheduled, member("p", 2, "pending"))
    assert await join_barrier(store, [rescheduled]) == ["p"]


async def test_each_run_once_in_order_fans_after_the_rest() -> None:
    fan_done = member("f", 1, "completed", size=1)
    lone_b = Checkpoint(run_id="b", seq=1, name="s", kind="remote", status="completed")
    lone_a = Checkpoint(run_id="a", seq=1, name="s", kind="remote", status="failed")
    again_b = attrs.evolve(lone_b, seq=2)
    store = await stored(fan_done, lone_b, lone_a, again_b)
    assert await join_barrier(store, [fan_done, lone_b, lone_a, again_b]) == ["b", "a", "f"]


class _Unreadable:
    """A store whose counts fail."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner

    async def count_checkpoints(self, *args: Any, **kwargs: Any) -> int:
        raise td.StoreError("the database is away")


async def test_a_count_that_fails_wakes_or_raises_as_asked() -> None:
    done = member("p", 1, "completed")
    store: Any = _Unreadable(await stored(done, member("p", 2, "pending")))
    assert await join_barrier(store, [done], wake_if_uncounted=True) == ["p"]
    with pytest.raises(td.StoreError):
        await join_barrier(store, [done])
