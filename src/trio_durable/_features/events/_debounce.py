"""Debounce: the events for one key that come within a workflow's window
start one run of it.

The window lives in the store, not in an engine, so it holds across a fleet:
a keyed value (scope ``debounce:<workflow>``, key the event's key as JSON)
names the window's run, when the window ends, and the run's ``updated_at``
as the window last wrote it. The run is created ``suspended`` with
``wake_at`` at the window's end, so the engines' due-run pollers start it
then, on whichever engine takes it first.

An event within the window joins it: one atomic write moves the window's
end (a trailing window: the event's time plus the debounce) and rewrites the
run's input (the last payload, or the payloads so far and this one), by
compare-and-swap on the window's version, and only while the run has not
started (``expect_status`` suspended). Of two engines joining at once, one
wins and the other reads again; a run that started meanwhile is never
changed: the event opens a new window with a new run instead. So every
event is in exactly one run, the one that started or a later one. The
window goes with its run (`PutValue.run_id`): retention deletes it with the
run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._base import _serde
from ..._base._records import Run, RunStatus
from ..._stores._ops import CreateRun, Op, PutValue, UpdateRun

if TYPE_CHECKING:
    from ..._kernel._definitions import Workflow
    from ..._stores._base import Store

_NOT_STARTED: Final[frozenset[RunStatus]] = frozenset({"suspended"})


def debounce_scope(workflow: str) -> str:
    """The scope of ``workflow``'s debounce windows in the keyed values."""
    return f"debounce:{workflow}"


def window_key(key: str | None) -> str:
    """An event key as the key of its window (JSON, so that ``None`` and
    every string stay apart)."""
    return json.dumps(key)


def first_input(wf: Workflow[..., Any], payload: Any) -> str:
    """The input of a run of subscriber ``wf`` for one event's payload,
    checked against its parameter (with ``debounce_collect="all"``, the list
    of payloads that holds this one).

    Raises:
      InvalidArgumentsError: The payload does not fit the parameter.
      SerializationError: The payload cannot be serialized.
    """
    collects = wf.controls.debounce is not None and wf.controls.debounce_collect == "all"
    return _serde.check_workflow_args(wf, ([payload],) if collects else (payload,))


@final
@attrs.define(frozen=True, kw_only=True)
class Plan:
    """What one event does to one debounced subscriber: the operations to
    write with the event, and the run it lands in.

    Attributes:
      ops: The window's compare-and-swap and the run's creation or update.
      run_id: The window's run.
      created: The run, if this event opens the window (None: it joins).
    """

    ops: tuple[Op, ...]
    run_id: str
    created: Run | None


async def plan_debounce(
    store: Store, wf: Workflow[..., Any], key: str | None, run_input: str, run_id: str, now: float
) -> Plan:
    """How an event at ``now`` with key ``key`` reaches debounced
    subscriber ``wf``: it joins the window open for its key, or opens one
    with a run ``run_id`` of input ``run_input`` (see `first_input`).

    The operations hold only if nothing changed since they were read: a
    write that conflicts (`WriteConflict`) is planned again.
    """
    debounce = wf.controls.debounce
    assert debounce is not None
    scope, vkey = debounce_scope(wf.name), window_key(key)
    until = now + debounce
    window = await store.get_value(scope, vkey)
    if window is not None:
        state = json.loads(window.value)
        if now < state["until"]:
            run = await store.get_run(state["run"])
            # Written by nothing but this window since it last wrote it (a
            # turn, a cancel or a retry moves ``updated_at``): not started.
            if run is not None and run.status == "suspended" and run.updated_at == state["stamp"]:
                return Plan(
                    ops=(
                        _put_window(
                            scope, vkey, run.id, until, now, state["events"] + 1, window.version
                        ),
                        UpdateRun(
                            run.id,
                            {
                                "input": _joined(wf, run.input, run_input),
                                "wake_at": until,
                                "updated_at": now,
                            },
                            expect_status=_NOT_STARTED,
                        ),
                    ),
                    run_id=run.id,
                    created=None,
                )
    run = Run(
        id=run_id,
        workflow=wf.name,
        version=wf.version,
        status="suspended",
        input=run_input,
        wake_at=until,
        created_at=now,
        updated_at=now,
    )
    version = 0 if window is None else window.version
    return Plan(
        ops=(_put_window(scope, vkey, run_id, until, now, 1, version), CreateRun(run)),
        run_id=run_id,
        created=run,
    )


def _put_window(
    scope: str, vkey: str, run_id: str, until: float, stamp: float, events: int, version: int
) -> PutValue:
    value = {"run": run_id, "until": until, "stamp": stamp, "events": events}
    return PutValue(
        scope,
        vkey,
        json.dumps(value, separators=(",", ":")),
        stamp,
        expect_version=version,
        run_id=run_id,
    )


def _joined(wf: Workflow[..., Any], stored: str, run_input: str) -> str:
    """The input of a window's run once one more event joined it: the last
    payload, or every payload so far."""
    if wf.controls.debounce_collect == "last":
        return run_input
    [payloads] = json.loads(stored)
    [[payload]] = json.loads(run_input)
    return _serde.dumps([[*payloads, payload]])


@final
@attrs.define(frozen=True, kw_only=True)
class DebounceWindow:
    """A debounce window still open: its run has not started, and events
    for its key join it until ``until``.

    Attributes:
      workflow: The debounced workflow.
      key: The events' key (None is a key too).
      run_id: The run the window's events land in.
      until: When the window ends and its run starts (durable time), unless
        another event moves it on.
      events: How many events joined it so far.
      opened_at: When its first event came (the run's creation).
    """

    workflow: str
    key: str | None
    run_id: str
    until: float
    events: int
    opened_at: float


async def open_windows(
    store: Store, workflows: Sequence[str], now: float, *, limit: int = 100
) -> list[DebounceWindow]:
    """The windows of ``workflows`` open at ``now`` (at most ``limit`` read
    per workflow, by key), by workflow and key: those whose end is still to
    come and whose run is still waiting for it (``suspended``, written by
    nothing but the window since)."""
    found: list[DebounceWindow] = []
    for workflow in workflows:
        for stored in await store.list_values(debounce_scope(workflow), limit=limit):
            state = json.loads(stored.value)
            if now >= state["until"]:
                continue
            run = await store.get_run(state["run"])
            if run is None or run.status != "suspended" or run.updated_at != state["stamp"]:
                continue
            found.append(
                DebounceWindow(
                    workflow=workflow,
                    key=json.loads(stored.key),
                    run_id=run.id,
                    until=state["until"],
                    events=state["events"],
                    opened_at=run.created_at,
                )
            )
    return found
