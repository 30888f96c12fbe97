"""A remote workflow's turn on the engine: send a decision task, apply the
decision (docs/remote-workflows.md).

The run's decision record (`_decision_record`) says where the run stands:

- missing, or ``completed`` without output: no decision is out. The turn
  fires the timers that are due, records it ``pending`` (its
  ``attempts`` numbers the decision tasks), and sends the task once that
  write committed, carrying the run's history;
- ``pending``: a task is out. The run waits, unless the task is lost (it
  went out on a broker that kept nothing across its process, or counts as
  lost by ``remote_redispatch``: see `out_verdict`), its send was refused
  and its retry is due, or the run was retried: then it is sent again as a
  new attempt;
- ``completed`` with output: a decision came back. Whichever engine's
  result consumer got it settled the record by a claim that needs it
  pending at the task's attempt, so a duplicate or stale decision changed
  nothing. The turn applies it: the local steps' checkpoints, then the
  body's end, or the one durable operation it waits on, carried out by the
  same code a local body's turn runs. An operation that resolves at once
  (a signal already buffered, a child started, a due timer) is settled
  now, and the next decision task goes out in the same write;
- ``failed``: no worker could decide (it lacks the workflow, or the task
  was too large to send): the run fails with that error.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._base._exceptions import StoreError, UnknownWorkflowError
from .._base._failures import error_info
from .._base._on_error import (
    active_handoff,
)
from .._base._records import (
    DEFAULT_NAMESPACE,
    LATEST_VERSION,
    Checkpoint,
    ErrorInfo,
    Mark,
    Run,
)
from .._base._run_records import RunRecord
from .._stores._ops import QUEUED, UpdateRun
from .._stores._record_ops import ClaimRecord, SettleRecord
from .._wire._decision_commands import Command
from .._wire._decision_wire import Decision, Eager, history, request_input
from .._wire._messages import Task, WireError
from .._wire._wire_records import DECISION_ON_WIRE, is_record_on_wire, record_off_wire
from ._builds import run_build
from ._cancellation import cancel_marker, in_cleanup
from ._carrier import BLOCKED, CONTINUED, REDISPATCHED, RESEND, out_verdict, sent_now
from ._decider import eager_events
from ._decision_record import DECISION, decided, decision_of
from ._definitions import Workflow, remote_body
from ._executions import new_execution
from ._hooks import Inbox
from ._markers import body_seqs
from ._replay import ContinueAsNew, Replay, Suspend, TurnDraft
from ._webhook_keys import derive_token

if TYPE_CHECKING:
    from ._runtime import Runtime
    from ._turn import Turn

logger = logging.getLogger("trio_durable")

_SETTLED: Final = frozenset({"completed", "failed"})


async def decision_route(rt: Runtime, run: Run) -> str | None:
    """The group route whose workers decide ``run``'s turns, or None if the
    run's body runs here (or nothing here or in the fleet knows it)."""
    app = rt.app
    wf: Workflow[..., Any] | None
    if app.has_workflow(run.workflow, run.version):
        # The common case, a body registered here: one lookup per turn.
        wf = app.get_workflow(run.workflow, run.version)
    else:
        try:
            latest: Workflow[..., Any] | None = app.get_workflow(run.workflow)
        except UnknownWorkflowError:
            latest = None
        # A declaration by name stands for every version the workers have.
        remote = latest is not None and latest.fn is remote_body
        wf = latest if run.version == LATEST_VERSION or remote else None
    if wf is not None and not wf.remote:
        return None
    group = None if wf is None else wf.group
    if group is None:
        route = await rt.catalogue.served(run.workflow, run.version, run.namespace)
        if route is None and wf is None:
            # A run nothing here knows (started by a client, by name) backs
            # off for a minute: what was read may predate the workers that
            # announce its workflow now, so read afresh first.
            rt.catalogue.invalidate()
            route = await rt.catalogue.served(run.workflow, run.version, run.namespace)
        if route is not None or wf is None:
            return route
        group = wf.decision_group
    return group if run.namespace == DEFAULT_NAMESPACE else f"{group}@{run.namespace}"


async def remote_turn(turn: Turn, route: str, now: float) -> None:
    """Take a remote workflow's run on from where its decision stands."""
    rt, state = turn.runtime, turn.state
    # Made due: an update may have been accepted while it waited (see
    # `_decision_updates`). Only a body with update handlers registered
    # where it waits can have one (the caller's validation replayed it
    # there), so only its inbox is read.
    made_due = state.run.wake_at is not None and state.run.wake_at <= now
    marker = decision_of(state.records)
    handlers = marker is None or _handles_updates(marker)
    if marker is not None and marker.status == "pending":
        due = _due(rt, marker, now)
        if not isinstance(due, ErrorInfo) and due is not True:
            await turn.suspend(_waiting(state.run, due))
            return
        policy = rt.options.remote_redispatch
        redispatches = sum(1 for e in marker.errors if e.code == REDISPATCHED)
        if isinstance(due, ErrorInfo) and due.code == REDISPATCHED:
            assert policy is not None
            if redispatches >= policy[1]:
                error = ErrorInfo(
                    message=f"no decision after {redispatches + 1} decision tasks", code="lost"
                )
                state.ops.append(SettleRecord(state.run.id, DECISION, "failed", None, error, now))
                await turn.end("failed", error=error)
                return
        inbox = await rt.features.inbox(rt, state.run.id)
        lost = due if isinstance(due, ErrorInfo) else None
        await _dispatch(turn, route, marker, now, lost, updates=inbox, stood_due=made_due)
        return
    if marker is not None and marker.status == "failed":
        error = marker.error or ErrorInfo(message="no worker could decide the run's turn")
        await turn.end("failed", error=error)
        return
    if marker is not None and marker.output is not None:
        applied = attrs.evolve(marker, output=None, input=None)
        state.put_record(applied)
        try:
            decision = Decision.decode(marker.output, state.run.id)
        except WireError as exc:
            await turn.end("failed", error=ErrorInfo(message=str(exc), code="bad_decision"))
            return
        kind, value = await _apply(turn, decision)
        handlers = bool(decision.update_handlers)
        if kind == "suspended":
            assert decision.next is not None
            waits = _waits(state.checkpoints, decision.next, decision.update_handlers)
            applied = attrs.evolve(applied, input=waits)
            state.put_record(applied)
            if decision.update_handlers:
                inbox = await rt.features.inbox(rt, state.run.id)
                if _arrived_meanwhile(inbox, decision):
                    # Accepted while the task was out: the body applies
                    # them where it waits, in the next decision.
                    await _dispatch(turn, route, applied, now, None, updates=inbox)
                    return
            await turn.suspend(value)
            return
        if kind == "completed":
            await turn.end("completed", output=value)
            return
        if kind == "failed":
            await fail_remote(turn, value)
            return
        if kind == "continued":
            await turn.runtime.features.continue_run(turn, value)
            return
    elif marker is not None and marker.input is not None:
        wake_at = _unchanged(rt, state.checkpoints, marker.input, now)
        inbox = await rt.features.inbox(rt, state.run.id) if made_due and handlers else []
        if wake_at is not False and not inbox:
            # Woken, but nothing the body waits on moved (and no update
            # came): asking a worker again would bring back the same command.
            first, last = json.loads(marker.input)["waits"]
            await turn.suspend(Suspend("unchanged", wake_at, watch=(first, last)))
            return
        await _dispatch(turn, route, marker, now, None, updates=inbox, stood_due=made_due)
        return
    inbox = await rt.features.inbox(rt, state.run.id) if made_due and handlers else []
    await _dispatch(turn, route, marker, now, None, updates=inbox, stood_due=made_due)


def _waiting(run: Run, wake_at: float | None) -> Suspend:
    """The suspend of ``run`` until its decision task's answer (or
    ``wake_at``)."""
    return Suspend("decision", wake_at, recheck=partial(decided, run_id=run.id))


def _handles_updates(marker: RunRecord) -> bool:
    """Whether the body had update handlers registered where its last
    applied decision left it (it says so in the input an applied decision
    leaves on the record)."""
    if marker.status != "completed" or marker.input is None:
        return False
    return bool(json.loads(marker.input).get("handlers"))


def _due(rt: Runtime, marker: RunRecord, now: float) -> ErrorInfo | float | bool | None:
    """What a pending decision record waits for: True if its task is
    to be sent again now (a send the broker refused, or a retry); the
    reason to send it again if its attempt that is out was lost (see
    `out_verdict`); else when to look again (None: only its answer)."""
    if marker.started_at is None:
        if marker.wake_at is not None and marker.wake_at > now:
            return marker.wake_at
        return True
    return out_verdict(rt, marker, now)


def _command_seqs(command: Command) -> range:
    count = len(json.loads(command.args["inputs"])) if command.op == "fan" else 1
    return range(command.seq, command.seq + count)


def _waits(
    checkpoints: dict[int, Checkpoint], command: Command, handlers: Sequence[str] = ()
) -> str:
    """What an applied decision's body waits on, kept on the decision
    record: the command's seqs and how many of them were settled (and
    the update handlers the body had registered, if any)."""
    seqs = _command_seqs(command)
    settled = sum(
        1 for seq in seqs if (cp := checkpoints.get(seq)) is not None and cp.status in _SETTLED
    )
    waits: dict[str, Any] = {"waits": [seqs[0], seqs[-1]], "settled": settled}
    if handlers:
        waits["handlers"] = list(handlers)
    return json.dumps(waits)


def _unchanged(
    rt: Runtime, checkpoints: dict[int, Checkpoint], waits: str, now: float
) -> float | bool | None:
    """When a run woken with nothing changed for its body is due next (None
    for no due time); False if something did change, or is due: a settled
    operation, a due time passed (a timer, a retry's backoff, a lost step),
    a step continued past its breakpoint, waiting in a queue or let in (an
    attempt not yet sent), or a step out whose attempt is to be sent again
    (carrying the command out again sends it)."""
    data = json.loads(waits)
    first, last = data["waits"]
    settled = 0
    due: list[float] = []
    for seq in range(first, last + 1):
        cp = checkpoints.get(seq)
        if cp is None:
            continue
        if cp.status in _SETTLED:
            settled += 1
            continue
        if cp.mark is not None and cp.mark.code in (CONTINUED, QUEUED, RESEND):
            return False
        if cp.kind == "remote" and cp.started_at is not None:
            verdict = out_verdict(rt, cp, now)
            if isinstance(verdict, ErrorInfo):
                return False
            if verdict is not None:
                due.append(verdict)
            continue
        if cp.kind == "remote" and cp.started_at is None and cp.wake_at is None:
            # An attempt to send now: let into its queue by another's
            # release.
            return False
        if cp.wake_at is not None:
            if cp.wake_at <= now:
                return False
            due.append(cp.wake_at)
    if settled != data["settled"]:
        return False
    return min(due, default=None)


async def cancel_remote(turn: Turn, route: str, now: float) -> bool:
    """For a remote workflow's run being cancelled: have a worker replay
    its body to deliver `Cancelled` and run its cleanup (see
    `_cancellation`), and, with compensation, the undos of its completed
    steps (local steps, which only the workers hold). What the cleanup
    waits on is carried out here as in any turn, and the run waits
    ``suspended``. Returns False once the worker is done (or nothing is
    left for one): the cancel then ends the run as for a local body."""
    rt, state = turn.runtime, turn.state
    run = state.run
    cleanup = bool(body_seqs(state.checkpoints)) and active_handoff(state.checkpoints) is None
    marker = decision_of(state.records)
    if marker is not None and marker.status == "pending":
        if not cleanup and not _undos_left(state.checkpoints, run.compensate):
            return False
        due = _due(rt, marker, now)
        if not isinstance(due, ErrorInfo) and due is not True:
            await _wait_cancelling(turn, due)
            return True
        lost = due if isinstance(due, ErrorInfo) else None
        await _dispatch(turn, route, marker, now, lost, compensate=run.compensate, cleanup=cleanup)
        return True
    if marker is not None and marker.status == "completed" and marker.output is not None:
        applied = attrs.evolve(marker, output=None, input=None)
        state.put_record(applied)
        try:
            decision = Decision.decode(marker.output, run.id)
        except WireError:
            decision = None
        if decision is not None and decision.cancelled:
            if decision.next is None:
                _keep_local(rt, state, decision)
                if decision.stream:
                    rt.features.decided(Replay.on_engine(rt, state), decision, cancelled=True)
                return False  # the cleanup and the undos are over
            kind, value = await _apply(turn, decision)
            if kind == "suspended":
                state.put_record(
                    attrs.evolve(applied, input=_waits(state.checkpoints, decision.next))
                )
                await turn.suspend(value, cleanup=True)
                return True
            if kind == "failed":
                # The command the cleanup waits on could not be carried out:
                # the cleanup ends there.
                return False
        elif decision is not None:
            # A turn of the body that was out when the cancel came: what
            # the worker ran did run, so it is recorded (undos cover it).
            _keep_local(rt, state, decision)
            if decision.stream:
                rt.features.decided(Replay.on_engine(rt, state), decision, cancelled=True)
    if not cleanup and not _undos_left(state.checkpoints, run.compensate):
        return False
    await _dispatch(turn, route, marker, now, None, compensate=run.compensate, cleanup=cleanup)
    return True


def _keep_local(rt: Runtime, state: TurnDraft, decision: Decision) -> None:
    """Record the local steps a worker ran, and the remote steps it ran at
    once (emitting their events), and the records its body wrote (the seq
    a cancelled body got `Cancelled` at, where its argument check
    began)."""
    for cp in decision.local:
        if is_record_on_wire(cp):
            record = record_off_wire(cp)
            if record.kind not in state.records:
                state.put_record(record)
            continue
        existing = state.checkpoints.get(cp.seq)
        if existing is None or existing.status not in _SETTLED:
            state.put(cp)
            if cp.kind == "remote" and existing is None:
                events = Replay.on_engine(rt, state)
                for kind, data in eager_events(cp, decision.worker):
                    events.emit(kind, cp.seq, cp.name, **data)


def _undos_left(checkpoints: dict[int, Checkpoint], compensate: bool) -> bool:
    """Whether a cancel with ``compensate`` has completed steps to undo."""
    if not compensate:
        return False
    undone = {-cp.seq for cp in checkpoints.values() if cp.seq < 0}
    return any(
        cp.seq > 0 and cp.compensation and cp.status == "completed" and cp.seq not in undone
        for cp in checkpoints.values()
    )


async def _wait_cancelling(turn: Turn, wake_at: float | None) -> None:
    """Suspend a remote workflow's cancelling run until its worker answers,
    with the record that keeps it being cancelled (see `in_cleanup`)."""
    state = turn.state
    if not in_cleanup(state.records):
        state.put_record(cancel_marker(state.run.id, turn.runtime.clock.now()))
    await turn.suspend(_waiting(state.run, wake_at), cleanup=True)


async def _dispatch(
    turn: Turn,
    route: str,
    marker: RunRecord | None,
    now: float,
    lost: ErrorInfo | None,
    *,
    compensate: bool = False,
    cleanup: bool = False,
    updates: Inbox | None = None,
    stood_due: bool = False,
) -> None:
    """Send the run's next decision task (once this turn's writes commit)
    and suspend the run until its decision comes back; with ``compensate``
    or ``cleanup``, the task of a cancelled run (see `cancel_remote`).
    With a ``marker`` still pending (a task lost, or one whose send the
    broker refused), the new task's record is a claim, and keeps the
    attempts' errors (``lost``, if given, added)."""
    rt, state = turn.runtime, turn.state
    run = state.run
    for cp in list(state.checkpoints.values()):
        # The history carries fired timers: a due one is settled here.
        if cp.kind == "timer" and cp.status == "pending" and (cp.wake_at or 0.0) <= now:
            state.put(attrs.evolve(cp, status="completed", finished_at=now))
    tokens: dict[int, str] = {}
    webhooks = [cp for cp in state.checkpoints.values() if cp.kind == "webhook"]
    if webhooks:
        secret = await rt.webhook_keys.secret(rt.store)
        for cp in webhooks:
            tokens[cp.seq] = derive_token(secret, json.loads(cp.output or "{}")["nonce"])
    again = marker is not None and marker.status == "pending"
    errors = () if marker is None or not again else marker.errors
    if lost is not None:
        errors = (*errors, lost)
    build = run_build(state.records)
    gap = None if build is None else await rt.dispatcher.capability_gap(route, (), build)
    if gap is not None:
        await _park(turn, route, marker, errors, gap, now, cancelling=compensate or cleanup)
        return
    attempt = (0 if marker is None else marker.attempts) + 1
    new = sent_now(
        RunRecord(
            run_id=run.id,
            kind=DECISION,
            status="pending",
            attempts=attempt,
            group=route,
            errors=errors,
            enqueued_at=now,
        ),
        now,
        rt.dispatcher.carrier,
        rt.options.remote_redispatch,
        new_execution(rt.rng),
    )
    wake_at = new.wake_at
    if again:
        # A claim: a decision that settled the record meanwhile wins, and
        # then the task is not sent again.
        state.records[DECISION] = new
        state.ops.append(ClaimRecord(new))
    else:
        state.put_record(new)
    task = Task(
        run_id=run.id,
        seq=DECISION_ON_WIRE,
        attempt=attempt,
        step=run.workflow,
        workflow=run.workflow,
        route=route,
        input=request_input(
            run,
            history(state.checkpoints.values(), state.records.values()),
            tokens,
            compensate=compensate,
            cleanup=cleanup,
            updates=updates,
            stood_due=stood_due,
            eager=None if compensate or cleanup else await _eager(rt, run),
            several=True,
        ),
        dispatched_at=now,
        kind="decision",
        execution=new.executions[-1],
        build=build,
    )
    state.dispatch.append((len(state.ops) - 1, task))
    if compensate or cleanup:
        await _wait_cancelling(turn, wake_at)
    else:
        await turn.suspend(_waiting(run, wake_at))


async def _park(
    turn: Turn,
    route: str,
    marker: RunRecord | None,
    errors: tuple[ErrorInfo, ...],
    gap: str,
    now: float,
    *,
    cancelling: bool,
) -> None:
    """Keep the run's next decision task unsent while no live worker of
    its build serves ``route`` (``gap`` says so): its record waits
    ``pending``, marked `BLOCKED` with the reason, and is looked at again
    after ``blocked_recheck``, as a blocked step is. No attempt is
    counted: the next one is numbered as it is sent."""
    rt, state = turn.runtime, turn.state
    wake_at = now + rt.options.blocked_recheck
    parked = RunRecord(
        run_id=state.run.id,
        kind=DECISION,
        status="pending",
        attempts=0 if marker is None else marker.attempts,
        group=route,
        errors=errors,
        enqueued_at=now,
        wake_at=wake_at,
        mark=Mark(code=BLOCKED, message=gap),
    )
    if marker is not None and marker.status == "pending":
        # A claim, as a send again is: a decision that settled the record
        # meanwhile wins.
        state.records[DECISION] = parked
        state.ops.append(ClaimRecord(parked))
    else:
        state.put_record(parked)
    if cancelling:
        await _wait_cancelling(turn, wake_at)
    else:
        await turn.suspend(_waiting(state.run, wake_at))


async def _eager(rt: Runtime, run: Run) -> Eager:
    """What the worker deciding ``run``'s turn may run at once (see
    `_decider`): with ``remote_redispatch``, steps that end within half the
    lost deadline of the decision task; none a breakpoint stops."""
    policy = rt.options.remote_redispatch
    return Eager(
        budget=None if policy is None else policy[0] / 2,
        paused=await rt.features.paused_steps(rt.store, run.workflow),
    )


async def _apply(turn: Turn, decision: Decision) -> tuple[str, Any]:
    """Apply ``decision`` to the turn (the commands the body went past, in
    order, then its command or its end): ``("suspended", Suspend)``,
    ``("completed", output)``, ``("failed", ErrorInfo)``, or
    ``("resolved", None)`` when the operation it waits on resolved at once
    (the next decision task is due)."""
    rt, state = turn.runtime, turn.state
    run = state.run
    if run.version == LATEST_VERSION:
        # Pinned with this turn's writes: every later decision task asks
        # the workers for the same version.
        state.run = attrs.evolve(run, version=decision.version)
        state.ops.append(
            UpdateRun(run.id, {"version": decision.version}, expect_owner=rt.engine_id)
        )
    elif decision.version != run.version:
        message = f"a decision of version {decision.version!r} for a run of {run.version!r}"
        return "failed", ErrorInfo(message=message, code="bad_decision")
    _keep_local(rt, state, decision)
    if decision.stream or decision.updates or decision.update_log is not None:
        rt.features.decided(Replay.on_engine(rt, state), decision, cancelled=False)
    for command in decision.passed:
        kind, value = await _carry_out(rt, state, command)
        if kind == "suspended":
            message = (
                f"the decision's {command.op} at seq {command.seq} waits, but the body went past it"
            )
            return "failed", ErrorInfo(message=message, code="bad_decision")
        if kind == "failed":
            return kind, value
    if decision.output is not None:
        return "completed", decision.output
    if decision.error is not None:
        return "failed", decision.error
    if decision.continued is not None:
        return "continued", ContinueAsNew(decision.continued)
    assert decision.next is not None
    return await _carry_out(rt, state, decision.next)


async def _carry_out(rt: Runtime, state: TurnDraft, command: Command) -> tuple[str, Any]:
    """Carry ``command`` out in the turn with the code a local body's turn
    runs for it (`Features.carry_out`): ``("suspended", Suspend)``,
    ``("resolved", None)`` once its seqs are settled, or ``("failed",
    ErrorInfo)``."""
    replay = Replay.on_engine(rt, state)
    replay.handlers.skip_log()
    replay.seek(command.seq)
    failure: Exception | None = None
    try:
        await rt.features.carry_out(replay, command)
    except Suspend as suspend:
        return "suspended", suspend
    except StoreError:
        raise
    except Exception as exc:
        failure = exc
    if state.nondeterminism is not None:
        return "failed", error_info(state.nondeterminism)
    settled = [state.checkpoints.get(seq) for seq in _command_seqs(command)]
    if all(cp is not None and cp.status in _SETTLED for cp in settled):
        return "resolved", None
    # Nothing was recorded there: the workers would stop at the same point
    # again and again. The run fails with what went wrong instead.
    if failure is None:
        failure = RuntimeError(f"the decision's {command.op} at seq {command.seq} recorded nothing")
    return "failed", error_info(failure, traceback_limit=rt.options.traceback_limit)


async def fail_remote(turn: Turn, error: ErrorInfo) -> None:
    """A remote workflow's body failed (its undos ran on the worker): hand
    the run to the handler its routes pick (see `Feature.failed`), or end
    it as failed."""
    if await turn.runtime.features.failed(turn, None, error):
        return
    await turn.end("failed", error=error)


def _arrived_meanwhile(inbox: Inbox, decision: Decision) -> bool:
    """Whether ``inbox`` holds an update that the decision did not apply
    though the body registered its handler: it arrived while the task was
    out, and the next decision applies it."""
    applied = {update_id for update_id, _ in decision.updates}
    handlers = set(decision.update_handlers)
    return any(update_id not in applied and entry["name"] in handlers for update_id, entry in inbox)
