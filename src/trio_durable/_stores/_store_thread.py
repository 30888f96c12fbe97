"""`StoreThread`: one thread of a store's own for its blocking calls.

A SQLite store's calls block, and its one connection takes one call at a
time. `trio.to_thread.run_sync` hands each call to a cached worker thread:
it takes a `trio.CapacityLimiter` token, copies the context, finds or starts
a thread and reports back through the Trio token, about 48 µs of CPU per
call on the machines of docs/performance.md. Most of that is bookkeeping a
store does not need: its calls go to one thread, in the order they come, and
none is ever abandoned. `StoreThread.run` puts the call on the thread's
queue and waits for it to hand the result back (about 29 µs), one wake each
way.

The thread lives in a nursery: `open_store_thread` starts its loop as one
`trio.to_thread.run_sync` call of a task it owns, and on exit (or
`StoreThread.close`, from the store's own close) lets the calls already
queued run, stops the loop and waits for that call to return, so no thread
outlives the store.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final, Generic, TypeVar, cast, final

import trio

T = TypeVar("T")

_STOP: Final = None


@final
class _Call(Generic[T]):
    """One call on its way to the thread and back."""

    __slots__ = ("error", "fn", "task", "value")

    def __init__(self, fn: Callable[[], T], task: trio.lowlevel.Task) -> None:
        self.fn = fn
        self.task = task
        self.value: T | None = None
        self.error: BaseException | None = None


@final
class StoreThread:
    """A thread that runs a store's blocking calls one at a time, in the
    order they were made (see the module). Open it with
    `open_store_thread`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call[Any] | None] = queue.SimpleQueue()
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False

    def _serve(self) -> None:
        thread = threading.current_thread()
        was, thread.name = thread.name, self.name
        try:
            while (call := self._calls.get()) is not _STOP:
                try:
                    call.value = call.fn()
                except BaseException as exc:  # handed to the caller, as to_thread does
                    call.error = exc
                try:
                    self._token.run_sync_soon(trio.lowlevel.reschedule, call.task)
                except trio.RunFinishedError:
                    return  # the run is over: nobody waits for this call
        finally:
            thread.name = was

    # Protected from KeyboardInterrupt: raised between queueing the call
    # and suspending (Trio raises it in whatever code runs when SIGINT
    # comes), it would leave the thread to wake this task later, wherever
    # it then waits, for a call it no longer waits for (Trio's internal
    # error). Protected, it is delivered at the caller's next checkpoint,
    # once the call is back, as a cancellation is.
    @trio.lowlevel.enable_ki_protection
    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` in the thread and return what it returns (or raise
        what it raises). A cancellation or a KeyboardInterrupt delivered
        while it runs waits for it to end, as with
        `trio.to_thread.run_sync`'s default: a store's call is never
        abandoned half-way.

        Raises:
          RuntimeError: The thread was closed.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise RuntimeError("the store's thread is closed")
        call = _Call(fn, trio.lowlevel.current_task())
        self._calls.put(call)
        await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        if call.error is not None:
            raise call.error
        return cast(T, call.value)  # set by the thread

    def close(self) -> None:
        """Take no more calls; the thread stops once those made have run."""
        if not self._closed:
            self._closed = True
            self._calls.put(_STOP)


@asynccontextmanager
async def open_store_thread(name: str) -> AsyncIterator[StoreThread]:
    """A `StoreThread` named ``name``, its loop run by a task of a nursery
    of its own; on exit it is closed and its loop has returned."""
    thread = StoreThread(name)
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(trio.to_thread.run_sync, thread._serve))
        try:
            yield thread
        except BaseException as exc:
            # Raised again past the nursery, as the caller raised it (not
            # in an exception group: the loop itself raises nothing).
            raised = exc
        finally:
            thread.close()
    if raised is not None:
        raise raised
