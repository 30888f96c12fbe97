"""`ReadsStreams`: the `stream` that `Engine` and `Client` share; how a
stream is kept and read is `_streams`'s."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .._features.messages._streams import RunStream, StreamFront, check_offset
from ._front_core import FrontPart


class ReadsStreams(FrontPart):
    """`stream`, shared by `Engine` and `Client`."""

    def _stream_front(self, namespace: str | None) -> StreamFront:
        core = self._core
        core.check_open()
        return StreamFront(
            store=core.store,
            waiters=core.streams,
            poll_interval=core.poll_interval,
            read_run=lambda run_id: self.get(run_id, namespace=namespace),
        )

    def stream(
        self, run_id: str, from_offset: int = 0, *, namespace: str | None = None
    ) -> AsyncIterator[tuple[int, Any]]:
        """The values a run emits (`Context.emit`), as ``(offset, value)``
        pairs in order, from ``from_offset`` on; the iteration ends once the
        run ended and every value it emitted was given.

        Each offset is given once per iteration. A reader that stops (its
        process dies, its connection drops) resumes with ``from_offset``
        one past the last offset it saw, and gets the rest exactly once.
        Values come as plain JSON (an attrs instance emitted comes back as
        a dict). A run's values become readable when the turn that emitted
        them commits (see docs/streaming.md). Reading waits for changes,
        told by the store's watch; it reads the store again only on a store
        that tells other processes nothing. If the store fails after the
        first read, the reader logs it and reads again a second later.

        Args:
          run_id: The run's id.
          from_offset: The first offset to give (0: the whole stream).
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          UsageError: ``from_offset`` is not an integer >= 0 (at the call).
          RunNotFoundError: No run has this id (at the first iteration).
          EngineClosedError: The engine closed while the reader waited (a
            client's: `trio.ClosedResourceError`); read again elsewhere from
            one past the last offset given.
        """
        offset = check_offset(from_offset)
        return RunStream(self._stream_front(namespace), run_id, offset)
