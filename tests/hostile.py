"""Hostile broker messages, shared by the wire tests and the tests that feed
them to live workers and engines (memory broker, RabbitMQ, NATS).

`item_one_tasks` and `item_one_results` are the messages that crashed
workers and engines before decoding became total (issue 12, item 1): a body
nested 1,000 levels deep, a priority of ``1e400``, a time of ``1`` followed
by 400 zeros, a seq of 2**80, and more of their kind. Each must be rejected
(`trio_durable._wire.WireError`), never decoded, never let another exception
out.
"""

from __future__ import annotations

import json
from typing import Any, Final

from trio_durable._wire import WIRE_VERSION

HUGE: Final = "1" + "0" * 400
"""An integer of 401 digits: ``float()`` of it overflows."""


def valid_task(*, route: str, run_id: str = "hostile", seq: int = 1) -> dict[str, Any]:
    """The fields of a valid task for step ``act`` on ``route``."""
    return {
        "v": WIRE_VERSION,
        "run_id": run_id,
        "seq": seq,
        "attempt": 1,
        "step": "act",
        "workflow": "hostile",
        "route": route,
        "input": [1],
        "timeout": None,
        "dispatched_at": 1_700_000_000.0,
        "queue": None,
        "priority": 0,
    }


def valid_result(*, run_id: str = "hostile", seq: int = 1) -> dict[str, Any]:
    """The fields of a valid result of step ``act``."""
    return {
        "v": WIRE_VERSION,
        "run_id": run_id,
        "seq": seq,
        "attempt": 1,
        "step": "act",
        "workflow": "hostile",
        "status": "completed",
        "output": 1,
        "error": None,
        "code": None,
        "details": None,
        "retryable": True,
        "started_at": 1_700_000_000.0,
        "finished_at": 1_700_000_001.0,
        "worker": "w",
        "queue": None,
    }


def with_raw(fields: dict[str, Any], **raw: str) -> bytes:
    """``fields`` as a JSON object whose ``raw`` keys hold the given JSON
    text as it is (numbers JSON can write but Python's `json` would not)."""
    plain = {key: value for key, value in fields.items() if key not in raw}
    text = json.dumps(plain, separators=(",", ":"))
    extra = ",".join(f"{json.dumps(key)}:{value}" for key, value in raw.items())
    if not extra:
        return text.encode()
    return (text[:-1] + ("," if plain else "") + extra + "}").encode()


def nested(depth: int) -> str:
    """A JSON array nested ``depth`` levels deep (2 bytes a level)."""
    return "[" * depth + "]" * depth


def item_one_tasks(route: str) -> list[bytes]:
    """Task messages that must be rejected."""
    task = valid_task(route=route)
    deep = nested(1000)
    return [
        # About 2 KB, nested 1,000 levels deep: the whole body, or its input.
        deep.encode(),
        with_raw(task, input=deep),
        with_raw(task, priority="1e400"),
        with_raw(task, priority="10"),
        with_raw(task, priority='"5"'),
        with_raw(task, dispatched_at=HUGE),
        with_raw(task, timeout=HUGE),
        with_raw(task, timeout="NaN"),
        with_raw(task, timeout="-1"),
        with_raw(task, dispatched_at="Infinity"),
        with_raw(task, seq=str(2**80)),
        with_raw(task, seq="0"),
        with_raw(task, attempt=str(2**31)),
        with_raw(task, seq='"1"'),
        with_raw(task, input="[NaN]"),
        with_raw(task, input='{"a":1}'),
        with_raw(task, run_id='"\\ud800"'),
        with_raw(task, run_id='"a\\u0000b"'),
        with_raw(task, reply_to='"amq.gen-x"'),
        with_raw(task, reply_to='"trio_durable.results.a b"'),
        with_raw(task, v="true"),
        b"\xff\xfe not JSON",
        b"[]",
    ]


def item_one_results() -> list[bytes]:
    """Result messages that must be rejected."""
    result = valid_result()
    deep = nested(1000)
    return [
        deep.encode(),
        with_raw(result, output=deep),
        with_raw(result, details=deep),
        with_raw(result, started_at=HUGE),
        with_raw(result, finished_at="1e400"),
        with_raw(result, seq=str(2**80)),
        with_raw(result, attempt=str(2**40)),
        with_raw(result, output="NaN"),
        with_raw(result, output="[1,-Infinity]"),
        with_raw(result, output="1e400"),
        with_raw(result, details='{"x":NaN}'),
        with_raw(result, retryable='"yes"'),
        with_raw(result, status='"done"'),
        with_raw(result, run_id='"\\udfff"'),
        with_raw(result, step="7"),
        with_raw(result, error="[]"),
        b"\xff",
        b"null",
    ]
