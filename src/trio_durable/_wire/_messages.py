"""What travels through a broker: tasks to workers, results back.

Both are JSON objects encoded as UTF-8. Inputs and outputs stay the JSON text
the store holds, so a worker never needs the engine's types to pass them on,
and a result that fails to decode is rejected at the boundary without
touching any state.

Decoding is total: whatever bytes arrive, `Task.decode` and `Result.decode`
either return a message whose every field is of its type and in range for
the engine, the worker and every store, or raise `WireError`. Nothing else
escapes them (no `RecursionError` from deep nesting, no `OverflowError`
from huge numbers), so whoever can publish to the broker cannot crash a
worker or an engine with a message, only have it rejected.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final, Literal, NoReturn, final

import attrs

from .._base._exceptions import TrioDurableError
from .._base._nesting import MAX_NESTING, nesting_exceeds
from .._base._records import ErrorInfo, bound_traceback
from .._brokers._base import RESULTS, is_broker_safe
from .._payloads._blobs import is_reference_value

WIRE_VERSION: Final = 2
"""The newest envelope version this code reads. It writes version 1, which
every engine and worker reads, except a result that needs version 2: a
decision that only this version's engines carry out (see
`Decision.wire_version`). An older engine refuses such a result, naming both
versions, before it touches any state (docs/remote-workflows.md)."""

READS: Final = frozenset({1, 2})
"""The envelope versions this code reads."""

MessageKind = Literal["step", "decision", "query"]

MAX_SEQ: Final = 2**63 - 1
"""The largest seq a message may carry: what a signed 64-bit column holds."""

MAX_ATTEMPT: Final = 2**31 - 1
"""The largest attempt a message may carry: what a signed 32-bit column holds."""

MAX_PRIORITY: Final = 9

EXECUTION_ID: Final = re.compile(r"[0-9a-f]{32}")
"""What an execution id is: 128 bits in lower-case hex (see `_executions`)."""

MAX_TRACESTATE: Final = 512
"""The longest ``tracestate`` a task may carry (what the W3C Trace Context
recommendation asks every vendor to propagate); a longer one is dropped."""

MAX_SECONDS: Final = 2.0**53
"""The largest time or timeout a message may carry, in seconds (past it, a
float no longer tells one second from the next)."""

_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Compact JSON, made once (``json.dumps`` with options makes one per call)."""


@final
class WireError(TrioDurableError):
    """A broker message does not decode as a task or a result.

    Raised by `Task.decode` and `Result.decode` for any body that is not a
    valid, in-range message; the only exception they raise.
    """


@final
@attrs.define(frozen=True, kw_only=True)
class Task:
    """A remote step's attempt, sent to its group.

    Attributes:
      run_id: The run the step belongs to.
      seq: The step's checkpoint seq.
      attempt: Which attempt this is (1 for the first).
      step: The step's registered name.
      workflow: The run's workflow, for events and logs.
      route: The queue it travels on (``<group>`` or ``<group>@<namespace>``).
      input: The arguments as the JSON text of a list, or of the
        reference to it in a blob store.
      timeout: Seconds the attempt may take, or None.
      dispatched_at: When it was sent (durable time).
      queue: The flow-control queue whose slot it holds, if any.
      reply_to: The queue its result goes to: the results queue of the
        engines sharing the run's store.
      priority: Its delivery priority on the broker (0 to 9).
      traceparent: The W3C ``traceparent`` of the engine's dispatch span,
        when tracing is on (docs/tracing.md); None otherwise. A malformed
        one is dropped when decoding, never fatal: tracing must not fail a
        step.
      tracestate: The W3C ``tracestate`` that goes with it, if any.
      kind: ``step`` for a remote step's attempt; ``decision`` for a
        remote workflow's decision task (docs/remote-workflows.md), or
        ``query`` for a query of such a run: then
        ``step`` names the workflow, ``seq`` is 999,999,999 (the seq
        where the releases before kept the decision) and
        ``input`` holds the run's history (see `_decision_wire`).
      execution: The execution id of this dispatch (32 lower-case hex
        digits, unique in the engine's store), which its result carries
        back; None from an engine older than execution ids.
      version: The envelope version it is written in: 1, or 2 for a
        query (kind ``query``: a remote workflow's run asked by an engine
        that lacks its body, see `_remote_queries`).
      build: The build whose workers take it (its run's, see `_builds`),
        or None for any worker. Not on the wire: it picks the broker
        queue the task is sent on.
    """

    run_id: str
    seq: int
    attempt: int
    step: str
    workflow: str
    route: str
    input: str
    timeout: float | None = None
    dispatched_at: float = 0.0
    queue: str | None = None
    reply_to: str = RESULTS
    priority: int = 0
    traceparent: str | None = None
    tracestate: str | None = None
    kind: MessageKind = "step"
    execution: str | None = None
    version: int = 1
    build: str | None = None

    def encode(self) -> bytes:
        head = {
            "v": self.version,
            "run_id": self.run_id,
            "seq": self.seq,
            "attempt": self.attempt,
            "step": self.step,
            "workflow": self.workflow,
            "route": self.route,
        }
        if self.execution is not None:
            head["execution"] = self.execution
        tail: dict[str, Any] = {
            "timeout": self.timeout,
            "dispatched_at": self.dispatched_at,
            "queue": self.queue,
            "reply_to": self.reply_to,
            "priority": self.priority,
        }
        # Left out when absent: a task without tracing is the bytes it was.
        if self.traceparent is not None:
            tail["traceparent"] = self.traceparent
        if self.tracestate is not None:
            tail["tracestate"] = self.tracestate
        if self.kind != "step":
            tail["kind"] = self.kind
        # The input is JSON text already (what the checkpoint holds): it goes
        # in as it is, not parsed and written again.
        return _spliced(head, "input", self.input, tail)

    @classmethod
    def decode(cls, body: bytes) -> Task:
        """The task ``body`` encodes.

        Raises:
          WireError: ``body`` is not a valid task (see docs/brokers.md for
            what is checked); the only exception this raises.
        """
        try:
            data = _object(body, "task")
            arguments = data.get("input")
            # A list of arguments, or the reference to one kept in a blob
            # store (docs/large-payloads.md).
            if not isinstance(arguments, list) and not is_reference_value(arguments):
                _reject(f"input must be a JSON array, not {_kind(arguments)}")
            _shallow("input", arguments, body)
            timeout = data.get("timeout")
            traceparent, tracestate = _trace_context(data)
            return cls(
                run_id=_name(data, "run_id"),
                seq=_integer(data, "seq", 1, MAX_SEQ),
                attempt=_integer(data, "attempt", 1, MAX_ATTEMPT),
                step=_name(data, "step"),
                workflow=_name(data, "workflow", default=""),
                route=_name(data, "route"),
                input=_ENCODER.encode(arguments),
                timeout=None if timeout is None else _seconds(data, "timeout", positive=True),
                dispatched_at=_seconds(data, "dispatched_at"),
                queue=_optional_name(data, "queue"),
                reply_to=_reply_to(data),
                priority=_integer(data, "priority", 0, MAX_PRIORITY, default=0),
                traceparent=traceparent,
                tracestate=tracestate,
                kind=_message_kind(data),
                execution=_execution(data),
                version=data["v"],
            )
        except WireError as exc:
            raise WireError(f"not a task: {exc}") from None
        except Exception as exc:
            # The checks above are meant to leave nothing for this; it keeps
            # the promise that a message can only be rejected if one is missed.
            raise WireError(f"not a task: {type(exc).__name__}: {exc}") from exc


@final
@attrs.define(frozen=True, kw_only=True)
class Result:
    """A worker's outcome of one task.

    Attributes:
      run_id, seq, attempt, step, workflow: The task it answers.
      status: ``completed`` or ``failed``.
      output: The return value as JSON text, if completed.
      error: The error message, if failed.
      code: The error's code, if any.
      details: The error's JSON details, if any.
      retryable: Whether the engine may try the step again.
      started_at: When the worker started the attempt (durable time).
      finished_at: When it ended.
      worker: The worker's instance id.
      queue: The task's flow-control queue, whose slot the result releases.
      error_type: The Python type name of the exception the step raised,
        if it raised one.
      traceback: Its traceback as text (bounded by the worker's
        ``traceback_limit``), if recorded.
      retry_in: For a failure that may be retried, the seconds the
        worker's own retry policy of the step waits before the next
        attempt, or None if that policy has no attempt left. An engine
        that registers the step applies its own policy; one that does not
        (the step is called by a remote workflow) applies this.
      kind: ``step``, or ``decision`` for a decision (then ``output`` is
        the decision, see `_decision_wire`).
      output_blob: Whether ``output`` is the reference to a blob holding
        the output (docs/large-payloads.md) rather than the value itself:
        said out of band, so that no value passes for a reference. None
        for a result from a worker of a release before it, whose output
        is a reference if it has the shape of one.
      execution: The execution id of the task it answers, as the task
        carried it (None for a task without one, or from a worker older
        than execution ids): it settles the step only if the step's
        checkpoint holds it (docs/failure-handling.md).
      version: The envelope version it is written in: 1, or 2 for a
        decision only engines of this version carry out.
    """

    run_id: str
    seq: int
    attempt: int
    step: str
    workflow: str
    status: Literal["completed", "failed"]
    output: str | None = None
    error: str | None = None
    code: str | None = None
    details: Any = None
    retryable: bool = True
    started_at: float = 0.0
    finished_at: float = 0.0
    worker: str = ""
    queue: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    retry_in: float | None = None
    kind: MessageKind = "step"
    output_blob: bool | None = None
    execution: str | None = None
    version: int = 1

    def encode(self) -> bytes:
        head = {
            "v": self.version,
            "run_id": self.run_id,
            "seq": self.seq,
            "attempt": self.attempt,
            "step": self.step,
            "workflow": self.workflow,
            "status": self.status,
        }
        if self.execution is not None:
            head["execution"] = self.execution
        tail: dict[str, Any] = {
            "error": self.error,
            "code": self.code,
            "details": self.details,
            "retryable": self.retryable,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "worker": self.worker,
            "queue": self.queue,
            "error_type": self.error_type,
            "traceback": self.traceback,
        }
        if self.retry_in is not None:
            tail["retry_in"] = self.retry_in
        if self.kind != "step":
            tail["kind"] = self.kind
        if self.output_blob is not None:
            tail["output_blob"] = self.output_blob
        # The output is JSON text already (as the worker serialized it).
        return _spliced(head, "output", "null" if self.output is None else self.output, tail)

    @classmethod
    def decode(cls, body: bytes) -> Result:
        """The result ``body`` encodes.

        Raises:
          WireError: ``body`` is not a valid result (see docs/brokers.md for
            what is checked); the only exception this raises.
        """
        try:
            data = _object(body, "result")
            status = data.get("status")
            if status not in ("completed", "failed"):
                _reject(f"status must be 'completed' or 'failed', not {_kind(status)}")
            output = data.get("output")
            details = data.get("details")
            _shallow("output", output, body)
            _shallow("details", details, body)
            retryable = data.get("retryable", True)
            if not isinstance(retryable, bool):
                _reject(f"retryable must be true or false, not {_kind(retryable)}")
            output_blob = data.get("output_blob")
            if output_blob is not None and not isinstance(output_blob, bool):
                _reject(f"output_blob must be true or false, not {_kind(output_blob)}")
            return cls(
                run_id=_name(data, "run_id"),
                seq=_integer(data, "seq", 1, MAX_SEQ),
                attempt=_integer(data, "attempt", 1, MAX_ATTEMPT),
                step=_name(data, "step"),
                workflow=_name(data, "workflow", default=""),
                status=status,
                output=(None if status != "completed" else _ENCODER.encode(output)),
                error=_text(data, "error"),
                code=_text(data, "code"),
                details=details,
                retryable=retryable,
                started_at=_seconds(data, "started_at"),
                finished_at=_seconds(data, "finished_at"),
                worker=_name(data, "worker", default=""),
                queue=_optional_name(data, "queue"),
                error_type=_text(data, "error_type"),
                traceback=_text(data, "traceback"),
                retry_in=(None if data.get("retry_in") is None else _seconds(data, "retry_in")),
                kind=_message_kind(data),
                output_blob=output_blob,
                execution=_execution(data),
                version=data["v"],
            )
        except WireError as exc:
            raise WireError(f"not a result: {exc}") from None
        except Exception as exc:
            # See Task.decode.
            raise WireError(f"not a result: {type(exc).__name__}: {exc}") from exc


def _spliced(head: dict[str, Any], key: str, text: str, tail: dict[str, Any]) -> bytes:
    """The JSON object of ``head``'s items, then ``key`` with the JSON text
    ``text`` as its value, then ``tail``'s items (both non-empty)."""
    return f"{_ENCODER.encode(head)[:-1]},{_ENCODER.encode(key)}:{text},{_ENCODER.encode(tail)[1:]}".encode()


def _reject(reason: str) -> NoReturn:
    raise WireError(reason)


def _kind(value: object) -> str:
    """A short description of a JSON value for an error message (never the
    value itself, which may be huge)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    if isinstance(value, int):
        return str(value) if abs(value) < 10**20 else f"an integer of {len(str(value))} digits"
    if isinstance(value, float):
        return repr(value)
    return "an array" if isinstance(value, list) else "an object"


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        # 1e400 parses as infinity: no non-finite number may come in.
        raise WireError(f"the number {text[:40]} is out of range")
    return value


def _parse_constant(name: str) -> NoReturn:
    raise WireError(f"{name} is not JSON")


_DECODER: Final = json.JSONDecoder(parse_float=_parse_float, parse_constant=_parse_constant)


def _object(body: bytes, role: Literal["task", "result"]) -> dict[str, Any]:
    if not isinstance(body, bytes | bytearray):
        _reject(f"a message body is bytes, not {type(body).__name__}")
    try:
        # What json.loads does with bytes, with a decoder made once.
        data = _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    except WireError:
        raise
    except RecursionError:
        _reject("not JSON: nested too deeply to parse")
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError among them
        _reject(f"not JSON: {exc}")
    if not isinstance(data, dict):
        _reject(f"not a JSON object but {_kind(data)}")
    version = data.get("v")
    if version not in READS or not isinstance(version, int) or isinstance(version, bool):
        if isinstance(version, int) and WIRE_VERSION < version <= MAX_ATTEMPT:
            # A newer engine or worker shares the broker: both versions
            # named, so whoever reads the log knows which side to upgrade.
            _reject(
                f"{role} envelope version {version} is newer than this engine's"
                f" {WIRE_VERSION}: upgrade this process to read it"
            )
        _reject(f"unknown wire version {_kind(version)}")
    return data


def _shallow(key: str, value: Any, body: bytes) -> None:
    if nesting_exceeds(value, body):
        _reject(f"{key} nests more than {MAX_NESTING} levels deep")


_MISSING: Final[Any] = object()


def _name(data: dict[str, Any], key: str, *, default: str | None = None) -> str:
    """A string that names something (a run, a step, a queue): it reaches
    store keys and broker names as it is, so it must be non-empty (unless
    ``default`` allows empty), valid Unicode and free of NUL characters."""
    value = data.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is None:
            _reject(f"{key} is missing")
        return default
    if not isinstance(value, str):
        _reject(f"{key} must be a string, not {_kind(value)}")
    if not value and default is None:
        _reject(f"{key} is empty")
    if "\x00" in value:
        _reject(f"{key} holds a NUL character")
    try:
        value.encode()
    except UnicodeEncodeError:
        _reject(f"{key} is not valid Unicode (it holds a lone surrogate)")
    return value


def _optional_name(data: dict[str, Any], key: str) -> str | None:
    if data.get(key) is None:
        return None
    return _name(data, key)


def _text(data: dict[str, Any], key: str) -> str | None:
    """Free text for people (an error message, a traceback): any string; a
    lone surrogate, which no encoder downstream could write, becomes U+FFFD."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        _reject(f"{key} must be a string or null, not {_kind(value)}")
    try:
        value.encode()
    except UnicodeEncodeError:
        value = value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return value


def _integer(
    data: dict[str, Any], key: str, low: int, high: int, *, default: int | None = None
) -> int:
    value = data.get(key, _MISSING)
    if value is _MISSING and default is not None:
        return default
    if value is _MISSING:
        _reject(f"{key} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        _reject(f"{key} must be an integer, not {_kind(value)}")
    if not low <= value <= high:
        _reject(f"{key} must be from {low} to {high}, not {_kind(value)}")
    return value


def _seconds(data: dict[str, Any], key: str, *, positive: bool = False) -> float:
    """A time (or, with ``positive``, a timeout): a finite number from 0 (or
    above 0) to `MAX_SECONDS`."""
    value = data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, int | float):
        _reject(f"{key} must be a number, not {_kind(value)}")
    # Compared before float(): float() of a 401-digit integer overflows.
    too_low = value <= 0 if positive else value < 0
    if too_low or value > MAX_SECONDS:
        low = "above 0 and at most" if positive else "from 0 to"
        _reject(f"{key} must be {low} 2**53 seconds, not {_kind(value)}")
    # As sent: an integer timeout stays one, as the step declared it.
    return value


_TRACEPARENT: Final = re.compile(
    r"(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}"
)
_TRACESTATE: Final = re.compile(rf"[\x20-\x7e]{{1,{MAX_TRACESTATE}}}")


def _trace_context(data: dict[str, Any]) -> tuple[str | None, str | None]:
    """A task's W3C trace context, as the Trace Context recommendation
    treats a bad one: ignored. A ``traceparent`` that is not version,
    trace id, parent id and flags in lower-case hex (the all-zero ids and
    version ff are invalid) drops both; a ``tracestate`` that is not up to
    `MAX_TRACESTATE` printable ASCII characters is dropped alone."""
    traceparent = data.get("traceparent")
    if not isinstance(traceparent, str) or not _TRACEPARENT.fullmatch(traceparent):
        return None, None
    tracestate = data.get("tracestate")
    if not isinstance(tracestate, str) or not _TRACESTATE.fullmatch(tracestate):
        tracestate = None
    return traceparent, tracestate


def _message_kind(data: dict[str, Any]) -> MessageKind:
    """What a task or result is for: a step (the default, so every message
    from before decisions existed reads as one), a decision, or a query of
    a remote workflow's run (envelope version 2 only)."""
    value = data.get("kind", "step")
    if value == "query" and data.get("v") == 1:
        _reject("a query travels in envelope version 2")
    if value in ("step", "decision", "query"):
        return value  # type: ignore[no-any-return]
    _reject(f"kind must be 'step', 'decision' or 'query', not {_kind(value)}")


def _execution(data: dict[str, Any]) -> str | None:
    """A message's execution id: 32 lower-case hex digits (128 bits, as an
    engine mints them), or None where it is missing or null (a message of
    a process older than execution ids)."""
    value = data.get("execution")
    if value is None:
        return None
    if not isinstance(value, str) or not EXECUTION_ID.fullmatch(value):
        _reject(f"execution must be 32 lower-case hex digits, not {_kind(value)}")
    return value


def _reply_to(data: dict[str, Any]) -> str:
    """The results queue a task's result goes to: `RESULTS`, or
    ``RESULTS.<store scope>`` with a broker-safe scope. Anything else could
    make the worker publish where no engine listens, or fail its publish
    for good."""
    value = data.get("reply_to")
    if value is None or value == "":
        return RESULTS
    if not isinstance(value, str):
        _reject(f"reply_to must be a string, not {_kind(value)}")
    if value == RESULTS:
        return value
    prefix, dot, scope = value.partition(RESULTS + ".")
    if prefix or not dot or not is_broker_safe(scope):
        _reject(f"reply_to must be {RESULTS!r} or {RESULTS + '.<scope>'!r}, not {_kind(value)}")
    return value


def result_error(result: Result, traceback_limit: int) -> ErrorInfo:
    """The error a failed ``result`` reports, its traceback cut to
    ``traceback_limit`` (the worker cut it to its own)."""
    return ErrorInfo(
        message=result.error or "failed",
        code=result.code,
        details=result.details,
        type=result.error_type,
        step=result.step if result.kind == "step" else None,
        traceback=bound_traceback(result.traceback, traceback_limit),
        # A result from a worker older than attempt times says 0 for both.
        started_at=result.started_at or None,
        finished_at=result.finished_at or None,
    )
