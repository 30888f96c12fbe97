"""Hostile broker messages, shared by the wire tests and the tests that feed
them to live workers and engines (memory broker, and the adapters' tests of
RabbitMQ and NATS, through `open_hostile_feed`).

`item_one_tasks` and `item_one_results` are the messages that crashed
workers and engines before decoding became total (issue 12, item 1): a body
nested 1,000 levels deep, a priority of ``1e400``, a time of ``1`` followed
by 400 zeros, a seq of 2**80, and more of their kind. Each must be rejected
(`trio_durable._wire._messages.WireError`), never decoded, never let another exception
out.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

import trio_durable as td
from prometheus_samples import sample
from trio_durable._wire._messages import WIRE_VERSION
from trio_durable.brokers import Broker, Outgoing

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


# -- Feeding them to a live engine and worker --------------------------------------------

PATIENCE: Final = 60.0

hostile_app = td.App("hostile")


@hostile_app.step(group="g")
async def act(x: int) -> int:
    return x + 1


@hostile_app.workflow()
async def use(ctx: td.Context, x: int) -> int:
    return await ctx.step(act, x)


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (counters on the far side of a real broker, which
    nothing here signals) until it holds, for at most `PATIENCE` seconds."""
    with trio.fail_after(PATIENCE):
        while not predicate():  # noqa: ASYNC110 -- the broker delivers on its own time
            await trio.sleep(0.05)


@attrs.define
class HostileFeed:
    """An engine and a worker on one broker, in a namespace of their own,
    and the hostile messages `feed` sends them.

    Attributes:
      route: The worker's task queue.
      results_queue: The engine's results queue.
      tasks: The task messages fed to ``route``.
      results: The result messages fed to ``results_queue``.
    """

    broker: Broker
    engine: td.Engine
    worker: td.Worker
    namespace: str
    route: str
    results_queue: str
    tasks: list[bytes]
    results: list[bytes]

    async def feed(self) -> None:
        """Publish every hostile message raw, wait until each was rejected,
        and check that the worker and the engine still run a workflow to its
        end, having rejected each message exactly once (counted, and in the
        Prometheus text)."""
        engine, worker = self.engine, self.worker
        await self.broker.dispatch(
            [Outgoing(queue=self.route, body=body) for body in self.tasks]
            + [Outgoing(queue=self.results_queue, body=body) for body in self.results]
        )
        await wait_until(
            lambda: (
                worker.statistics().rejected >= len(self.tasks)
                and engine.statistics().rejected >= len(self.results)
            )
        )
        # Both still work: a run of the same namespace goes through the
        # same queues to its end.
        run = await engine.start(
            use, 41, run_id=f"{self.namespace}.after", namespace=self.namespace
        )
        with trio.fail_after(PATIENCE):
            assert await engine.result(run.id) == 42
        # Each was rejected once: never requeued, never delivered again.
        assert worker.statistics().rejected == len(self.tasks)
        assert engine.statistics().rejected == len(self.results)
        assert worker.statistics().received == len(self.tasks) + 1
        rejected = "trio_durable_messages_rejected_total"
        assert sample(engine.metrics(), rejected, kind="result") == len(self.results)
        assert sample(worker.metrics(), rejected, kind="task") == len(self.tasks)


@asynccontextmanager
async def open_hostile_feed(broker: Broker, namespace: str) -> AsyncIterator[HostileFeed]:
    """An engine and a worker of `hostile_app` on ``broker``, serving the
    route of ``namespace``, with the item-one messages to feed them."""
    route = f"g@{namespace}"
    async with (
        td.open_engine(hostile_app, broker=broker, engine_id=f"engine-{namespace}") as engine,
        td.open_worker(hostile_app, broker=broker, groups=[route]) as worker,
    ):
        yield HostileFeed(
            broker=broker,
            engine=engine,
            worker=worker,
            namespace=namespace,
            route=route,
            results_queue=engine.results_queue,
            tasks=item_one_tasks(route),
            results=item_one_results(),
        )
