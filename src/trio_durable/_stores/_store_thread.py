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

The thread belongs to the store that opened it: `StoreThread.aclose`, from
the store's own close, lets the calls already queued run, then stops the
thread and joins it, so no thread outlives the store.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
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
    order they were made (see the module).

    Make it inside the Trio run whose tasks call it.
    """

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call[Any] | None] = queue.SimpleQueue()
        self._token = trio.lowlevel.current_trio_token()
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (call := self._calls.get()) is not _STOP:
            try:
                call.value = call.fn()
            except BaseException as exc:  # handed to the caller, as to_thread does
                call.error = exc
            try:
                self._token.run_sync_soon(trio.lowlevel.reschedule, call.task)
            except trio.RunFinishedError:
                return  # the run is over: nobody waits for this call

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` in the thread and return what it returns (or raise
        what it raises). A cancellation delivered while it runs waits for
        it to end, as with `trio.to_thread.run_sync`'s default: a store's
        call is never abandoned half-way.

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

    async def aclose(self) -> None:
        """Let the calls already made run, then stop the thread and join it."""
        if self._closed:
            return
        self._closed = True
        self._calls.put(_STOP)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(self._thread.join)
