"""`SendsEvents`: the `send_event` and reads of stored events that `Engine`
and `Client` share, and what each gives them (`engine_front`,
`client_front`); how an event is stored is `_events`'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .._base._exceptions import UsageError
from .._base._index_text import refuse_nul
from .._base._records import Run
from .._features.events._events import (
    EVENT_SCOPE,
    EventFront,
    EventReceipt,
    EventRecord,
    event_record,
    send_event,
)
from .._kernel._replay import TurnDraft
from .._kernel._wakes import announce
from .._stores._ops import Op
from ._front_core import FrontPart

if TYPE_CHECKING:
    from .._kernel._definitions import Registry
    from .._kernel._runtime import Runtime
    from .._stores._base import Store


class SendsEvents(FrontPart):
    """`send_event` and the reads of stored events, shared by `Engine` and
    `Client` (each says what it gives them in `_event_front`)."""

    def _event_front(self) -> EventFront:
        raise NotImplementedError

    async def send_event(
        self,
        name: str,
        payload: Any = None,
        *,
        key: str | None = None,
        event_id: str | None = None,
    ) -> EventReceipt:
        """Send the event ``name``: start a run of each workflow that
        subscribes to it (``@app.workflow(events=[name])``), with
        ``payload`` as its one input.

        A workflow with ``debounce=`` instead gets one run per window: the
        events for one ``key`` that come within ``debounce`` seconds of the
        previous one start a single run, once that long passed after the
        last of them, with the last payload (or, with
        ``debounce_collect="all"``, the list of them all).

        The call returns once the event is stored, in the same atomic write
        as the runs it starts and the windows it joins. It is idempotent by
        ``event_id``: sending an id again starts nothing and returns the
        receipt of the first send. An event no workflow subscribes to is
        stored all the same (see `get_event_record`) and warns with
        `UnsubscribedEventWarning`.

        Args:
          name: The event's name.
          payload: Its payload (a JSON-able value or an attrs instance).
          key: What debounce windows are kept per; None is a key too.
          event_id: The event's id; without it one is derived (by an engine
            from its seeded random source). The runs it starts are
            ``<event_id>.<workflow>``.

        Returns:
          An `EventReceipt`: the event's id and the runs it reached.

        Raises:
          EventConflictError: ``event_id`` belongs to an event of another
            name.
          InvalidArgumentsError: The payload does not fit a subscriber's
            input.
          SerializationError: The payload cannot be serialized.
          UsageError: ``name``, ``key`` or ``event_id`` are malformed (or a
            client has no app to find subscribers in).
          StoreError: The store failed; the event may or may not be stored
            (send it again with the same ``event_id``).
        """
        return await send_event(self._event_front(), name, payload, key, event_id)

    async def get_event_record(self, event_id: str) -> EventRecord | None:
        """The event stored under ``event_id``, or None (a client needs no
        app for it).

        Raises:
          UsageError: ``event_id`` holds a NUL character (no id does).
        """
        refuse_nul("event_id", event_id)
        # A read: no app needed (sending needs one, to find subscribers).
        self._core.check_open()
        stored = await self._core.store.get_value(EVENT_SCOPE, event_id)
        return None if stored is None else event_record(event_id, stored.value, stored.updated_at)

    async def list_events(self, *, after: str | None = None, limit: int = 100) -> list[EventRecord]:
        """Stored events by id, from the first id after ``after``, at most
        ``limit`` of them (a client needs no app for them).

        Raises:
          UsageError: ``limit`` is not a positive int.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise UsageError(f"limit must be a positive int, not {limit!r}")
        refuse_nul("after", after)
        self._core.check_open()
        rows = await self._core.store.list_values(EVENT_SCOPE, after=after, limit=limit)
        return [event_record(row.key, row.value, row.updated_at) for row in rows]


def engine_front(rt: Runtime, pass_on: Callable[[Sequence[Run]], Sequence[Op]]) -> EventFront:
    """How an engine sends events: the runs an event starts are created
    leased to it and run here at once; a window's run is left to the due-run
    pollers (this engine's looks again when it is sooner than it would)."""

    def started(runs: Sequence[Run], windows: Sequence[Run]) -> None:
        for run in runs:
            rt.telemetry.emit_run("run.started", run)
            rt.scheduler.wake(run.id, initial=TurnDraft(run=run, checkpoints={}))
        for run in windows:
            if run.wake_at is not None:
                rt.scheduler.signals.wake_at(run.wake_at)

    return EventFront(
        store=rt.store,
        app=rt.app,
        now=rt.clock.now,
        new_id=lambda: f"event-{rt.rng.getrandbits(64):016x}",
        owner=rt.engine_id,
        lease_ttl=rt.options.lease_ttl,
        announce=lambda runs, windows: [
            *pass_on(runs),
            *announce(rt.store, rt.engine_id, "due", windows),
        ],
        started=started,
    )


def client_front(
    store: Store,
    app: Registry,
    now: Callable[[], float],
    new_id: Callable[[], str],
    origin: str,
    wake: Callable[[Sequence[Run]], Sequence[Op]],
) -> EventFront:
    """How a client sends events: the runs an event starts are created
    ``pending`` and announced, so an engine takes them at once; a window's
    run is announced as due, so the engines' pollers look at it in time."""
    return EventFront(
        store=store,
        app=app,
        now=now,
        new_id=new_id,
        owner=None,
        lease_ttl=0.0,
        announce=lambda runs, windows: [*wake(runs), *announce(store, origin, "due", windows)],
        started=lambda runs, windows: None,
    )
