"""`StoreThread`: a store's own thread runs its blocking calls one at a time,
in the order they were made, hands back results and exceptions, never
abandons a call to a cancellation, and is joined when closed."""

from __future__ import annotations

import signal
import threading

import pytest
import trio
import trio.testing

from trio_durable._stores._store_thread import open_store_thread


async def test_calls_run_in_the_thread_in_order_and_hand_back_what_they_return() -> None:
    async with open_store_thread("test") as thread:
        seen: list[tuple[int, str]] = []
        release = threading.Event()

        def record(i: int) -> int:
            if i == 0:
                release.wait()
            seen.append((i, threading.current_thread().name))
            return i * i

        results: dict[int, int] = {}

        async def call(i: int) -> None:
            results[i] = await thread.run(lambda: record(i))

        async with trio.open_nursery() as nursery:
            try:
                for i in range(5):
                    nursery.start_soon(call, i)
                    await trio.testing.wait_all_tasks_blocked()
            finally:
                release.set()
        assert seen == [(i, "test") for i in range(5)]
        assert results == {i: i * i for i in range(5)}


async def test_an_exception_reaches_the_caller() -> None:
    async with open_store_thread("test") as thread:

        def fail() -> None:
            raise ValueError("from the thread")

        with pytest.raises(ValueError, match="from the thread"):
            await thread.run(fail)
        # The thread goes on serving.
        assert await thread.run(lambda: 7) == 7


async def test_a_cancellation_waits_for_the_call_it_interrupts() -> None:
    async with open_store_thread("test") as thread:
        release = threading.Event()
        done: list[str] = []

        def slow() -> None:
            release.wait()
            done.append("ran")

        scope = trio.CancelScope()

        async def call() -> None:
            with scope:
                await thread.run(slow)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            try:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.testing.wait_all_tasks_blocked()
                # Still waiting: the call is under way and is not abandoned.
                assert done == []
            finally:
                release.set()
        assert done == ["ran"]
        # A call made under a cancelled scope is not made at all.
        with trio.CancelScope() as scope:
            scope.cancel()
            await thread.run(lambda: done.append("never"))
        assert done == ["ran"]


async def test_closing_joins_the_thread_after_the_calls_made_before() -> None:
    async with open_store_thread("test-close") as thread:
        # Once a call ran, its loop is serving, on a thread of its name.
        assert await thread.run(lambda: threading.current_thread().name) == "test-close"
    # On exit the loop returned: no thread carries its name any more.
    assert not any(t.name == "test-close" for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="closed"):
        await thread.run(lambda: None)
    thread.close()  # closing twice is harmless


def test_ctrl_c_right_after_a_call_is_queued_waits_for_the_call() -> None:
    # SIGINT comes when the call is on the thread's queue but its caller
    # has not yet suspended. Raised there, the KeyboardInterrupt would leave
    # the call to wake its caller later, wherever it then waits (Trio's
    # internal error, "assert task._next_send_fn is None", once in eight
    # interrupted bulk retries). The caller gets it once the call is back.
    done = threading.Event()
    after: list[str] = []

    async def main() -> None:
        async with open_store_thread("test") as thread:
            calls = thread._calls

            class Interrupting:
                """The thread's queue, with SIGINT right after a put."""

                get = calls.get

                def put(self, call: object) -> None:
                    calls.put(call)  # type: ignore[arg-type]
                    signal.raise_signal(signal.SIGINT)

            def slow() -> str:
                threading.Event().wait(0.05)
                done.set()
                return "written"

            thread._calls = Interrupting()  # type: ignore[assignment]
            try:
                after.append(await thread.run(slow))
                # Delivered at the next checkpoint, the call having returned.
                await trio.lowlevel.checkpoint()
            finally:
                thread._calls = calls

    with pytest.raises(KeyboardInterrupt):
        trio.run(main)
    assert done.is_set()
    assert after == ["written"]
