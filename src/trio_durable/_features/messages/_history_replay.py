"""Replay tests: a workflow's body replayed against a run's exported
history, in this process, with no store and no broker, to tell before a
deploy whether the new code still fits the runs in flight.

The body replays as an engine's turn would replay it (patches, argument
checks and the kind and name checks at each seq are the engine's own), on
a `Replay` whose decider is a replay test's (`AgainstHistory`): an
operation the history settled replays; at the first one it did not, a run
still open stands (the test ends there), while a run that ended
(``completed`` or ``failed``) had no more operations, so code that asks
for one does not fit. A run that ended must also end the same way: return
what the run's output holds, or raise the error it failed with.

What does not fit is raised as `NonDeterminismError` with a report for
people: the seq, what the history recorded there (kind, name, a digest of
its arguments), what the code asks for, and where in the user's code it
asked (its file and line). See docs/changing-workflow-code.md.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._base import _serde
from ..._base._exceptions import NonDeterminismError, SerializationError, UsageError
from ..._base._failures import error_info
from ..._base._frames import user_frame
from ..._base._records import Checkpoint, CheckpointKind, Run
from ..._kernel._definitions import remote_body
from ..._kernel._markers import body_seqs
from ..._kernel._replay import Decider, Replay, Suspend
from ..determinism._argument_check import digest, recorded_arguments
from ._read_replay import BodyEnd, replay_body

if TYPE_CHECKING:
    from ..._base._clock import Clock
    from ..._kernel._definitions import Registry, Workflow
    from ..._wire._histories import History

_SETTLED: Final = frozenset({"completed", "failed"})
_ENDED: Final = frozenset({"completed", "failed"})
"""The statuses of a run whose body ended: its history is whole, and the
code must end it the same way."""


@final
class AgainstHistory(Decider):
    """A replay test's `Decider`: an operation the history settled replays;
    at one it did not, the body stops where a run still open stands, and
    code that asks for an operation past the end of a run that ended does
    not fit; a value the body emits is dropped."""

    __slots__ = ()

    def check(self, replay: Replay, seq: int, name: str, kind: CheckpointKind) -> None:
        turn = replay.turn
        cp = turn.checkpoints.get(seq)
        if cp is not None and cp.status in _SETTLED:
            return
        if cp is None and turn.run.status in _ENDED:
            error = NonDeterminismError(
                f"at seq {seq} the run's history ends ({turn.run.status}),"
                f" but the workflow now asks for {kind} {name!r}",
                details={
                    "seq": seq,
                    "recorded": None,
                    "requested": name,
                    "recorded_kind": None,
                    "requested_kind": kind,
                },
            )
            turn.nondeterminism = error
            raise error
        raise Suspend("replay test")

    def carry_value(self, offset: int, value_json: str) -> bool:
        return True


@final
@attrs.define(frozen=True, kw_only=True)
class Replayed:
    """What a replay test that passed found.

    Attributes:
      run_id: The run's id.
      seq: The last seq the body replayed.
      ended: Whether the body ended as the run did (else it stands where
        the open run stands).
    """

    run_id: str
    seq: int
    ended: bool


def workflow_to_replay(app: Registry, run: Run) -> Workflow[..., Any]:
    """The workflow ``app`` runs ``run`` with, its body here.

    Raises:
      UnknownWorkflowError: ``app`` lacks the run's workflow (or version).
      UsageError: The app holds only the name of a remote workflow, whose
        body its workers' app holds.
    """
    wf = app.find_workflow(run.workflow, run.version)
    if wf is None:
        wf = app.get_workflow(run.workflow, run.version)  # raises UnknownWorkflowError
    if wf.fn is remote_body:
        raise UsageError(
            f"workflow {run.workflow!r} is decided on workers, and this app does not hold its"
            " body: replay its histories with the workers' app"
        )
    return wf


async def replay_against(
    app: Registry, clock: Clock, history: History, source: str = "history"
) -> Replayed:
    """Replay ``history``'s run with the body ``app`` holds for it.

    Args:
      source: What to call the history in a report (its file).

    Raises:
      NonDeterminismError: The code does not fit the history (the report
        is its message, the details its parts).
      UnknownWorkflowError: ``app`` lacks the run's workflow.
      UsageError: The app does not hold a remote workflow's body.
    """
    run = history.run
    wf = workflow_to_replay(app, run)
    end = await replay_body(
        app, clock, 0, wf, run, history.checkpoints, history.records, AgainstHistory()
    )
    turn = end.replay.turn
    seq = end.replay.peek() - 1
    if turn.nondeterminism is not None:
        raise _report(source, history, wf, turn.nondeterminism)
    last = max(body_seqs(turn.checkpoints), default=0)
    differs = None if end.how == "stopped" else _end_differs(run, end, seq, last)
    if differs is not None:
        error = NonDeterminismError(
            differs, details={"seq": seq, "recorded": run.status, "requested": end.how}
        )
        error.__traceback__ = end.value.__traceback__ if end.how == "raised" else None
        raise _report(source, history, wf, error, at_end=True)
    return Replayed(run_id=run.id, seq=seq, ended=end.how != "stopped")


def _end_differs(run: Run, end: BodyEnd, seq: int, last: int) -> str | None:
    """How the body's end, after ``seq``, differs from the run's, whose
    history goes on to ``last``; None if it does not (or the run has not
    ended, and the body ends where it stands: the run may yet end so)."""
    if end.how == "raised":
        now = f"raises {_raised(end.value)}"
    elif end.how == "continued":
        now = "continues as new"
    else:
        now = "returns"
    if seq < last:
        return f"the code now {now} after seq {seq}, but the run went on to seq {last}"
    if run.status not in _ENDED:
        return None
    if end.how == "continued":
        if run.status == "completed" and run.output is None:
            return None
    elif end.how == "raised":
        info, recorded = error_info(end.value), run.error
        if (
            run.status == "failed"
            and recorded is not None
            and (info.code, info.message) == (recorded.code, recorded.message)
        ):
            return None
    elif run.status == "completed" and run.output is not None:
        try:
            output = _serde.dumps(end.value)
        except SerializationError as exc:
            return f"the run {_ended(run)}, but the code now returns what cannot be saved: {exc}"
        if json.loads(output) == json.loads(run.output):
            return None
        now = f"returns {_shown(output)}"
    return f"the run {_ended(run)}, but the code now {now}"


def _ended(run: Run) -> str:
    if run.status == "completed":
        if run.output is None:
            return "continued as new"
        return f"completed with {_shown(run.output)}"
    error = run.error
    if error is None:
        return str(run.status)
    code = "" if error.code is None else f" ({error.code})"
    return f"failed with {_shown(error.message)}{code}"


def _raised(exc: BaseException) -> str:
    info = error_info(exc)
    code = "" if info.code is None else f" ({info.code})"
    return f"{type(exc).__name__} {_shown(info.message)}{code}"


def _shown(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _report(
    source: str,
    history: History,
    wf: Workflow[..., Any],
    error: NonDeterminismError,
    *,
    at_end: bool = False,
) -> NonDeterminismError:
    """``error`` as a replay test reports it: a readable message whose
    lines say the seq, what the history recorded and what the code asks
    for, and where."""
    run = history.run
    details = dict(error.details) if isinstance(error.details, dict) else {}
    seq = details.get("seq")
    where = user_frame(error.__traceback__)
    if where is None:
        code = wf.fn.__code__
        where = f"{code.co_filename}:{code.co_firstlineno} in {code.co_name}"
    lines = [
        f"{source}: run {run.id!r} (workflow {run.workflow!r} version {run.version!r},"
        f" {run.status}) does not replay against this code:"
    ]
    if at_end:
        lines += [f"  at its end, after seq {seq}: {error.message}"]
    else:
        recorded = history_checkpoint(history, seq)
        recorded_digest = details.get("recorded_arguments")
        if recorded is not None:
            if not isinstance(recorded_digest, str):
                recorded_digest = digest(recorded_arguments(recorded))
            said = f"{recorded.kind} {recorded.name!r} (arguments digest {recorded_digest[:16]})"
        else:
            said = "nothing (the history ends before it)"
        asked = f"{details.get('requested_kind', '')} {details.get('requested')!r}".strip()
        requested_digest = details.get("requested_arguments")
        if isinstance(requested_digest, str):
            asked += f" (arguments digest {requested_digest[:16]})"
        lines += [
            f"  at seq {seq}",
            f"  the history recorded: {said}",
            f"  the code asks for:    {asked}",
        ]
        details["recorded_arguments"] = recorded_digest
    lines.append(f"  asked at:             {where}")
    details.update(run_id=run.id, workflow=run.workflow, source=source, asked_at=where)
    report = NonDeterminismError("\n".join(lines), details=details)
    report.__cause__ = error
    return report


def history_checkpoint(history: History, seq: object) -> Checkpoint | None:
    """The checkpoint ``history`` holds at ``seq``, or None."""
    return next((cp for cp in history.checkpoints if cp.seq == seq), None)
