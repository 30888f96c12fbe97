"""What travels through a broker: tasks to workers, results back.

Both are JSON objects encoded as UTF-8. Inputs and outputs stay the JSON text
the store holds, so a worker never needs the engine's types to pass them on,
and a result that fails to decode is rejected at the boundary without
touching any state.
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, final

import attrs

from ._brokers._base import RESULTS
from ._exceptions import TrioDurableError

WIRE_VERSION: Final = 1


@final
class WireError(TrioDurableError):
    """A broker message does not decode as a task or a result."""


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
      input: The arguments as the JSON text of a list.
      timeout: Seconds the attempt may take, or None.
      dispatched_at: When it was sent (durable time).
      queue: The flow-control queue whose slot it holds, if any.
      reply_to: The queue its result goes to: the results queue of the
        engines sharing the run's store.
      priority: Its delivery priority on the broker (0 to 9).
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

    def encode(self) -> bytes:
        data: dict[str, Any] = {"v": WIRE_VERSION, **attrs.asdict(self)}
        data["input"] = json.loads(self.input)
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Task:
        data = _object(body)
        try:
            return cls(
                run_id=_str(data, "run_id"),
                seq=_int(data, "seq"),
                attempt=_int(data, "attempt"),
                step=_str(data, "step"),
                workflow=str(data.get("workflow", "")),
                route=_str(data, "route"),
                input=json.dumps(data["input"], separators=(",", ":")),
                timeout=data.get("timeout"),
                dispatched_at=float(data.get("dispatched_at", 0.0)),
                queue=data.get("queue"),
                reply_to=str(data.get("reply_to") or RESULTS),
                priority=int(data.get("priority", 0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"not a task: {exc}") from exc


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

    def encode(self) -> bytes:
        data: dict[str, Any] = {"v": WIRE_VERSION, **attrs.asdict(self)}
        data["output"] = None if self.output is None else json.loads(self.output)
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> Result:
        data = _object(body)
        try:
            status = data["status"]
            if status not in ("completed", "failed"):
                raise ValueError(f"status {status!r}")
            output = data.get("output")
            return cls(
                run_id=_str(data, "run_id"),
                seq=_int(data, "seq"),
                attempt=_int(data, "attempt"),
                step=_str(data, "step"),
                workflow=str(data.get("workflow", "")),
                status=status,
                output=None if status != "completed" else json.dumps(output, separators=(",", ":")),
                error=None if data.get("error") is None else str(data["error"]),
                code=None if data.get("code") is None else str(data["code"]),
                details=data.get("details"),
                retryable=bool(data.get("retryable", True)),
                started_at=float(data.get("started_at", 0.0)),
                finished_at=float(data.get("finished_at", 0.0)),
                worker=str(data.get("worker", "")),
                queue=None if data.get("queue") is None else str(data["queue"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"not a result: {exc}") from exc


def _object(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise WireError("not a JSON object")
    if data.get("v") != WIRE_VERSION:
        raise WireError(f"unknown wire version {data.get('v')!r}")
    return data


def _str(data: dict[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"{key} must be a string")
    return value


def _int(data: dict[str, Any], key: str) -> int:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} must be an integer")
    return value
