"""The bridge between Trio and an asyncio client library.

The RabbitMQ and NATS clients (aio-pika, nats-py) are asyncio libraries. A
broker adapter runs them behind a `Bridge`, crossing between the two worlds
once per batch (a batch of publishes, a batch of acks, a batch of deliveries
in), never once per message: a crossing costs tens of microseconds, and a
broker round trip per message would cost several.

Two modes, chosen by a broker URL's ``?bridge=`` option (`bridge_mode`):

- ``"thread"`` (the default): a dedicated asyncio event loop on a thread of
  its own, started when the bridge opens and stopped and joined when it
  closes. The client library runs at native asyncio speed, in parallel with
  the Trio thread; each crossing is a thread hand-off.
- ``"trio-asyncio"``: trio-asyncio's loop inside the Trio thread. No second
  thread, but trio-asyncio runs every asyncio callback through a Trio
  scheduler step, so the client library costs two to four times the CPU.

Either way no asyncio task outlives the bridge: closing it cancels what is
left on its loop and waits for that to end. Before that, an adapter holds
every task it starts on the loop in an `OwnedTasks` of its own, which it
closes (cancels and awaits) when it closes: asyncio keeps only weak
references to tasks, so a task nobody holds may be garbage-collected
mid-flight, and a task nobody awaits can outlive the connection it uses.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any, Final, Generic, Literal, TypeVar, final, get_args
from urllib.parse import parse_qs, urlsplit

import attrs
import trio

from .._base._exceptions import InvalidURLError

logger = logging.getLogger("trio_durable")

T = TypeVar("T")

BridgeMode = Literal["thread", "trio-asyncio"]

DEFAULT_BRIDGE: Final[BridgeMode] = "thread"
"""The mode a broker URL without ``?bridge=`` gets: measured fastest here."""


def bridge_mode(url: str) -> BridgeMode:
    """The ``?bridge=`` option of a broker URL: ``thread`` (the default) or
    ``trio-asyncio``.

    Raises:
      InvalidURLError: The option is given more than once or names no mode.
    """
    values = parse_qs(urlsplit(url).query, keep_blank_values=True).get("bridge")
    if values is None:
        return DEFAULT_BRIDGE
    if len(values) != 1 or values[0] not in get_args(BridgeMode):
        raise InvalidURLError(
            f"bridge= must be one of {', '.join(get_args(BridgeMode))}, not {values!r}"
        )
    mode: BridgeMode = values[0]  # type: ignore[assignment]
    return mode


@final
@attrs.define(frozen=True, kw_only=True)
class BridgeStatistics:
    """How often a `Bridge` crossed between Trio and asyncio, from
    `Bridge.statistics`: what batching saves is read here, in crossings per
    message, rather than in time.

    Attributes:
      calls: `Bridge.run` calls that reached the asyncio side (each a
        crossing there and one back).
      wakeups: Times an `Inbox` woke a waiting Trio task (a crossing from
        asyncio to Trio; puts that arrive before the woken task runs share
        it).
      handed_over: Items handed over through the bridge's inboxes.
    """

    calls: int
    wakeups: int
    handed_over: int


class _Counts:
    """The mutable counts behind `BridgeStatistics` (written on both sides,
    under the GIL; plain integer increments)."""

    __slots__ = ("calls", "handed_over", "wakeups")

    def __init__(self) -> None:
        self.calls = 0
        self.wakeups = 0
        self.handed_over = 0


@final
class Inbox(Generic[T]):
    """Items that the asyncio side produces one by one (from a consumer
    callback) and the Trio side takes in batches.

    The asyncio side calls `put` and `fail`, the Trio side `get_batch` and
    `drain_nowait`. A waiting `get_batch` is woken at most once per batch:
    the puts that arrive before it runs join the batch for free.
    """

    def __init__(self, token: trio.lowlevel.TrioToken, counts: _Counts | None = None) -> None:
        self._token = token
        self._counts = counts if counts is not None else _Counts()
        self._lock = threading.Lock()
        self._items: collections.deque[T] = collections.deque()
        self._failure: BaseException | None = None
        self._waiter: trio.Event | None = None
        self._wake_scheduled = False

    def put(self, item: T) -> None:
        """Add an item; call on the asyncio loop only. Never blocks."""
        with self._lock:
            self._items.append(item)
            wake = self._waiter is not None and not self._wake_scheduled
            if wake:
                self._wake_scheduled = True
        if wake:
            self._token.run_sync_soon(self._wake)

    def fail(self, exc: BaseException) -> None:
        """Make `get_batch` raise ``exc`` once what was put is taken (the
        connection behind it closed); call on the asyncio loop only."""
        with self._lock:
            if self._failure is None:
                self._failure = exc
            wake = self._waiter is not None and not self._wake_scheduled
            if wake:
                self._wake_scheduled = True
        if wake:
            self._token.run_sync_soon(self._wake)

    def _wake(self) -> None:
        # On the Trio thread, by way of the token.
        with self._lock:
            self._wake_scheduled = False
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._counts.wakeups += 1
            waiter.set()

    async def get_batch(self, max_items: int) -> list[T]:
        """Wait until an item is there and return up to ``max_items``,
        oldest first.

        Cancellable while it waits; items are only taken by a call that
        returns them, so a cancelled call loses nothing.

        Raises:
          BaseException: The failure given to `fail`, once nothing is left.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            with self._lock:
                if self._items:
                    count = min(max(1, max_items), len(self._items))
                    batch = [self._items.popleft() for _ in range(count)]
                    self._counts.handed_over += count
                    break
                if self._failure is not None:
                    raise self._failure
                if self._waiter is None:
                    self._waiter = trio.Event()
                waiter = self._waiter
            await waiter.wait()
        await trio.lowlevel.cancel_shielded_checkpoint()
        return batch

    def drain_nowait(self) -> list[T]:
        """Take everything there now (to give unacked messages back)."""
        with self._lock:
            items = list(self._items)
            self._items.clear()
        return items


@final
class OwnedTasks:
    """The asyncio tasks an adapter starts on its loop, held (asyncio itself
    keeps only weak references) until they end, and cancelled and awaited
    by `aclose`. Use it on the loop only.
    """

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def start(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        """Run ``coro`` as a task on the running loop, held here.

        Raises:
          trio.ClosedResourceError: `aclose` was called (``coro`` is closed,
            not run); it crosses the bridge as itself.
        """
        if self._closed:
            coro.close()
            raise trio.ClosedResourceError(f"cannot start {name!r}: the broker is closing")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        # Retrieved here, so asyncio never reports it as "never retrieved".
        if not task.cancelled() and task.exception() is not None:
            logger.warning("%s failed: %r", task.get_name(), task.exception())

    def __len__(self) -> int:
        """How many are still running."""
        return len(self._tasks)

    async def aclose(self) -> None:
        """Start no more; cancel those running and wait until they ended."""
        self._closed = True
        while self._tasks:
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@final
class Bridge:
    """Runs coroutines of an asyncio client library for Trio code; made by
    `open_bridge`.

    Attributes:
      mode: ``"thread"`` or ``"trio-asyncio"``.
    """

    def __init__(self, mode: BridgeMode, loop: asyncio.AbstractEventLoop | None) -> None:
        self.mode = mode
        self._loop = loop
        self._token = trio.lowlevel.current_trio_token()
        self._clock = trio.lowlevel.current_clock()
        self._closed = False
        self._counts = _Counts()

    def statistics(self) -> BridgeStatistics:
        """How often this bridge crossed so far (see `BridgeStatistics`)."""
        counts = self._counts
        return BridgeStatistics(
            calls=counts.calls, wakeups=counts.wakeups, handed_over=counts.handed_over
        )

    def now(self) -> float:
        """Trio's clock: what `trio.current_time()` returns, readable on the
        asyncio side too (where there is no Trio run to ask), so both sides
        stamp times on the one clock."""
        return self._clock.current_time()

    async def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn()`` on the asyncio loop and return its result: one
        crossing. Everything that touches the client library (connecting,
        opening a channel, publishing, acking) goes through here.

        Exceptions that ``fn`` raises propagate unchanged; the adapter
        translates them. If the caller is cancelled, the coroutine is
        cancelled too, and the call returns (raising `trio.Cancelled`) only
        once it has stopped.

        Raises:
          trio.ClosedResourceError: The bridge is closed, or closed while
            the coroutine ran.
        """
        if self._closed:
            raise trio.ClosedResourceError("the bridge is closed")
        self._counts.calls += 1
        if self._loop is None:
            import trio_asyncio

            result: T = await trio_asyncio.aio_as_trio(fn)()
            return result
        return await self._run_on_thread(self._loop, fn)

    async def _run_on_thread(
        self, loop: asyncio.AbstractEventLoop, fn: Callable[[], Awaitable[T]]
    ) -> T:
        async def call() -> T:
            return await fn()

        done = trio.Event()
        token = self._token
        tasks: list[asyncio.Task[T]] = []
        cancelled_early = False

        def start() -> None:
            # On the loop. A call cancelled before it started never starts.
            if cancelled_early:
                token.run_sync_soon(done.set)
                return
            task = loop.create_task(call())
            tasks.append(task)
            # Set only once the task has ended, cancelled or not: not the
            # moment a cancellation is asked for.
            task.add_done_callback(lambda _: token.run_sync_soon(done.set))

        def cancel() -> None:
            nonlocal cancelled_early
            if tasks:
                tasks[0].cancel()
            else:
                cancelled_early = True

        try:
            loop.call_soon_threadsafe(start)
        except RuntimeError as exc:  # the loop is closed
            raise trio.ClosedResourceError("the bridge is closed") from exc
        try:
            await done.wait()
        except trio.Cancelled:
            # Stop the asyncio side too, and wait for it: nothing it does may
            # happen after the caller saw its cancellation.
            loop.call_soon_threadsafe(cancel)
            with trio.CancelScope(shield=True):
                await done.wait()
            raise
        if not tasks or tasks[0].cancelled():
            raise trio.ClosedResourceError("the bridge closed during the call")
        return tasks[0].result()

    def inbox(self) -> Inbox[T]:
        """A new hand-off of items from the asyncio side to Trio."""
        return Inbox(self._token, self._counts)


async def _finish_tasks() -> None:
    tasks = asyncio.all_tasks() - {asyncio.current_task()}
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    loop = asyncio.get_running_loop()
    await loop.shutdown_asyncgens()
    # Its threads ran the client's blocking calls (DNS lookups): joined
    # here, so none outlives the bridge.
    await loop.shutdown_default_executor()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The bridge thread: run the loop until stopped, then cancel and finish
    every task left on it, so nothing outlives the bridge."""
    # The loop is not made this thread's current loop (set_event_loop):
    # trio-asyncio's policy, once imported, owns that; code on the loop finds
    # it as the running loop.
    try:
        loop.run_forever()
        loop.run_until_complete(_finish_tasks())
    finally:
        loop.close()


@asynccontextmanager
async def open_bridge(mode: BridgeMode = DEFAULT_BRIDGE) -> AsyncIterator[Bridge]:
    """Open a bridge in ``mode`` for the duration of the block.

    In thread mode the loop's thread belongs to this context: leaving the
    block stops the loop, cancels what is left on it, shuts down its default
    executor and joins the thread, even when the block is cancelled. What
    the block raises comes out as itself. An adapter closes its connection
    (shielded, with a timeout) before the block ends.
    """
    if mode == "trio-asyncio":
        import trio_asyncio

        try:
            async with trio_asyncio.open_loop():
                bridge = Bridge(mode, None)
                try:
                    yield bridge
                finally:
                    bridge._closed = True
        except BaseExceptionGroup as group:
            # trio-asyncio's loop runs in nurseries, which wrap what the
            # block raised in groups: raise a lone error as itself, as the
            # thread mode does (its own __cause__ stays).
            lone: BaseException = group
            while isinstance(lone, BaseExceptionGroup) and len(lone.exceptions) == 1:
                lone = lone.exceptions[0]
            if lone is group:
                raise
            raise lone  # noqa: B904 (the group is its context)
        return
    if mode != "thread":
        raise InvalidURLError(f"unknown bridge mode {mode!r}")
    # Not asyncio.new_event_loop(): once trio-asyncio is imported, its event
    # loop policy refuses to make a loop from within Trio.
    loop = asyncio.SelectorEventLoop()
    token = trio.lowlevel.current_trio_token()
    stopped = trio.Event()
    # The thread is joined below, whatever happens in the block, so it never
    # outlives it. Not a nursery task: a nursery would wrap whatever the
    # block raises (a failure to connect, the caller's own error) in an
    # exception group.
    trio.lowlevel.start_thread_soon(
        functools.partial(_run_loop, loop),
        lambda _: token.run_sync_soon(stopped.set),
        name="trio_durable asyncio bridge",
    )
    bridge = Bridge(mode, loop)
    try:
        yield bridge
    finally:
        bridge._closed = True
        loop.call_soon_threadsafe(loop.stop)
        with trio.CancelScope(shield=True):
            await stopped.wait()
