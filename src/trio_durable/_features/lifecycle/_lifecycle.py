"""A run's life past its body: continuing as a new generation, its
whole-run deadline, and the started children it takes down with it.

Continue-as-new ends a run ``completed`` (output None) and creates its
next generation, ``<root>.gen.<n>``, in the one write that ends it. The
ending run keeps a forward link (its record of kind `CONTINUED_AS`, its output
the next generation's id, its input the inputs it continued with); the new
one a backward link (its record of kind `CONTINUED_FROM`, its output the
previous generation's id, its input the chain's root and the generation's
number). Callers of ``result``, and ``signal`` and ``cancel`` from outside,
follow the forward links.

A run's deadline is a pending record of kind `DEADLINE` (its input the
timeout, its ``wake_at`` when it fires), written with the run (or, for a run whose creator did not
know its workflow's timeout, by its first turn, from its ``created_at``).
Every suspend wakes the run by it at the latest, and a body's turn is cut
short at it; the turn that finds it passed settles it and makes the run
``cancelling`` with compensation, whose end then carries the code
``timeout``.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ..._base._bounds import is_finite
from ..._base._exceptions import UsageError
from ..._base._records import Checkpoint, ErrorInfo, Run
from ..._base._run_records import RunRecord, value_record
from ..._kernel._replay import ContinueAsNew as ContinueAsNew
from ..._stores._ops import CreateRun, Op, UpdateRun
from ..._stores._record_ops import PutRecord
from ..children._children import cancel_request

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry
    from ..._kernel._turn import Turn
    from ..._stores._base import Store

DEADLINE: Final = "deadline"
"""The kind of a run's whole-run deadline."""

CONTINUED_AS: Final = "continued"
"""The kind of a run's forward link to the generation it continued as."""

CONTINUED_FROM: Final = "continued_from"
"""The kind of a generation's backward link to the one it continues."""

TIMEOUT_CODE: Final = "timeout"
"""The error code of a run cancelled because its deadline passed."""

_CANCEL_WITH_PARENT: Final = "cancel_with_parent"


# -- continue-as-new ------------------------------------------------------------------


def generation(records: dict[str, RunRecord], run_id: str) -> tuple[str, int]:
    """The chain's root id and this run's generation number (1 for a run
    that continues no other)."""
    link = records.get(CONTINUED_FROM)
    if link is None or link.input is None:
        return run_id, 1
    data = json.loads(link.input)
    return str(data["root"]), int(data["generation"])


async def continue_run(turn: Turn, cont: ContinueAsNew) -> None:
    """End the turn's run ``completed`` and create its next generation with
    ``cont``'s inputs, in one write."""
    rt, state = turn.runtime, turn.state
    run = state.run
    root, number = generation(state.records, run.id)
    next_id = f"{root}.gen.{number + 1}"
    if await rt.store.get_run(next_id) is not None:
        error = ErrorInfo(
            message=f"cannot continue as new: run id {next_id!r} is taken",
            code="continue_as_new_conflict",
        )
        await turn.end("failed", error=error)
        return
    now = rt.clock.now()
    # The new generation settles what this one would have: an awaiting
    # parent's checkpoint, so a parent sees the chain's final outcome.
    following = Run(
        id=next_id,
        workflow=run.workflow,
        version=run.version,
        namespace=run.namespace,
        input=cont.input_json,
        tags=run.tags,
        parent_id=run.parent_id,
        parent_seq=run.parent_seq,
        created_at=now,
        updated_at=now,
        # The chain is one logical run: it keeps being found by them.
        search_attributes=run.search_attributes,
    )
    links: list[Op] = [
        PutRecord(
            value_record(run.id, CONTINUED_AS, json.dumps(next_id), now, input=cont.input_json)
        ),
        CreateRun(following),
        PutRecord(
            value_record(
                next_id,
                CONTINUED_FROM,
                json.dumps(run.id),
                now,
                input=json.dumps({"root": root, "generation": number + 1}),
            )
        ),
    ]
    deadline = state.records.get(DEADLINE)
    if deadline is not None and deadline.status == "pending":
        # A whole-run timeout bounds the whole chain.
        links.append(PutRecord(attrs.evolve(deadline, run_id=next_id)))
    # This generation settles no parent: its last generation does.
    state.run = attrs.evolve(run, parent_id=None, parent_seq=None)
    # Written with the end only: a cancel that landed during the turn
    # cancels this generation, and no next one is created.
    state.end_ops.extend(links)
    await turn.end("completed", output=None)
    created = await rt.store.get_run(next_id)
    if created is not None and created.status == "pending":
        rt.telemetry.emit_run("run.started", created)
        rt.scheduler.wake(next_id)


async def continued_to(store: Store, run: Run) -> str | None:
    """The id of the generation ``run`` continued as, or None."""
    if run.status != "completed" or run.output is not None:
        # A run that returned None has the output "null".
        return None
    for record in await store.get_records(run.id):
        if record.kind == CONTINUED_AS and record.output is not None:
            following: str = json.loads(record.output)
            return following
    return None


async def latest_generation(store: Store, run: Run) -> Run:
    """The last generation of the chain ``run`` belongs to (``run`` itself
    if it did not continue)."""
    while (following := await continued_to(store, run)) is not None:
        found = await store.get_run(following)
        if found is None:
            break
        run = found
    return run


# -- the whole-run deadline ---------------------------------------------------------


def check_timeout(timeout: float | None) -> float | None:
    """``timeout`` as given to ``start``, checked.

    Raises:
      UsageError: It is not a positive, finite number of seconds.
    """
    if timeout is None:
        return None
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not is_finite(timeout)
        or timeout <= 0
    ):
        raise UsageError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def workflow_timeout(app: Registry | None, workflow: str, version: str) -> float | None:
    """The timeout ``@app.workflow(timeout=)`` gave the workflow, if ``app``
    has it (for `LATEST_VERSION`, the version registered last, which the
    run's first turn pins)."""
    wf = None if app is None else app.find_workflow(workflow, version)
    return None if wf is None else wf.controls.timeout


def deadline_record(run: Run, timeout: float) -> RunRecord:
    """``run``'s deadline, ``timeout`` seconds after its creation."""
    return RunRecord(
        run_id=run.id,
        kind=DEADLINE,
        status="pending",
        input=json.dumps({"timeout": timeout}),
        wake_at=run.created_at + timeout,
        enqueued_at=run.created_at,
    )


def deadline_ops(run: Run, timeout: float | None) -> list[Op]:
    """What a start writes with ``run`` for its deadline (nothing without
    a timeout)."""
    return [PutRecord(record) for record in deadlines(run, timeout)]


def deadlines(run: Run, timeout: float | None) -> tuple[RunRecord, ...]:
    """``run``'s deadline record, if it has a ``timeout``."""
    return () if timeout is None else (deadline_record(run, timeout),)


def _pending_deadline(records: dict[str, RunRecord]) -> float | None:
    found = records.get(DEADLINE)
    if found is None or found.status != "pending" or found.wake_at is None:
        return None
    return found.wake_at


def check_deadline(turn: Turn, now: float) -> Run:
    """A turn's first look at its run's deadline: record a deadline its
    creator could not (its workflow's timeout), and make the run
    ``cancelling`` with compensation if the deadline passed. Returns the
    run as the turn now takes it."""
    rt, state = turn.runtime, turn.state
    run = state.run
    if run.status == "cancelling":
        return run
    if DEADLINE not in state.records:
        timeout = workflow_timeout(rt.app, run.workflow, run.version)
        if timeout is None:
            return run
        state.put_record(deadline_record(run, timeout))
    deadline = _pending_deadline(state.records)
    if deadline is None or deadline > now:
        return run
    fired = state.records[DEADLINE]
    state.put_record(attrs.evolve(fired, status="completed", finished_at=now))
    state.ops.append(
        UpdateRun(
            run.id,
            {"status": "cancelling", "compensate": True, "updated_at": now},
            expect_owner=rt.engine_id,
        )
    )
    state.run = attrs.evolve(run, status="cancelling", compensate=True)
    return state.run


def wake_by_deadline(records: dict[str, RunRecord], wake_at: float | None) -> float | None:
    """When a suspending run is due: at ``wake_at``, or its pending
    deadline if that comes first."""
    deadline = _pending_deadline(records)
    if deadline is None:
        return wake_at
    return deadline if wake_at is None else min(wake_at, deadline)


def body_deadline(records: dict[str, RunRecord], now: float) -> float:
    """The Trio deadline that cuts a body's turn short at the run's
    deadline (inf without one)."""
    deadline = _pending_deadline(records)
    if deadline is None:
        return math.inf
    return trio.current_time() + max(0.0, deadline - now)


def cancel_error(records: dict[str, RunRecord]) -> ErrorInfo:
    """The error a cancelled run ends with: ``timeout`` if its deadline
    fired, else ``cancelled``."""
    found = records.get(DEADLINE)
    if found is not None and found.status == "completed":
        timeout = json.loads(found.input or "{}").get("timeout")
        return ErrorInfo(
            message=f"the run's deadline passed ({timeout} s after it started)",
            code=TIMEOUT_CODE,
            details={"timeout": timeout},
        )
    return ErrorInfo(message="cancelled", code="cancelled")


# -- children cancelled with their parent ---------------------------------------------


def started_output(child_id: str, cancel_with_parent: bool) -> str:
    """The output of a started child's checkpoint: its id, or, for a child
    cancelled with its parent, ``{"id": ..., "cancel_with_parent": true}``."""
    if not cancel_with_parent:
        return json.dumps(child_id)
    return json.dumps({"id": child_id, _CANCEL_WITH_PARENT: True})


def _cancels_with_parent(cp: Checkpoint) -> bool:
    if cp.kind != "child" or cp.status != "completed" or not cp.output:
        return False
    data: Any = json.loads(cp.output)
    return isinstance(data, dict) and data.get(_CANCEL_WITH_PARENT) is True


async def cancel_linked(turn: Turn) -> None:
    """Add to a cancelled run's last turn the cancels of the children it
    started with ``cancel_with_parent=True`` (their latest generation, if
    they continued as new), with the run's own compensate choice."""
    rt, state = turn.runtime, turn.state
    run = state.run
    now = rt.clock.now()
    for cp in sorted(state.checkpoints.values(), key=lambda cp: cp.seq):
        if cp.child_id is None or not _cancels_with_parent(cp):
            continue
        child = await rt.store.get_run(cp.child_id)
        if child is None:
            continue
        child = await latest_generation(rt.store, child)
        if child.done:
            continue
        state.ops.append(cancel_request(child.id, run.compensate, now))
        state.wake_after.append(child.id)
        state.cancelled_children.append(child.id)
