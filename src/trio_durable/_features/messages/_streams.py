"""Run streams: the values a workflow body emits (`Context.emit`), kept in
order, and read by `Engine.stream` and `Client.stream` until the run ends.

A run's stream lives in the store's keyed values, scope ``stream:<run id>``,
one row per value, keyed by its offset zero-padded (so the store's order of
keys is the order of offsets). A turn writes the values it emitted in the
same batch as its checkpoints, followed by the stream's head: the run's
record of kind `STREAM_HEAD`, whose output is the number of values emitted
so far. A replay re-emits nothing below the head, so each offset is written by
one turn only; a value already stored is never replaced (its write expects
no row), so even a turn cut short between two chunks of its write, which
left values without their head, writes nothing twice.

A reader reads the run, then the values past the last offset it gave out,
and waits only when it has all of them and the run has not ended. Values
and the run's end are written atomically, so a run found ended before a
read of the values has all its values in that read. It waits for a change
rather than polling: a turn of this engine tells it when its write
committed, an emitting turn elsewhere announces ``stream`` to the store's
watchers (`_wakes`), and the run's end is told the same ways (on the memory
store, which announces no end, by the store itself); only on a store that
announces nothing across processes does it read again every
``poll_interval`` seconds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from ..._base import _serde
from ..._base._exceptions import StoreError, UsageError
from ..._base._records import TERMINAL_STATUSES, Run, StoredValue
from ..._kernel._hooks import Feature
from ..._kernel._wakes import announce
from ..._stores._base import ChangeFeed, RunWatch
from ..._stores._ops import Op, PutValue

if TYPE_CHECKING:
    from ..._stores._base import Store

logger = logging.getLogger("trio_durable")

STREAM_HEAD: Final = "stream"
"""The kind of a run's record of its stream's head: its output is how many
values the run emitted (the next offset)."""

OFFSET_DIGITS: Final = 12
"""The width of an offset in a value's key: keys compare as offsets do."""

PAGE: Final = 500
"""Values a reader reads from the store at a time."""

_RETRY_DELAY: Final = 1.0
"""Seconds before a reader reads again after the store failed under it."""


def stream_scope(run_id: str) -> str:
    """The keyed-values scope of ``run_id``'s stream."""
    return f"stream:{run_id}"


def offset_key(offset: int) -> str:
    """The key of the value at ``offset``."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def check_offset(from_offset: object) -> int:
    """``from_offset`` if it is an integer >= 0.

    Raises:
      UsageError: It is not.
    """
    if isinstance(from_offset, bool) or not isinstance(from_offset, int) or from_offset < 0:
        raise UsageError(f"from_offset must be an integer >= 0, not {from_offset!r}")
    return from_offset


@attrs.define(eq=False)
class _Waiting:
    event: trio.Event = attrs.field(factory=trio.Event)


@final
class StreamWaiters(Feature):
    """The readers of streams waiting for new values, by run id.

    Told by this engine's turns once their writes commit (`changed`), and by
    the store's watch of what other processes announce.
    """

    def __init__(self) -> None:
        self._waiting: dict[str, _Waiting] = {}
        # Set once the engine or client closed: what registering raises.
        self._closed: Callable[[], Exception] | None = None

    def register(self, run_id: str) -> trio.Event:
        """The event set at the next change of ``run_id``'s stream (shared
        by its readers). Register before reading, so a change during the
        read is not missed.

        Raises:
          Exception: What `close` was given, once it was called.
        """
        if self._closed is not None:
            raise self._closed()
        waiting = self._waiting.get(run_id)
        if waiting is None:
            waiting = self._waiting[run_id] = _Waiting()
        return waiting.event

    def forget(self, run_id: str, event: trio.Event) -> None:
        """Drop a registration no reader waits on any more (others that
        share it wake and register again)."""
        waiting = self._waiting.get(run_id)
        if waiting is not None and waiting.event is event:
            del self._waiting[run_id]
            event.set()

    def changed(self, run_id: str) -> None:
        """``run_id``'s stream (or the run) changed: wake its readers."""
        waiting = self._waiting.pop(run_id, None)
        if waiting is not None:
            waiting.event.set()

    def committed(self, run_id: str) -> None:
        # Readers of the run's stream here read what the turn committed.
        self.changed(run_id)

    def announced(self, kind: str, run_id: str | None) -> None:
        # Values of a run's stream committed elsewhere, or its end.
        if kind in ("stream", "end") and run_id is not None:
            self.changed(run_id)

    def missed(self) -> None:
        self.recheck()

    def recheck(self) -> None:
        """Wake every reader to read again (changes may have gone unseen)."""
        waiting, self._waiting = self._waiting, {}
        for item in waiting.values():
            item.event.set()

    def close(self, error: Callable[[], Exception]) -> None:
        """The engine or client closed: nothing tells its readers anything
        any more, so wake them all, and have them, and any reader after
        them, raise ``error()`` as they register again."""
        self._closed = error
        self.recheck()


def stream_announce(store: object, origin: str, run: Run) -> list[Op]:
    """What a turn that emitted writes to tell readers in other processes
    (nothing on a store that is no `RunWatch`)."""
    return announce(store, origin, "stream", [run])


def value_write(run_id: str, offset: int, value_json: str, at: float) -> PutValue:
    """The write of the value at ``offset``: it never replaces a stored one."""
    return PutValue(
        stream_scope(run_id),
        offset_key(offset),
        value_json,
        at,
        expect_version=0,
        strict=False,
        run_id=run_id,
    )


@final
@attrs.define(frozen=True, kw_only=True)
class StreamFront:
    """What a reader needs of the engine or client that reads.

    Attributes:
      store: The store.
      waiters: Told of changes to streams, and of runs' ends.
      poll_interval: Seconds between reads on a store that announces
        nothing to other processes.
      read_run: Reads a run (raising if it is missing).
    """

    store: Store
    waiters: StreamWaiters
    poll_interval: float
    read_run: Callable[[str], Awaitable[Run]]


@final
class RunStream:
    """The items ``(offset, value)`` of a run's stream from an offset on,
    until the run ended and they are all given (what `ReadsStreams.stream`
    returns).

    An iterator object rather than an async generator, so a reader may drop
    it at any point (``break``) with nothing to finalize: what it may hold
    between two items is a registration with `StreamWaiters`, which the
    next change of the run drops.
    """

    def __init__(self, front: StreamFront, run_id: str, from_offset: int) -> None:
        self._front = front
        self._run_id = run_id
        self._offset = from_offset
        self._rows: list[StoredValue] = []
        self._first = from_offset  # the offset of ``_rows[0]``
        self._read_once = False
        # The registration made before the last read that found every value
        # there was: the next read waits on it first.
        self._held: trio.Event | None = None
        self._last = False  # the rows read are the stream's last ones

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> tuple[int, Any]:
        while not self._rows:
            if self._last:
                raise StopAsyncIteration
            await self._read()
        row = self._rows[self._offset - self._first]
        offset, self._offset = self._offset, self._offset + 1
        if self._offset - self._first == len(self._rows):
            self._rows = []
        return offset, _serde.loads(row.value)

    async def _read(self) -> None:
        """Read the next page of values, waiting for one if every value
        there was has been given and the run has not ended."""
        front, run_id = self._front, self._run_id
        store = front.store
        while True:
            if self._held is not None:
                await self._wait()
            # Registered before the reads: a change committed while they are
            # in flight still wakes the wait.
            change = front.waiters.register(run_id)
            try:
                run = await front.read_run(run_id)
                after = None if self._offset == 0 else offset_key(self._offset - 1)
                rows = await store.list_values(stream_scope(run_id), after=after, limit=PAGE)
            except StoreError as exc:
                front.waiters.forget(run_id, change)
                if not self._read_once:
                    raise
                # The store may come back (a restart, a lost connection): the
                # reader keeps its place and reads again.
                logger.warning(
                    "reading the stream of run %r failed (%s); reading again", run_id, exc
                )
                await trio.sleep(_RETRY_DELAY)
                continue
            except BaseException:
                front.waiters.forget(run_id, change)
                raise
            self._read_once = True
            whole = len(rows) < PAGE
            # Values and the end commit together: a run read as ended before
            # its values had them all in that read.
            self._last = whole and run.status in TERMINAL_STATUSES
            if whole and not self._last:
                self._held = change
            else:
                front.waiters.forget(run_id, change)
            if rows or self._last:
                self._rows, self._first = rows, self._offset
                return

    async def _wait(self) -> None:
        """Wait on the held registration for the stream or the run to change
        (or, on a store that tells other processes nothing, a while)."""
        assert self._held is not None
        change, self._held = self._held, None
        store = self._front.store
        events = [change]
        if isinstance(store, ChangeFeed):
            # Its writers all live in this process and announce no end: the
            # store tells it itself.
            events.append(store.run_end_event(self._run_id))
        try:
            poll = math.inf if isinstance(store, RunWatch) else self._front.poll_interval
            with trio.move_on_after(poll):
                await _first_of(events)
        finally:
            self._front.waiters.forget(self._run_id, change)


async def _first_of(events: Sequence[trio.Event]) -> None:
    """Return once one of ``events`` is set."""
    if any(event.is_set() for event in events):
        return
    async with trio.open_nursery() as nursery:

        async def wait(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(wait, event)
