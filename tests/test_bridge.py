"""The Trio-asyncio bridge of the broker adapter SDK (`trio_durable.brokers`), in both modes."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from trio_durable import InvalidURLError
from trio_durable.brokers import (
    DEFAULT_BRIDGE,
    Bridge,
    BridgeMode,
    Inbox,
    OwnedTasks,
    bridge_mode,
    open_bridge,
)

MODES: list[BridgeMode] = ["thread", "trio-asyncio"]


@pytest.fixture(params=MODES)
async def bridge(request: pytest.FixtureRequest) -> AsyncIterator[Bridge]:
    async with open_bridge(request.param) as opened:
        yield opened


async def test_run_returns_what_the_coroutine_returns(bridge: Bridge) -> None:
    async def add() -> int:
        await asyncio.sleep(0)
        return 1 + 2

    assert await bridge.run(add) == 3


async def test_run_raises_what_the_coroutine_raises(bridge: Bridge) -> None:
    class Boom(Exception):
        pass

    async def fail() -> None:
        await asyncio.sleep(0)
        raise Boom("asyncio side")

    with pytest.raises(Boom, match="asyncio side"):
        await bridge.run(fail)


async def test_the_coroutine_runs_on_an_asyncio_loop(bridge: Bridge) -> None:
    async def where() -> tuple[bool, int]:
        return asyncio.get_running_loop() is not None, threading.get_ident()

    running, ident = await bridge.run(where)
    assert running
    # Thread mode runs the client library off the Trio thread.
    assert (ident != threading.get_ident()) == (bridge.mode == "thread")


async def test_cancelling_the_caller_cancels_the_coroutine_first(bridge: Bridge) -> None:
    started = trio.Event()
    ended: list[str] = []
    token = trio.lowlevel.current_trio_token()

    async def forever() -> None:
        token.run_sync_soon(started.set)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bridge.run, forever)
            await started.wait()
            scope.cancel()
    # The call returned only once the asyncio side had stopped.
    assert ended == ["cancelled"]


async def test_inbox_hands_over_in_batches_in_order(bridge: Bridge) -> None:
    inbox: Inbox[int] = bridge.inbox()

    async def produce() -> None:
        for i in range(10):
            inbox.put(i)

    await bridge.run(produce)
    assert await inbox.get_batch(4) == [0, 1, 2, 3]
    assert await inbox.get_batch(100) == [4, 5, 6, 7, 8, 9]


async def test_inbox_wakes_a_waiting_receiver(bridge: Bridge) -> None:
    inbox: Inbox[str] = bridge.inbox()
    got: list[list[str]] = []

    async def receive() -> None:
        got.append(await inbox.get_batch(10))

    async def produce() -> None:
        inbox.put("a")
        inbox.put("b")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        await bridge.run(produce)
    # The first put wakes the receiver. In thread mode the producer runs on
    # its own thread, so the receiver may take its batch before the second
    # put: a batch of "a" alone is as right as one of both.
    [batch] = got
    assert batch in (["a"], ["a", "b"])
    assert batch + inbox.drain_nowait() == ["a", "b"]
    if bridge.mode == "trio-asyncio":
        # One thread: both puts are made before the receiver runs.
        assert batch == ["a", "b"]


async def test_a_cancelled_get_batch_loses_nothing(bridge: Bridge) -> None:
    inbox: Inbox[int] = bridge.inbox()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(inbox.get_batch, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()

    async def produce() -> None:
        inbox.put(7)

    await bridge.run(produce)
    assert inbox.drain_nowait() == [7]
    assert inbox.drain_nowait() == []


async def test_inbox_failure_comes_after_the_items(bridge: Bridge) -> None:
    inbox: Inbox[int] = bridge.inbox()

    class Gone(Exception):
        pass

    async def produce() -> None:
        inbox.put(1)
        inbox.fail(Gone("connection closed"))

    await bridge.run(produce)
    assert await inbox.get_batch(10) == [1]
    with pytest.raises(Gone):
        await inbox.get_batch(10)


@pytest.mark.parametrize("mode", MODES)
async def test_a_closed_bridge_refuses_calls(mode: BridgeMode) -> None:
    async with open_bridge(mode) as bridge:
        pass

    async def nothing() -> None:
        pass

    with pytest.raises(trio.ClosedResourceError):
        await bridge.run(nothing)


async def test_closing_the_thread_bridge_ends_its_tasks_and_thread() -> None:
    threads = threading.active_count()
    stopped: list[str] = []
    started = trio.Event()
    token = trio.lowlevel.current_trio_token()

    async def spawn() -> None:
        async def background() -> None:
            token.run_sync_soon(started.set)
            try:
                await asyncio.sleep(3600)
            finally:
                stopped.append("background")

        asyncio.get_running_loop().create_task(background())

    async with open_bridge("thread") as bridge:
        await bridge.run(spawn)
        await started.wait()
    assert stopped == ["background"]
    assert threading.active_count() <= threads


async def test_a_cancelled_block_still_joins_the_thread() -> None:
    with trio.CancelScope() as scope:
        async with open_bridge("thread"):
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught


@pytest.mark.parametrize(
    ("url", "mode"),
    [
        ("amqp://localhost", DEFAULT_BRIDGE),
        ("amqp://localhost/?bridge=thread", "thread"),
        ("nats://localhost:4222?bridge=trio-asyncio", "trio-asyncio"),
    ],
)
def test_bridge_mode_from_the_url(url: str, mode: BridgeMode) -> None:
    assert bridge_mode(url) == mode


@pytest.mark.parametrize(
    "url",
    ["amqp://h/?bridge=", "amqp://h/?bridge=asyncio", "amqp://h/?bridge=thread&bridge=thread"],
)
def test_bad_bridge_modes_are_refused(url: str) -> None:
    with pytest.raises(InvalidURLError, match="bridge="):
        bridge_mode(url)


def test_thread_is_the_default() -> None:
    assert DEFAULT_BRIDGE == "thread"


@pytest.mark.parametrize("mode", MODES)
async def test_what_the_block_raises_comes_out_as_itself(mode: BridgeMode) -> None:
    class Refused(Exception):
        pass

    with pytest.raises(Refused, match="no broker there"):
        async with open_bridge(mode):
            raise Refused("no broker there")


async def test_closing_the_thread_bridge_joins_its_executor() -> None:
    names: list[str] = []

    async def blocking_call() -> None:
        def where() -> None:
            names.append(threading.current_thread().name)

        await asyncio.get_running_loop().run_in_executor(None, where)

    async with open_bridge("thread") as bridge:
        await bridge.run(blocking_call)
    assert len(names) == 1
    assert names[0] not in {thread.name for thread in threading.enumerate()}


async def test_both_sides_read_trios_clock(bridge: Bridge) -> None:
    async def stamp() -> float:
        return bridge.now()

    before = trio.current_time()
    stamped = await bridge.run(stamp)
    assert before <= stamped <= trio.current_time()
    assert bridge.now() <= trio.current_time()


# -- OwnedTasks: the asyncio tasks an adapter starts ------------------------------------


async def test_owned_tasks_are_held_until_they_end(bridge: Bridge) -> None:
    tasks = OwnedTasks()
    release: list[asyncio.Event] = []

    async def start() -> tuple[int, bool]:
        release.append(asyncio.Event())

        async def wait() -> str:
            await release[0].wait()
            return "done"

        task = tasks.start(wait(), name="trio_durable test wait")
        ref = weakref.ref(task)
        del task
        # Nothing but the set holds it: asyncio itself keeps a weak reference.
        gc.collect()
        alive = ref()
        return len(tasks), alive is not None and not alive.done()

    assert await bridge.run(start) == (1, True)

    async def finish() -> int:
        release[0].set()
        for _ in range(3):
            await asyncio.sleep(0)
        return len(tasks)

    assert await bridge.run(finish) == 0


async def test_closing_owned_tasks_cancels_and_awaits_them(bridge: Bridge) -> None:
    tasks = OwnedTasks()
    ended: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            # Cleanup that takes a turn of the loop: aclose waits for it.
            await asyncio.sleep(0)
            ended.append("cleaned up")

    async def scenario() -> tuple[int, list[str]]:
        started = [tasks.start(forever(), name=f"trio_durable test {i}") for i in range(3)]
        await asyncio.sleep(0)
        await tasks.aclose()
        pending = [t for t in asyncio.all_tasks() if t.get_name().startswith("trio_durable test")]
        assert all(t.cancelled() for t in started)
        return len(pending), list(ended)

    assert await bridge.run(scenario) == (0, ["cleaned up"] * 3)

    async def start_after_close() -> None:
        tasks.start(forever(), name="trio_durable test late")

    with pytest.raises(trio.ClosedResourceError, match="closing"):
        await bridge.run(start_after_close)


async def test_a_failed_owned_task_is_logged(
    bridge: Bridge, caplog: pytest.LogCaptureFixture
) -> None:
    tasks = OwnedTasks()

    async def boom() -> None:
        raise RuntimeError("boom")

    async def scenario() -> int:
        tasks.start(boom(), name="trio_durable test boom")
        for _ in range(3):
            await asyncio.sleep(0)
        return len(tasks)

    assert await bridge.run(scenario) == 0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "trio_durable test boom failed: RuntimeError('boom')"
    ]


async def test_statistics_count_each_crossing(bridge: Bridge) -> None:
    async def nothing() -> None:
        pass

    before = bridge.statistics()
    for _ in range(3):
        await bridge.run(nothing)
    assert bridge.statistics().calls == before.calls + 3


async def test_puts_before_the_receiver_runs_share_one_wakeup(bridge: Bridge) -> None:
    inbox: Inbox[int] = bridge.inbox()
    got: list[list[int]] = []
    go, done = threading.Event(), threading.Event()

    async def receive() -> None:
        got.append(await inbox.get_batch(1000))

    async def produce() -> None:
        # In thread mode this runs on the bridge's thread: it puts once the
        # Trio thread is held (below), so every put comes before the
        # receiver can run, which is the case under test.
        if bridge.mode == "thread":
            await asyncio.get_running_loop().run_in_executor(None, go.wait)
        for i in range(500):
            inbox.put(i)
        done.set()

    before = bridge.statistics()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        if bridge.mode == "thread":
            nursery.start_soon(bridge.run, produce)
            await trio.testing.wait_all_tasks_blocked()
            # Hold the Trio thread (no task runs) while the other thread
            # puts: the first put schedules the one wake-up, which runs
            # after all 500.
            go.set()
            assert done.wait(timeout=60)
        else:
            await bridge.run(produce)
    after = bridge.statistics()
    assert got == [list(range(500))]
    # One crossing there (the run), one wake-up back for 500 items.
    assert (after.calls - before.calls, after.wakeups - before.wakeups) == (1, 1)
    assert after.handed_over - before.handed_over == 500
