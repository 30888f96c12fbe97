"""What a decision task carries to a worker, and the decision that answers it.

A remote workflow's turn sends the worker a `Task` of kind ``decision``
(docs/remote-workflows.md). Its ``input`` is a one-element array holding the
run (`DecisionRequest`): its version, namespace, tags, arguments and its
resolved history, one checkpoint per entry, each as compact JSON text (so
the message nests no deeper than the wire allows, whatever the outputs
hold). On-error handoffs and the decision checkpoint itself are left out.

The worker answers with a `Result` of kind ``decision`` whose output is a
`Decision`: the local steps it ran (their checkpoints), the operations the
body went past without waiting (with a request that allows ``several``),
and either the one durable operation the body now waits on (a `Command`,
see `_decision_commands`) or the body's end.

Decoding is total both ways, as in `_wire`: a malformed request or decision
raises `WireError` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, final

import attrs

from .._base._records import Checkpoint, ErrorInfo, Mark, Run
from .._base._run_records import RunRecord
from ._decision_checks import (
    FAN_MODES,
    error_field,
    int_field,
    json_text,
    number_field,
    parse_json,
    reject,
    text_field,
)
from ._decision_commands import Command, command_from_json, passed_from_json
from ._messages import MAX_ATTEMPT, MAX_SEQ, WireError
from ._wire_records import BODY_SEQ_LIMIT, is_record_on_wire, record_off_wire, records_on_wire

_KINDS: Final = frozenset({"local", "remote", "timer", "signal", "child", "webhook"})
_STATUSES: Final = frozenset({"pending", "running", "completed", "failed"})


# -- checkpoints as JSON text --------------------------------------------------------


def checkpoint_text(cp: Checkpoint, **extra: Any) -> str:
    """``cp`` (without its run id) as compact JSON text."""
    data = attrs.asdict(cp, recurse=False)
    del data["run_id"]
    data["error"] = None if cp.error is None else cp.error.to_json()
    data["errors"] = [e.to_json() for e in cp.errors]
    data["mark"] = None if cp.mark is None else cp.mark.to_json()
    data.update(extra)
    return json.dumps(
        {k: v for k, v in data.items() if v is not None and v != []},
        separators=(",", ":"),
        allow_nan=False,
    )


def checkpoint_from_text(text: Any, run_id: str) -> tuple[Checkpoint, dict[str, Any]]:
    """The checkpoint ``text`` holds for ``run_id``, and the entry's data.

    Raises:
      WireError: It is not a valid checkpoint.
    """
    if not isinstance(text, str):
        reject("a checkpoint must be JSON text")
    data = parse_json(text, "a checkpoint")
    if not isinstance(data, dict):
        reject("a checkpoint must be a JSON object")
    kind = data.get("kind")
    status = data.get("status", "pending")
    if kind not in _KINDS:
        reject(f"a checkpoint's kind must be one of {sorted(_KINDS)}")
    if status not in _STATUSES:
        reject("a checkpoint's status is unknown")
    mode = data.get("parallel_mode")
    if mode is not None and mode not in FAN_MODES:
        reject("a checkpoint's parallel_mode is unknown")
    errors = data.get("errors", [])
    if not isinstance(errors, list):
        reject("a checkpoint's errors must be a list")
    for key in ("input", "output"):
        if data.get(key) is not None:
            json_text(data[key], f"a checkpoint's {key}")
    cp = Checkpoint(
        run_id=run_id,
        seq=int_field(data, "seq", -MAX_SEQ, MAX_SEQ),
        name=text_field(data, "name"),
        kind=kind,
        status=status,
        input=data.get("input"),
        output=data.get("output"),
        error=error_field(data.get("error")),
        errors=tuple(e for e in (error_field(x) for x in errors) if e is not None),
        attempts=int_field(data, "attempts", 0, MAX_ATTEMPT, optional=True) or 0,
        group=text_field(data, "group", optional=True),
        child_id=text_field(data, "child_id", optional=True),
        compensation=text_field(data, "compensation", optional=True),
        parallel_group=int_field(data, "parallel_group", 1, MAX_SEQ, optional=True),
        parallel_size=int_field(data, "parallel_size", 1, MAX_SEQ, optional=True),
        parallel_mode=mode,
        wake_at=number_field(data, "wake_at"),
        enqueued_at=number_field(data, "enqueued_at"),
        started_at=number_field(data, "started_at"),
        finished_at=number_field(data, "finished_at"),
        executions=_executions(data.get("executions", [])),
        mark=_mark(data.get("mark")),
    )
    return cp, data


def _mark(value: object) -> Mark | None:
    """A checkpoint's mark, as its entry holds it (None from an engine that
    kept marks in ``error``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("code"), str):
        reject("a checkpoint's mark must be an object with a code")
    return Mark.from_json(value)


def _executions(value: object) -> tuple[str, ...]:
    """A checkpoint's execution ids, as its entry lists them."""
    if not isinstance(value, list) or not all(isinstance(e, str) and e for e in value):
        reject("a checkpoint's executions must be a list of ids")
    return tuple(value)


# -- the request ----------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class DecisionRequest:
    """A run as a decision task carries it to a worker.

    Attributes:
      version: The workflow version the run is pinned to ("" if not yet).
      namespace: The run's namespace.
      tags: The run's tags.
      input: The run's arguments as JSON text.
      checkpoints: Its history, by seq.
      records: The run's records it carries (see `_wire_records`), by kind.
      tokens: The tokens of its webhooks, by seq (a worker cannot derive
        them: the secret is the engines').
      compensate: Whether the run is being cancelled with compensation:
        the worker runs the undos of its completed steps (after the
        body's cleanup, with ``cleanup``).
      cleanup: Whether the run is being cancelled and its body is replayed
        to get `Cancelled` at the first operation with no settled outcome
        (see `_cancellation`): the worker runs the cleanup the body does
        in ``ctx.shield()``, up to its end or to an operation that waits.
      created_at: When the run was created (what ``ctx.now()`` answers
        before the first operation, and part of ``ctx.random()``'s seed);
        0.0 from an engine that did not send it.
      updates: The updates waiting in the run's inbox, in the order they
        were accepted: ``(id, {"name", "args", "at"})``, for the body to
        apply where it waits (see `_decision_updates`).
      stood_due: Whether they were accepted while the run waited (it was
        made due): then the body applies them where it stood, before the
        operation it waited in returns, as in an engine's turn.
      eager: What the worker may run at once, if anything (see `_decider`):
        None from an engine that takes no step run so.
      several: Whether the engine carries out several commands of one
        decision (`Decision.passed`): False from an engine that does not.
    """

    version: str
    namespace: str
    tags: tuple[str, ...]
    input: str
    checkpoints: dict[int, Checkpoint]
    records: dict[str, RunRecord] = attrs.field(factory=dict)
    tokens: dict[int, str] = attrs.field(factory=dict)
    compensate: bool = False
    cleanup: bool = False
    created_at: float = 0.0
    updates: tuple[tuple[str, dict[str, Any]], ...] = ()
    stood_due: bool = False
    eager: Eager | None = None
    several: bool = False


@final
@attrs.frozen
class Eager:
    """What an engine lets the worker that decides a turn run at once: a
    remote step the body reaches, of a group that worker serves, instead of
    stopping the body there (see `_decider`).

    Attributes:
      budget: Seconds from the task's dispatch within which such a step
        must end, its timeout counted (the engine counts its decision task
        lost after twice that, with ``remote_redispatch``); None: no bound.
      paused: The steps a breakpoint stops the run's workflow before: never
        run so (the engine pauses the run there).
    """

    budget: float | None
    paused: frozenset[str] = frozenset()

    def to_json(self) -> dict[str, Any]:
        return {"budget": self.budget, "paused": sorted(self.paused)}


def _eager(value: object) -> Eager | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        reject("eager must be an object")
    paused = value.get("paused", [])
    if not isinstance(paused, list) or not all(isinstance(n, str) for n in paused):
        reject("eager's paused must be a list of names")
    budget = number_field(value, "budget", optional=True)
    if budget is not None and budget <= 0:
        reject("eager's budget must be positive")
    return Eager(budget=budget, paused=frozenset(paused))


def request_run(run_id: str, request: DecisionRequest, workflow: str, version: str) -> Run:
    """The run a decision (or query) task carries, as the worker replays it:
    of ``workflow`` at ``version``, the one the worker picked."""
    return Run(
        id=run_id,
        workflow=workflow,
        version=version,
        namespace=request.namespace,
        input=request.input,
        tags=request.tags,
        created_at=request.created_at,
    )


def request_input(
    run: Run,
    history: Iterable[Checkpoint],
    tokens: dict[int, str],
    *,
    compensate: bool = False,
    cleanup: bool = False,
    updates: list[tuple[str, dict[str, Any]]] | None = None,
    stood_due: bool = False,
    eager: Eager | None = None,
    several: bool = False,
) -> str:
    """A decision task's ``input``: ``run`` and its ``history`` (and the
    updates waiting in its inbox, and what its worker may run at once, if
    anything)."""
    entries = [
        checkpoint_text(cp, **({"token": tokens[cp.seq]} if cp.seq in tokens else {}))
        for cp in history
    ]
    body = {
        "version": run.version,
        "namespace": run.namespace,
        "tags": list(run.tags),
        "input": run.input,
        "history": entries,
        "compensate": compensate,
        "created_at": run.created_at,
    }
    if cleanup:
        body["cleanup"] = True
    if updates:
        body["updates"] = [[update_id, entry] for update_id, entry in updates]
        body["stood_due"] = stood_due
    if eager is not None:
        body["eager"] = eager.to_json()
    if several:
        body["several"] = True
    return json.dumps([body], separators=(",", ":"), allow_nan=False)


def read_request(run_id: str, input_json: str) -> DecisionRequest:
    """The run a decision task's ``input`` carries.

    Raises:
      WireError: It is not a valid request.
    """
    try:
        outer = parse_json(input_json, "a decision task's input")
        if not isinstance(outer, list) or len(outer) != 1 or not isinstance(outer[0], dict):
            reject("a decision task's input must be an array of one object")
        data = outer[0]
        version = data.get("version", "")
        if not isinstance(version, str):
            reject("version must be a string")
        tags = data.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            reject("tags must be a list of strings")
        history = data.get("history", [])
        if not isinstance(history, list):
            reject("history must be a list")
        checkpoints: dict[int, Checkpoint] = {}
        records: dict[str, RunRecord] = {}
        tokens: dict[int, str] = {}
        for text in history:
            cp, entry = checkpoint_from_text(text, run_id)
            if is_record_on_wire(cp):
                record = record_off_wire(cp)
                records[record.kind] = record
                continue
            checkpoints[cp.seq] = cp
            if isinstance(entry.get("token"), str):
                tokens[cp.seq] = entry["token"]
        return DecisionRequest(
            version=version,
            namespace=text_field(data, "namespace"),
            tags=tuple(tags),
            input=json_text(data.get("input"), "input", array=True),
            checkpoints=checkpoints,
            records=records,
            tokens=tokens,
            compensate=data.get("compensate") is True,
            cleanup=data.get("cleanup") is True,
            created_at=_created_at(data.get("created_at", 0.0)),
            updates=_inbox(data.get("updates", [])),
            stood_due=data.get("stood_due") is True,
            eager=_eager(data.get("eager")),
            several=data.get("several") is True,
        )
    except WireError as exc:
        raise WireError(f"not a decision task: {exc}") from None
    except Exception as exc:
        raise WireError(f"not a decision task: {type(exc).__name__}: {exc}") from exc


def _inbox(value: object) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The updates a request carries: ``[[id, {"name", "args", "at"}], ...]``."""
    if not isinstance(value, list):
        reject("updates must be a list")
    found: list[tuple[str, dict[str, Any]]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], dict):
            reject("an update must be [id, entry]")
        update_id, entry = item
        if not isinstance(update_id, str) or not update_id:
            reject("an update's id must be a non-empty string")
        text_field(entry, "name")
        json_text(entry.get("args"), "an update's args", array=True)
        number_field(entry, "at", optional=False)
        found.append((update_id, entry))
    return tuple(found)


def _created_at(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        reject("created_at must be a number")
    return float(value)


# -- the decision ---------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Decision:
    """A worker's answer to a decision task.

    Attributes:
      version: The workflow version the worker replayed.
      local: The checkpoints of the local steps (and undos) it ran, and of
        the remote steps it ran at once (see `_decider`): settled, or
        pending with their next attempt due (a retryable failure).
      passed: The operations the body went past without waiting, in the
        order of their seqs (`_decision_commands.passes`), to be carried
        out before ``next`` or the body's end; only for a request with
        ``several``.
      next: The durable operation the body waits on, if it does.
      output: The body's return value as JSON text, if it completed.
      error: Its failure, if it failed.
      cancelled: Whether it answers a cancelled run's task (``cleanup`` or
        ``compensate``): ``next`` is then what the cleanup waits on, and
        ``error`` says the cleanup and the undos are over.
      continued: The arguments (JSON text) of the run's next generation,
        if the body called `Context.continue_as_new`.
      stream: The values the body emitted (`Context.emit`) past the
        stream's head the task carried: ``(offset, value as JSON text)``.
      updates: The outcomes of the updates of the request it applied:
        ``(id, outcome as JSON text)``, in order.
      update_log: The run's update log after them (its JSON text), if a
        handler ran.
      update_handlers: The names of the update handlers the body had
        registered where the decision ended.
      worker: The instance id of the worker that decided it, if it ran a
        remote step at once (for that step's events on the engine).
    """

    version: str
    local: tuple[Checkpoint, ...] = ()
    passed: tuple[Command, ...] = ()
    next: Command | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    cancelled: bool = False
    continued: str | None = None
    stream: tuple[tuple[int, str], ...] = ()
    updates: tuple[tuple[str, str], ...] = ()
    update_log: str | None = None
    update_handlers: tuple[str, ...] = ()
    worker: str | None = None

    @property
    def wire_version(self) -> int:
        """The envelope version of the result that carries it: 2 if it
        continues the run as new, carries emitted values, applied updates,
        remote steps run at once or several commands, or its command is
        newer (`Command.newer`), else 1, which engines of either version
        read."""
        newer = bool(self.passed) or (self.next is not None and self.next.newer)
        applied = bool(self.updates) or self.update_log is not None
        eager = any(cp.kind == "remote" for cp in self.local)
        return 2 if newer or self.continued is not None or self.stream or applied or eager else 1

    def encode(self) -> str:
        """As the JSON text of a `Result`'s output."""
        data: dict[str, Any] = {
            "version": self.version,
            "local": [checkpoint_text(cp) for cp in self.local],
        }
        if self.passed:
            data["passed"] = [command.to_json() for command in self.passed]
        if self.next is not None:
            data["next"] = self.next.to_json()
        if self.output is not None:
            data["output"] = self.output
        if self.error is not None:
            data["error"] = json.dumps(self.error.to_json(), separators=(",", ":"))
        if self.continued is not None:
            data["continued"] = self.continued
        if self.stream:
            data["stream"] = [[offset, value] for offset, value in self.stream]
        if self.updates:
            data["updates"] = [[update_id, outcome] for update_id, outcome in self.updates]
        if self.update_log is not None:
            data["update_log"] = self.update_log
        if self.update_handlers:
            data["update_handlers"] = list(self.update_handlers)
        if self.worker is not None:
            data["worker"] = self.worker
        if self.cancelled:
            data["cancelled"] = True
        return json.dumps(data, separators=(",", ":"), allow_nan=False)

    @classmethod
    def decode(cls, text: str, run_id: str) -> Decision:
        """The decision ``text`` holds for ``run_id``.

        Raises:
          WireError: It is not a valid decision.
        """
        try:
            data = parse_json(text, "a decision")
            if isinstance(data, str):
                # As a worker sends it: the result's output is the
                # decision's JSON text, as a JSON string.
                data = parse_json(data, "a decision")
            if not isinstance(data, dict):
                reject("a decision must be an object")
            version = data.get("version")
            if not isinstance(version, str) or not version:
                reject("version must be a non-empty string")
            local = data.get("local", [])
            if not isinstance(local, list):
                reject("local must be a list")
            checkpoints = tuple(checkpoint_from_text(text, run_id)[0] for text in local)
            for cp in checkpoints:
                if not _ran_here(cp):
                    reject("local holds only settled local steps and remote steps run at once")
            ends = [
                key for key in ("next", "output", "error", "continued") if data.get(key) is not None
            ]
            if len(ends) != 1:
                reject("a decision has exactly one of next, output, error and continued")
            error = None
            if data.get("error") is not None:
                error = error_field(parse_json(json_text(data["error"], "error"), "error"))
            next = None if data.get("next") is None else command_from_json(data["next"])
            return cls(
                version=version,
                local=checkpoints,
                passed=passed_from_json(
                    data.get("passed", []), BODY_SEQ_LIMIT if next is None else next.seq
                ),
                next=next,
                output=(
                    None if data.get("output") is None else json_text(data["output"], "output")
                ),
                error=error,
                cancelled=data.get("cancelled") is True,
                continued=(
                    None
                    if data.get("continued") is None
                    else json_text(data["continued"], "continued", array=True)
                ),
                stream=_stream(data.get("stream", [])),
                updates=_outcomes(data.get("updates", [])),
                update_log=(
                    None
                    if data.get("update_log") is None
                    else json_text(data["update_log"], "update_log", array=True)
                ),
                update_handlers=_names(data.get("update_handlers", [])),
                worker=None if data.get("worker") is None else text_field(data, "worker"),
            )
        except WireError as exc:
            raise WireError(f"not a decision: {exc}") from None
        except Exception as exc:
            raise WireError(f"not a decision: {type(exc).__name__}: {exc}") from exc


def _ran_here(cp: Checkpoint) -> bool:
    """Whether ``cp`` is what a worker records as it decides: a settled
    local step, or a remote step it ran at once (settled, or pending with
    its next attempt due and not sent)."""
    if cp.status in ("completed", "failed"):
        return cp.kind in ("local", "remote")
    return (
        cp.kind == "remote"
        and cp.status == "pending"
        and cp.started_at is None
        and cp.wake_at is not None
        and cp.attempts >= 2
    )


def _stream(value: Any) -> tuple[tuple[int, str], ...]:
    """A decision's emitted values: ``[[offset, JSON text], ...]``, by
    consecutive offsets."""
    if not isinstance(value, list):
        reject("stream must be a list")
    values: list[tuple[int, str]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            reject("a stream entry must be [offset, value]")
        offset = int_field({"offset": item[0]}, "offset", 0, MAX_SEQ)
        if values and offset != values[-1][0] + 1:
            reject("a stream's offsets must follow one another")
        values.append((offset, json_text(item[1], "a stream value")))
    return tuple(values)


def _outcomes(value: Any) -> tuple[tuple[str, str], ...]:
    """A decision's applied updates: ``[[id, outcome as JSON text], ...]``."""
    if not isinstance(value, list):
        reject("updates must be a list")
    found: list[tuple[str, str]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            reject("an applied update must be [id, outcome]")
        update_id, outcome = item
        if not isinstance(update_id, str) or not update_id:
            reject("an update's id must be a non-empty string")
        parsed = parse_json(json_text(outcome, "an update's outcome"), "an update's outcome")
        if not isinstance(parsed, dict) or parsed.get("status") not in (
            "completed",
            "failed",
            "rejected",
        ):
            reject("an update's outcome must say completed, failed or rejected")
        found.append((update_id, outcome))
    return tuple(found)


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        reject("update_handlers must be a list of names")
    return tuple(value)


def history(
    checkpoints: Iterable[Checkpoint], records: Iterable[RunRecord] = ()
) -> list[Checkpoint]:
    """What of a run's checkpoints a decision task carries: everything but
    on-error handoffs, and the run's records a worker reads (see
    `_wire_records`), in seq order."""
    return sorted(
        [
            *(cp for cp in checkpoints if cp.seq < BODY_SEQ_LIMIT),
            *records_on_wire(records),
        ],
        key=lambda cp: cp.seq,
    )
