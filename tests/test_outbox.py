"""The adapter SDK's `Outbox`: concurrent dispatches published in batches,
each told how its own messages went."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_durable.brokers import Outbox, PayloadTooLarge


class Recorder:
    """A publish that records its batches and fails the items it is told to."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.failing: dict[str, BaseException] = {}

    async def __call__(self, items: list[str]) -> list[BaseException | None]:
        self.batches.append(items)
        await trio.sleep(1)
        return [self.failing.get(item) for item in items]


async def test_dispatches_queued_together_go_in_one_batch(
    autojump_clock: trio.testing.MockClock,
) -> None:
    publish = Recorder()
    boom, too_big = RuntimeError("boom"), PayloadTooLarge("too big", 2_000_000, 1_000_000)
    publish.failing = {"b1": boom, "b2": too_big, "c0": boom}
    outbox: Outbox[str] = Outbox(publish, first=(PayloadTooLarge,))
    jobs = {}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(outbox.run)

        async def dispatch(name: str, items: list[str]) -> None:
            jobs[name] = await outbox.publish(items)

        async with trio.open_nursery() as dispatches:
            dispatches.start_soon(dispatch, "a", ["a0"])
            await trio.testing.wait_all_tasks_blocked()
            # Queued while the first batch is out: one batch for both.
            dispatches.start_soon(dispatch, "b", ["b0", "b1", "b2"])
            dispatches.start_soon(dispatch, "c", ["c0"])
        nursery.cancel_scope.cancel()
    # (b and c in either order: they were queued at the same instant.)
    assert [sorted(batch) for batch in publish.batches] == [["a0"], ["b0", "b1", "b2", "c0"]]
    assert (jobs["a"].error, jobs["a"].failed_at) == (None, None)
    # A refused size before any other failure: the caller acts on it.
    assert (jobs["b"].error, jobs["b"].failed_at) == (too_big, 2)
    assert (jobs["c"].error, jobs["c"].failed_at) == (boom, 0)


async def test_dispatches_left_when_the_outbox_stops_fail_as_closed() -> None:
    async def publish(items: list[str]) -> list[BaseException | None]:
        raise AssertionError("the outbox stopped before publishing")

    outbox: Outbox[str] = Outbox(publish)
    results = []

    async def dispatch() -> None:
        results.append(await outbox.publish(["x"]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatch)
        await trio.testing.wait_all_tasks_blocked()
        with trio.CancelScope() as scope:
            scope.cancel()
            await outbox.run()
    [job] = results
    assert isinstance(job.error, trio.ClosedResourceError)
    assert job.failed_at is None


async def test_a_publish_that_raises_stops_the_outbox_and_fails_its_batch() -> None:
    async def publish(items: list[str]) -> list[BaseException | None]:
        raise ValueError("a bug in the adapter")

    outbox: Outbox[str] = Outbox(publish)
    results = []

    async def dispatch() -> None:
        results.append(await outbox.publish(["x"]))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(dispatch)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(ValueError, match="a bug"):
            await outbox.run()
    [job] = results
    assert isinstance(job.error, trio.ClosedResourceError)
