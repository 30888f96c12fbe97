"""Events: `Engine.send_event` and `Client.send_event` start the runs of
the workflows that subscribe to an event (``@app.workflow(events=...)``).

An event is acknowledged only once it is stored: its record (keyed values,
scope ``event``, key its id) is written in the same atomic batch as the
runs it starts and the debounce windows it joins (`_debounce`), so either
all of it is durable or none of it. The record's insert expects no record
of that id, which makes a send idempotent by event id, across engines too:
sending an id again returns the receipt stored the first time.

Run ids are derived: ``<event id>.<workflow>``. An event no workflow
subscribes to is stored all the same, with a warning. Records belong to no
run: retention prunes them by age (`Retention.events`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._base import _serde
from ..._base._exceptions import (
    EventConflictError,
    StoreError,
    UnsubscribedEventWarning,
    UsageError,
)
from ..._base._index_text import refuse_nul
from ..._base._records import Run
from ..._kernel._options import check_id
from ..._stores._base import WriteConflict
from ..._stores._ops import CreateRun, Op, PutValue
from ._debounce import first_input, plan_debounce
from ._subscribers import subscribers

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry, Workflow
    from ..._stores._base import Store

EVENT_SCOPE: Final = "event"
"""The scope of event records in the store's keyed values."""

_NAME_LIMIT: Final = 200
_KEY_LIMIT: Final = 200
_MAX_ATTEMPTS: Final = 1000
"""Writes of one event that may lose a race before the send gives up: each
loss means another writer's event was stored, so a send retried this often
is starved by a flood (and says so), never stuck."""


@final
@attrs.define(frozen=True, kw_only=True)
class EventReceipt:
    """What `Engine.send_event` returns once the event is stored.

    Attributes:
      event_id: The event's id (given, or derived from the engine's seeded
        source).
      name: The event's name.
      key: Its key (debounce windows are per key), or None.
      run_ids: The runs it reached, one per subscribing workflow in the
        order they were registered: the run it started, or for a debounced
        workflow the window's run it joined (or opened). Empty if no
        workflow subscribes to the event.
    """

    event_id: str
    name: str
    key: str | None
    run_ids: tuple[str, ...]


@final
@attrs.define(frozen=True, kw_only=True)
class EventRecord:
    """An event as the store keeps it (`Engine.get_event_record`,
    `Engine.list_events`).

    Attributes:
      event_id: Its id.
      name: Its name.
      key: Its key, or None.
      payload: Its payload as plain JSON (attrs instances as dicts).
      run_ids: The runs it reached (see `EventReceipt.run_ids`).
      sent_at: When it was stored (durable time).
    """

    event_id: str
    name: str
    key: str | None
    payload: Any
    run_ids: tuple[str, ...]
    sent_at: float

    @property
    def receipt(self) -> EventReceipt:
        """The receipt its send returned."""
        return EventReceipt(
            event_id=self.event_id, name=self.name, key=self.key, run_ids=self.run_ids
        )


@final
@attrs.define(frozen=True, kw_only=True)
class EventFront:
    """What a front end (an engine or a client) gives `send_event`.

    Attributes:
      store: Where events and runs are written.
      app: Whose workflows subscribe.
      now: Durable time now.
      new_id: A new event id, from the front end's seeded source.
      owner: The engine that leases the runs an event starts (its turn then
        needs no write of its own); None: they are created ``pending``.
      lease_ttl: How long that lease lasts.
      announce: The operations that tell engines of the runs an event
        started (``"wake"``) or whose window it opened (``"due"``).
      started: Called once the write held, with the runs started and the
        windows' runs created.
    """

    store: Store
    app: Registry
    now: Callable[[], float]
    new_id: Callable[[], str]
    owner: str | None
    lease_ttl: float
    announce: Callable[[Sequence[Run], Sequence[Run]], Sequence[Op]]
    started: Callable[[Sequence[Run], Sequence[Run]], None]


def event_record(event_id: str, text: str, sent_at: float) -> EventRecord:
    data = json.loads(text)
    return EventRecord(
        event_id=event_id,
        name=data["name"],
        key=data["key"],
        payload=data["payload"],
        run_ids=tuple(data["runs"]),
        sent_at=sent_at,
    )


def _check(name: object, key: object, event_id: object) -> None:
    if not isinstance(name, str) or not name or len(name) > _NAME_LIMIT:
        raise UsageError(f"an event name must be 1 to {_NAME_LIMIT} characters, not {name!r}")
    if key is not None and (not isinstance(key, str) or len(key) > _KEY_LIMIT):
        raise UsageError(f"an event key must be None or a str of at most {_KEY_LIMIT}, not {key!r}")
    refuse_nul("an event name", name)
    refuse_nul("an event key", key)
    if event_id is not None:
        check_id("event_id", event_id)


async def send_event(
    front: EventFront, name: str, payload: Any, key: str | None, event_id: str | None
) -> EventReceipt:
    """`SendsEvents.send_event`: everything is checked before anything is
    written; then the event and its runs are written in one batch, planned
    again for as long as it conflicts with another writer."""
    _check(name, key, event_id)
    subs = subscribers(front.app, name)
    plain = json.loads(_serde.dumps(payload))
    inputs = [first_input(wf, payload) for wf in subs]
    given = event_id is not None
    if event_id is not None:
        for wf in subs:
            check_id("run_id", _run_id(event_id, wf.name))
    store = front.store
    for _ in range(_MAX_ATTEMPTS):
        if event_id is None:
            event_id = front.new_id()
        stored = await store.get_value(EVENT_SCOPE, event_id)
        if stored is not None:
            if not given:
                # A derived id must name a new event: with a fixed seed, an
                # engine restarted on the same store derives the same ids.
                event_id = None
                continue
            record = event_record(event_id, stored.value, stored.updated_at)
            if record.name != name:
                raise EventConflictError(
                    f"event id {event_id!r} belongs to an event named {record.name!r}, not {name!r}"
                )
            _warn_unsubscribed(name, subs)
            return record.receipt
        try:
            receipt = await _store_event(front, event_id, name, key, plain, subs, inputs)
        except WriteConflict:
            # Another writer stored this id, or moved a window this event
            # joins, since it was read: read again.
            continue
        _warn_unsubscribed(name, subs)
        return receipt
    raise StoreError(f"event {name!r} lost {_MAX_ATTEMPTS} races with other writers in a row")


async def _store_event(
    front: EventFront,
    event_id: str,
    name: str,
    key: str | None,
    plain: Any,
    subs: Sequence[Workflow[..., Any]],
    inputs: Sequence[str],
) -> EventReceipt:
    store, now = front.store, front.now()
    ops: list[Op] = []
    run_ids: list[str] = []
    started: list[Run] = []
    windows: list[Run] = []
    for wf, run_input in zip(subs, inputs, strict=True):
        run_id = _run_id(event_id, wf.name)
        check_id("run_id", run_id)
        if wf.controls.debounce is not None:
            plan = await plan_debounce(store, wf, key, run_input, run_id, now)
            ops.extend(plan.ops)
            run_ids.append(plan.run_id)
            if plan.created is not None:
                windows.append(plan.created)
            continue
        run = _new_run(front, wf, run_id, run_input, now)
        ops.append(CreateRun(run))
        run_ids.append(run_id)
        started.append(run)
    record = {"name": name, "key": key, "payload": plain, "runs": run_ids}
    # Expects no event of this id: of two sends of one id, one stores it.
    ops.append(
        PutValue(
            EVENT_SCOPE, event_id, json.dumps(record, separators=(",", ":")), now, expect_version=0
        )
    )
    ops.extend(front.announce(started, windows))
    results = await store.apply(ops)
    created = [result[0] for op, result in zip(ops, results, strict=True) if _created(op, result)]
    front.started(
        [run for run in created if run.status != "suspended"],
        [run for run in created if run.status == "suspended"],
    )
    return EventReceipt(event_id=event_id, name=name, key=key, run_ids=tuple(run_ids))


def _created(op: Op, result: Any) -> bool:
    return isinstance(op, CreateRun) and bool(result[1])


def _run_id(event_id: str, workflow: str) -> str:
    return f"{event_id}.{workflow}"


def _new_run(
    front: EventFront, wf: Workflow[..., Any], run_id: str, run_input: str, now: float
) -> Run:
    owner = front.owner
    return Run(
        id=run_id,
        workflow=wf.name,
        version=wf.version,
        status="pending" if owner is None else "running",
        input=run_input,
        lease_owner=owner,
        lease_expiry=None if owner is None else now + front.lease_ttl,
        created_at=now,
        updated_at=now,
    )


def _warn_unsubscribed(name: str, subs: Sequence[Workflow[..., Any]]) -> None:
    if not subs:
        warnings.warn(
            f"no workflow subscribes to event {name!r}; it was stored all the same",
            UnsubscribedEventWarning,
            stacklevel=4,
        )
