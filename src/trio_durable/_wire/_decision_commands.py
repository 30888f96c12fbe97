"""The commands a remote workflow's decision names: the durable operation its
body waits on, and those it went past without waiting (`passes`), which
the engine carries out, in order, as its own turn would (see
`_decision_turn`), as the decision's JSON carries them, each op's
arguments checked (see `_decision_wire`).
"""

from __future__ import annotations

import json
from typing import Any, Final, Literal, final

import attrs

from .._base._exceptions import SearchAttributeError
from .._base._search_values import load_attributes
from .._brokers._base import is_broker_safe
from ._decision_checks import (
    FAN_MODES,
    int_field,
    json_text,
    number_field,
    reject,
    text_field,
)
from ._messages import MAX_ATTEMPT
from ._wire_records import BODY_SEQ_LIMIT

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
    "pause",
]
NEWER_OPS: Final[frozenset[str]] = frozenset(
    {"send_signal", "set_event", "upsert_search", "entity", "pause"}
)
"""The commands of envelope version 2: what an engine of version 1 does not
carry out (see `Decision.wire_version`)."""


def passes(op: str, args: dict[str, Any]) -> bool:
    """Whether a body goes past the command ``op`` with ``args`` without
    waiting for the engine to carry it out: what it returns the worker
    knows (``set_event``, ``upsert_search``, a child started but not
    awaited), so a decision carries several such commands, carried out in
    order, before the one the body waits on or its end."""
    return op in ("set_event", "upsert_search") or (op == "child" and args.get("awaited") is False)


_OPS: Final[frozenset[str]] = frozenset(
    {"step", "sleep", "signal", "webhook", "child", "fan"} | NEWER_OPS
)


@final
@attrs.frozen(kw_only=True)
class Command:
    """The durable operation a remote workflow's body waits on, to be
    carried out by the engine as its own turn would (see `_decision_turn`).

    Attributes:
      op: ``step`` (remote), ``sleep``, ``signal`` (a wait),
        ``webhook``, ``child`` (``awaited`` or started), ``fan``,
        ``send_signal`` (`Context.signal`), ``set_event``,
        ``upsert_search`` (`Context.upsert_search_attributes`),
        ``entity`` (a call of an entity's handler) or ``pause`` (a local
        step a breakpoint stops the run before: the engine pauses the run
        there, and the step runs on a worker once it is continued).
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
    group = text_field(data, "group")
    if not is_broker_safe(group):
        reject(f"group {group!r} is not broker-safe")
    requires = data.get("requires", [])
    if not isinstance(requires, list) or not all(isinstance(r, str) and r for r in requires):
        reject("requires must be a list of names")
    retry = data.get("retry") or {}
    if not isinstance(retry, dict):
        reject("retry must be an object")
    queue = data.get("queue")
    if queue is not None:
        if not isinstance(queue, dict):
            reject("queue must be an object")
        queue = {
            "name": text_field(queue, "name"),
            "concurrency": int_field(queue, "concurrency", 1, 2**31 - 1),
            "priority": int_field(queue, "priority", -(2**31), 2**31 - 1, optional=True) or 0,
        }
    timeout = number_field(data, "timeout")
    return {
        "name": text_field(data, "name"),
        "group": group,
        "requires": sorted(set(requires)),
        "timeout": timeout if timeout else None,
        "retry": {
            "attempts": int_field(retry, "attempts", 1, MAX_ATTEMPT, optional=True) or 1,
            "backoff": number_field(retry, "backoff") or 0.0,
            "max_backoff": number_field(retry, "max_backoff") or 0.0,
            "jitter": min(1.0, number_field(retry, "jitter") or 0.0),
        },
        "queue": queue,
    }


def _attributes(value: Any) -> str:
    """Search attributes as a command carries them: the JSON text of
    ``{name: [type, value]}`` (`dump_attributes`), each checked."""
    if not isinstance(value, str):
        reject("search attributes must be JSON text")
    try:
        load_attributes(value)
    except (SearchAttributeError, ValueError, TypeError) as exc:
        reject(f"search attributes are malformed: {exc}")
    return value


def passed_from_json(data: Any, before: int) -> tuple[Command, ...]:
    """The commands a decision's ``passed`` holds (each one a body goes
    past, `passes`), checked: in the order of their seqs, each below
    ``before``.

    Raises:
      WireError: They are not.
    """
    if not isinstance(data, list):
        reject("passed must be a list")
    commands = tuple(command_from_json(item) for item in data)
    seqs = [command.seq for command in commands]
    if any(not passes(c.op, c.args) for c in commands):
        reject(
            "passed holds only commands a body goes past (set_event, upsert_search, a child started)"
        )
    if seqs != sorted(set(seqs)) or (seqs and seqs[-1] >= before):
        reject("passed's seqs must increase, and come before the decision's next")
    return commands


def command_from_json(data: Any) -> Command:
    """The command ``data`` (a decision's ``next``, or one of its
    ``passed``) holds, checked.

    Raises:
      WireError: It is not a valid command.
    """
    if not isinstance(data, dict):
        reject("next must be an object")
    op = data.get("op")
    if op not in _OPS:
        reject(f"next's op must be one of {sorted(_OPS)}")
    seq = int_field(data, "seq", 1, BODY_SEQ_LIMIT - 1)
    args: dict[str, Any]
    if op == "step":
        args = {
            **step_spec(data),
            "input": json_text(data.get("input"), "input", array=True),
            "flow_queue": text_field(data, "flow_queue", optional=True),
            "priority": int_field(data, "priority", -(2**31), 2**31 - 1, optional=True),
            "compensation": text_field(data, "compensation", optional=True),
            "dedup_key": text_field(data, "dedup_key", optional=True),
        }
    elif op == "sleep":
        if data.get("until") is not None:
            args = {"until": number_field(data, "until", optional=False)}
        else:
            args = {"seconds": number_field(data, "seconds", optional=False)}
    elif op == "signal":
        args = {"name": text_field(data, "name"), "timeout": number_field(data, "timeout")}
    elif op == "send_signal":
        key = data.get("idempotency_key")
        args = {
            "run_id": text_field(data, "run_id"),
            "name": text_field(data, "name"),
            "payload": json_text(data.get("payload"), "payload"),
            "idempotency_key": None if key is None else text_field(data, "idempotency_key"),
        }
    elif op == "set_event":
        args = {"key": text_field(data, "key"), "value": json_text(data.get("value"), "value")}
    elif op == "entity":
        input_json = json_text(data.get("input"), "input", array=True)
        call = json.loads(input_json)
        if len(call) != 3 or not isinstance(call[1], str) or not isinstance(call[2], list):
            reject("an entity call's input must be [key, handler, arguments]")
        args = {"entity": text_field(data, "entity"), "input": input_json}
    elif op == "upsert_search":
        remove = data.get("remove", [])
        if not isinstance(remove, list) or not all(isinstance(n, str) and n for n in remove):
            reject("remove must be a list of names")
        args = {"attributes": _attributes(data.get("attributes")), "remove": remove}
    elif op == "webhook":
        args = {"name": text_field(data, "name")}
    elif op == "pause":
        args = {
            "name": text_field(data, "name"),
            "input": json_text(data.get("input"), "input", array=True),
            "compensation": text_field(data, "compensation", optional=True),
        }
    elif op == "child":
        awaited = data.get("awaited")
        if not isinstance(awaited, bool):
            reject("awaited must be true or false")
        cancel_with_parent = data.get("cancel_with_parent", False)
        if not isinstance(cancel_with_parent, bool):
            reject("cancel_with_parent must be true or false")
        args = {
            "workflow": text_field(data, "workflow"),
            "version": data.get("version") if isinstance(data.get("version"), str) else "",
            "input": json_text(data.get("input"), "input", array=True),
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
        if target not in ("step", "workflow") or mode not in FAN_MODES:
            reject("a fan needs a target of 'step' or 'workflow' and a known mode")
        args = {
            "target": target,
            "inputs": json_text(data.get("inputs"), "inputs", array=True),
            "concurrency": int_field(data, "concurrency", 1, 2**31 - 1, optional=True),
            "mode": mode,
        }
        if target == "step":
            args.update(step_spec(data))
        else:
            version = data.get("version")
            args.update(
                name=text_field(data, "name"),
                version=version if isinstance(version, str) else "",
            )
    return Command(op=op, seq=seq, args=args)
