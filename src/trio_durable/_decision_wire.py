"""What a decision task carries to a worker, and the decision that answers it.

A remote workflow's turn sends the worker a `Task` of kind ``decision``
(docs/remote-workflows.md). Its ``input`` is a one-element array holding the
run (`DecisionRequest`): its version, namespace, tags, arguments and its
resolved history, one checkpoint per entry, each as compact JSON text (so
the message nests no deeper than the wire allows, whatever the outputs
hold). On-error handoffs and the decision checkpoint itself are left out.

The worker answers with a `Result` of kind ``decision`` whose output is a
`Decision`: the local steps it ran (their checkpoints), and either the one
durable operation the body now waits on (a `Command`) or the body's end.

Decoding is total both ways, as in `_wire`: a malformed request or decision
raises `WireError` and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, NoReturn, final

import attrs

from ._bounds import is_finite
from ._brokers._base import is_broker_safe
from ._exceptions import SearchAttributeError
from ._records import DECISION_SEQ, Checkpoint, ErrorInfo, Run
from ._search_values import load_attributes
from ._wire import MAX_ATTEMPT, MAX_SEQ, WireError

CommandOp = Literal[
    "step",
    "sleep",
    "signal",
    "webhook",
    "child",
    "fan",
    "send_signal",
    "set_event",
    "upsert_search",
    "entity",
]
NEWER_OPS: Final[frozenset[str]] = frozenset(
    {"send_signal", "set_event", "upsert_search", "entity"}
)
_OPS: Final[frozenset[str]] = frozenset(
    {"step", "sleep", "signal", "webhook", "child", "fan"} | NEWER_OPS
)
"""The commands of envelope version 2: what an engine of version 1 does not
carry out (see `Decision.wire_version`)."""
_KINDS: Final = frozenset({"local", "remote", "timer", "signal", "child", "webhook"})
_STATUSES: Final = frozenset({"pending", "running", "completed", "failed"})
_MODES: Final = frozenset({"fail_fast", "wait_all", "settled"})


def _reject(reason: str) -> NoReturn:
    raise WireError(reason)


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        _reject(f"{what} nests too deeply")
    except ValueError as exc:
        _reject(f"{what} is not JSON: {exc}")


def _json_text(value: Any, what: str, *, array: bool = False) -> str:
    """A field that holds JSON text: it must parse (as an array, if asked)."""
    if not isinstance(value, str):
        _reject(f"{what} must be JSON text, not {type(value).__name__}")
    parsed = _json(value, what)
    if array and not isinstance(parsed, list):
        _reject(f"{what} must be a JSON array")
    return value


def _str(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or "\x00" in value:
        _reject(f"{key} must be a non-empty string")
    return value


def _int(data: dict[str, Any], key: str, low: int, high: int, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _reject(f"{key} must be an integer from {low} to {high}")
    return value


def _number(data: dict[str, Any], key: str, *, optional: bool = True, low: float = 0.0) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not is_finite(value)
        or value < low
        or value > 2.0**53
    ):
        _reject(f"{key} must be a finite number from {low}")
    return float(value)


def _error(value: Any) -> ErrorInfo | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("message"), str):
        _reject("an error must be an object with a message")
    for key in ("code", "type", "step", "traceback"):
        if value.get(key) is not None and not isinstance(value[key], str):
            _reject(f"an error's {key} must be a string")
    # An error from a worker is in the clear: only a codec store seals one.
    return ErrorInfo.from_json({key: item for key, item in value.items() if key != "sealed"})


# -- checkpoints as JSON text --------------------------------------------------------


def checkpoint_text(cp: Checkpoint, **extra: Any) -> str:
    """``cp`` (without its run id) as compact JSON text."""
    data = attrs.asdict(cp, recurse=False)
    del data["run_id"]
    data["error"] = None if cp.error is None else cp.error.to_json()
    data["errors"] = [e.to_json() for e in cp.errors]
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
        _reject("a checkpoint must be JSON text")
    data = _json(text, "a checkpoint")
    if not isinstance(data, dict):
        _reject("a checkpoint must be a JSON object")
    kind = data.get("kind")
    status = data.get("status", "pending")
    if kind not in _KINDS:
        _reject(f"a checkpoint's kind must be one of {sorted(_KINDS)}")
    if status not in _STATUSES:
        _reject("a checkpoint's status is unknown")
    mode = data.get("parallel_mode")
    if mode is not None and mode not in _MODES:
        _reject("a checkpoint's parallel_mode is unknown")
    errors = data.get("errors", [])
    if not isinstance(errors, list):
        _reject("a checkpoint's errors must be a list")
    for key in ("input", "output"):
        if data.get(key) is not None:
            _json_text(data[key], f"a checkpoint's {key}")
    cp = Checkpoint(
        run_id=run_id,
        seq=_int(data, "seq", -MAX_SEQ, MAX_SEQ),
        name=_str(data, "name"),
        kind=kind,
        status=status,
        input=data.get("input"),
        output=data.get("output"),
        error=_error(data.get("error")),
        errors=tuple(e for e in (_error(x) for x in errors) if e is not None),
        attempts=_int(data, "attempts", 0, MAX_ATTEMPT, optional=True) or 0,
        group=_str(data, "group", optional=True),
        child_id=_str(data, "child_id", optional=True),
        compensation=_str(data, "compensation", optional=True),
        parallel_group=_int(data, "parallel_group", 1, MAX_SEQ, optional=True),
        parallel_size=_int(data, "parallel_size", 1, MAX_SEQ, optional=True),
        parallel_mode=mode,
        wake_at=_number(data, "wake_at"),
        enqueued_at=_number(data, "enqueued_at"),
        started_at=_number(data, "started_at"),
        finished_at=_number(data, "finished_at"),
    )
    return cp, data


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
    """

    version: str
    namespace: str
    tags: tuple[str, ...]
    input: str
    checkpoints: dict[int, Checkpoint]
    tokens: dict[int, str] = attrs.field(factory=dict)
    compensate: bool = False
    cleanup: bool = False
    created_at: float = 0.0
    updates: tuple[tuple[str, dict[str, Any]], ...] = ()
    stood_due: bool = False


def request_input(
    run: Run,
    history: Iterable[Checkpoint],
    tokens: dict[int, str],
    *,
    compensate: bool = False,
    cleanup: bool = False,
    updates: list[tuple[str, dict[str, Any]]] | None = None,
    stood_due: bool = False,
) -> str:
    """A decision task's ``input``: ``run`` and its ``history`` (and the
    updates waiting in its inbox, if any)."""
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
    return json.dumps([body], separators=(",", ":"), allow_nan=False)


def read_request(run_id: str, input_json: str) -> DecisionRequest:
    """The run a decision task's ``input`` carries.

    Raises:
      WireError: It is not a valid request.
    """
    try:
        outer = _json(input_json, "a decision task's input")
        if not isinstance(outer, list) or len(outer) != 1 or not isinstance(outer[0], dict):
            _reject("a decision task's input must be an array of one object")
        data = outer[0]
        version = data.get("version", "")
        if not isinstance(version, str):
            _reject("version must be a string")
        tags = data.get("tags", [])
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            _reject("tags must be a list of strings")
        history = data.get("history", [])
        if not isinstance(history, list):
            _reject("history must be a list")
        checkpoints: dict[int, Checkpoint] = {}
        tokens: dict[int, str] = {}
        for text in history:
            cp, entry = checkpoint_from_text(text, run_id)
            checkpoints[cp.seq] = cp
            if isinstance(entry.get("token"), str):
                tokens[cp.seq] = entry["token"]
        return DecisionRequest(
            version=version,
            namespace=_str(data, "namespace"),
            tags=tuple(tags),
            input=_json_text(data.get("input"), "input", array=True),
            checkpoints=checkpoints,
            tokens=tokens,
            compensate=data.get("compensate") is True,
            cleanup=data.get("cleanup") is True,
            created_at=_created_at(data.get("created_at", 0.0)),
            updates=_inbox(data.get("updates", [])),
            stood_due=data.get("stood_due") is True,
        )
    except WireError as exc:
        raise WireError(f"not a decision task: {exc}") from None
    except Exception as exc:
        raise WireError(f"not a decision task: {type(exc).__name__}: {exc}") from exc


def _inbox(value: object) -> tuple[tuple[str, dict[str, Any]], ...]:
    """The updates a request carries: ``[[id, {"name", "args", "at"}], ...]``."""
    if not isinstance(value, list):
        _reject("updates must be a list")
    found: list[tuple[str, dict[str, Any]]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], dict):
            _reject("an update must be [id, entry]")
        update_id, entry = item
        if not isinstance(update_id, str) or not update_id:
            _reject("an update's id must be a non-empty string")
        _str(entry, "name")
        _json_text(entry.get("args"), "an update's args", array=True)
        _number(entry, "at", optional=False)
        found.append((update_id, entry))
    return tuple(found)


def _created_at(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        _reject("created_at must be a number")
    return float(value)


# -- the decision ---------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Command:
    """The durable operation a remote workflow's body waits on, to be
    carried out by the engine as its own turn would (see `_decision_turn`).

    Attributes:
      op: ``step`` (remote), ``sleep``, ``signal`` (a wait),
        ``webhook``, ``child`` (``awaited`` or started), ``fan``,
        ``send_signal`` (`Context.signal`), ``set_event``,
        ``upsert_search`` (`Context.upsert_search_attributes`) or
        ``entity`` (a call of an entity's handler).
      seq: The operation's seq (a fan's first).
      args: Its arguments, checked by `Decision.decode` for its op.
    """

    op: CommandOp
    seq: int
    args: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "seq": self.seq, **self.args}

    @property
    def newer(self) -> bool:
        """Whether only an engine of envelope version 2 carries it out: a
        newer op, a child cancelled with its parent or given search
        attributes, or a step with a dedup key (an engine of version 1
        would drop what it does not know)."""
        return (
            self.op in NEWER_OPS
            or self.args.get("cancel_with_parent") is True
            or self.args.get("search_attributes") is not None
            or self.args.get("dedup_key") is not None
        )


def step_spec(data: dict[str, Any]) -> dict[str, Any]:
    """A remote step's registration as a command names it, checked."""
    group = _str(data, "group")
    if not is_broker_safe(group):
        _reject(f"group {group!r} is not broker-safe")
    requires = data.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) and r for r in requires):
        _reject("requires must be a list of names")
    retry = data.get("retry") or {}
    if not isinstance(retry, dict):
        _reject("retry must be an object")
    queue = data.get("queue")
    if queue is not None:
        if not isinstance(queue, dict):
            _reject("queue must be an object")
        queue = {
            "name": _str(queue, "name"),
            "concurrency": _int(queue, "concurrency", 1, 2**31 - 1),
            "priority": _int(queue, "priority", -(2**31), 2**31 - 1, optional=True) or 0,
        }
    timeout = _number(data, "timeout")
    return {
        "name": _str(data, "name"),
        "group": group,
        "requires": sorted(set(requires)),
        "timeout": timeout if timeout else None,
        "retry": {
            "attempts": _int(retry, "attempts", 1, MAX_ATTEMPT, optional=True) or 1,
            "backoff": _number(retry, "backoff") or 0.0,
            "max_backoff": _number(retry, "max_backoff") or 0.0,
            "jitter": min(1.0, _number(retry, "jitter") or 0.0),
        },
        "queue": queue,
    }


def _attributes(value: Any) -> str:
    """Search attributes as a command carries them: the JSON text of
    ``{name: [type, value]}`` (`dump_attributes`), each checked."""
    if not isinstance(value, str):
        _reject("search attributes must be JSON text")
    try:
        load_attributes(value)
    except (SearchAttributeError, ValueError, TypeError) as exc:
        _reject(f"search attributes are malformed: {exc}")
    return value


def _command(data: Any) -> Command:
    if not isinstance(data, dict):
        _reject("next must be an object")
    op = data.get("op")
    if op not in _OPS:
        _reject(f"next's op must be one of {sorted(_OPS)}")
    seq = _int(data, "seq", 1, DECISION_SEQ - 1)
    args: dict[str, Any]
    if op == "step":
        args = {
            **step_spec(data),
            "input": _json_text(data.get("input"), "input", array=True),
            "flow_queue": _str(data, "flow_queue", optional=True),
            "priority": _int(data, "priority", -(2**31), 2**31 - 1, optional=True),
            "compensation": _str(data, "compensation", optional=True),
            "dedup_key": _str(data, "dedup_key", optional=True),
        }
    elif op == "sleep":
        if data.get("until") is not None:
            args = {"until": _number(data, "until", optional=False)}
        else:
            args = {"seconds": _number(data, "seconds", optional=False)}
    elif op == "signal":
        args = {"name": _str(data, "name"), "timeout": _number(data, "timeout")}
    elif op == "send_signal":
        key = data.get("idempotency_key")
        args = {
            "run_id": _str(data, "run_id"),
            "name": _str(data, "name"),
            "payload": _json_text(data.get("payload"), "payload"),
            "idempotency_key": None if key is None else _str(data, "idempotency_key"),
        }
    elif op == "set_event":
        args = {"key": _str(data, "key"), "value": _json_text(data.get("value"), "value")}
    elif op == "entity":
        input_json = _json_text(data.get("input"), "input", array=True)
        call = json.loads(input_json)
        if len(call) != 3 or not isinstance(call[1], str) or not isinstance(call[2], list):
            _reject("an entity call's input must be [key, handler, arguments]")
        args = {"entity": _str(data, "entity"), "input": input_json}
    elif op == "upsert_search":
        remove = data.get("remove", [])
        if not isinstance(remove, list) or not all(isinstance(n, str) and n for n in remove):
            _reject("remove must be a list of names")
        args = {"attributes": _attributes(data.get("attributes")), "remove": remove}
    elif op == "webhook":
        args = {"name": _str(data, "name")}
    elif op == "child":
        awaited = data.get("awaited")
        if not isinstance(awaited, bool):
            _reject("awaited must be true or false")
        cancel_with_parent = data.get("cancel_with_parent", False)
        if not isinstance(cancel_with_parent, bool):
            _reject("cancel_with_parent must be true or false")
        args = {
            "workflow": _str(data, "workflow"),
            "version": data.get("version") if isinstance(data.get("version"), str) else "",
            "input": _json_text(data.get("input"), "input", array=True),
            "awaited": awaited,
            "cancel_with_parent": cancel_with_parent,
            "search_attributes": (
                None
                if data.get("search_attributes") is None
                else _attributes(data["search_attributes"])
            ),
        }
    else:
        target = data.get("target")
        mode = data.get("mode")
        if target not in ("step", "workflow") or mode not in _MODES:
            _reject("a fan needs a target of 'step' or 'workflow' and a known mode")
        args = {
            "target": target,
            "inputs": _json_text(data.get("inputs"), "inputs", array=True),
            "concurrency": _int(data, "concurrency", 1, 2**31 - 1, optional=True),
            "mode": mode,
        }
        if target == "step":
            args.update(step_spec(data))
        else:
            version = data.get("version")
            args.update(
                name=_str(data, "name"),
                version=version if isinstance(version, str) else "",
            )
    return Command(op=op, seq=seq, args=args)


@final
@attrs.frozen(kw_only=True)
class Decision:
    """A worker's answer to a decision task.

    Attributes:
      version: The workflow version the worker replayed.
      local: The checkpoints of the local steps (and undos) it ran.
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
    """

    version: str
    local: tuple[Checkpoint, ...] = ()
    next: Command | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    cancelled: bool = False
    continued: str | None = None
    stream: tuple[tuple[int, str], ...] = ()
    updates: tuple[tuple[str, str], ...] = ()
    update_log: str | None = None
    update_handlers: tuple[str, ...] = ()

    @property
    def wire_version(self) -> int:
        """The envelope version of the result that carries it: 2 if it
        continues the run as new, carries emitted values or applied
        updates, or its command is newer (`Command.newer`), else 1, which
        engines of either version read."""
        newer = self.next is not None and self.next.newer
        applied = bool(self.updates) or self.update_log is not None
        return 2 if newer or self.continued is not None or self.stream or applied else 1

    def encode(self) -> str:
        """As the JSON text of a `Result`'s output."""
        data: dict[str, Any] = {
            "version": self.version,
            "local": [checkpoint_text(cp) for cp in self.local],
        }
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
            data = _json(text, "a decision")
            if isinstance(data, str):
                # As a worker sends it: the result's output is the
                # decision's JSON text, as a JSON string.
                data = _json(data, "a decision")
            if not isinstance(data, dict):
                _reject("a decision must be an object")
            version = data.get("version")
            if not isinstance(version, str) or not version:
                _reject("version must be a non-empty string")
            local = data.get("local", [])
            if not isinstance(local, list):
                _reject("local must be a list")
            checkpoints = tuple(checkpoint_from_text(text, run_id)[0] for text in local)
            for cp in checkpoints:
                if cp.kind != "local" or cp.status not in ("completed", "failed"):
                    _reject("local holds only settled local steps")
            ends = [
                key for key in ("next", "output", "error", "continued") if data.get(key) is not None
            ]
            if len(ends) != 1:
                _reject("a decision has exactly one of next, output, error and continued")
            error = None
            if data.get("error") is not None:
                error = _error(_json(_json_text(data["error"], "error"), "error"))
            return cls(
                version=version,
                local=checkpoints,
                next=None if data.get("next") is None else _command(data["next"]),
                output=(
                    None if data.get("output") is None else _json_text(data["output"], "output")
                ),
                error=error,
                cancelled=data.get("cancelled") is True,
                continued=(
                    None
                    if data.get("continued") is None
                    else _json_text(data["continued"], "continued", array=True)
                ),
                stream=_stream(data.get("stream", [])),
                updates=_outcomes(data.get("updates", [])),
                update_log=(
                    None
                    if data.get("update_log") is None
                    else _json_text(data["update_log"], "update_log", array=True)
                ),
                update_handlers=_names(data.get("update_handlers", [])),
            )
        except WireError as exc:
            raise WireError(f"not a decision: {exc}") from None
        except Exception as exc:
            raise WireError(f"not a decision: {type(exc).__name__}: {exc}") from exc


def _stream(value: Any) -> tuple[tuple[int, str], ...]:
    """A decision's emitted values: ``[[offset, JSON text], ...]``, by
    consecutive offsets."""
    if not isinstance(value, list):
        _reject("stream must be a list")
    values: list[tuple[int, str]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            _reject("a stream entry must be [offset, value]")
        offset = _int({"offset": item[0]}, "offset", 0, MAX_SEQ)
        if values and offset != values[-1][0] + 1:
            _reject("a stream's offsets must follow one another")
        values.append((offset, _json_text(item[1], "a stream value")))
    return tuple(values)


def _outcomes(value: Any) -> tuple[tuple[str, str], ...]:
    """A decision's applied updates: ``[[id, outcome as JSON text], ...]``."""
    if not isinstance(value, list):
        _reject("updates must be a list")
    found: list[tuple[str, str]] = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            _reject("an applied update must be [id, outcome]")
        update_id, outcome = item
        if not isinstance(update_id, str) or not update_id:
            _reject("an update's id must be a non-empty string")
        parsed = _json(_json_text(outcome, "an update's outcome"), "an update's outcome")
        if not isinstance(parsed, dict) or parsed.get("status") not in (
            "completed",
            "failed",
            "rejected",
        ):
            _reject("an update's outcome must say completed, failed or rejected")
        found.append((update_id, outcome))
    return tuple(found)


def _names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(n, str) and n for n in value):
        _reject("update_handlers must be a list of names")
    return tuple(value)


def history(checkpoints: Sequence[Checkpoint]) -> list[Checkpoint]:
    """What of a run's checkpoints a decision task carries: everything but
    on-error handoffs and the decision checkpoint, in seq order."""
    return sorted(
        (cp for cp in checkpoints if cp.seq < DECISION_SEQ and cp.kind != "decision"),
        key=lambda cp: cp.seq,
    )
