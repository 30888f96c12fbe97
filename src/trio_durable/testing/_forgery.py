"""Forged broker messages: an intruder on the simulation's broker.

`ForgingBroker` passes everything to the simulation's `MemoryBroker` and
watches what the fleet publishes (it also tells the harness each time a task
goes out, so that a worker crash can land while work is in flight, and
hands each task and result it sees to the harness's `BuildWatch`). With
signing on, for each task an engine sends it may (`Faults.forge`) publish a
forgery beside it: a result for that task, or a
task of its own, either unsigned, signed with a key the fleet does not
have, signed under the fleet's key id with another key, or (a result) the
genuine signed task put on the results queue. A forged result carries
`FORGED` as its output (or fails with code `FORGED`); a forged task names a
run `forged-<n>` that does not exist.

With signing on, none of it may get through (`forgery_violations`): no
checkpoint or run holds `FORGED`, and no worker publishes a result for a
``forged-`` run (it would have run a forged task).
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Final, final

import attrs
import trio

from .._base._keyring import Keyring
from .._brokers._base import Consumer, Outgoing, WorkerDescriptor
from .._brokers._memory import MemoryBroker
from .._stores._base import Store
from .._wire._messages import Result, Task, WireError
from .._wire._signing import MessageRole, open_signed, sign
from ._build_checks import BuildWatch

FORGED: Final = "forged-by-the-simulation"
"""What a forged result returns (or its error code, for a failure)."""

FORGED_RUN: Final = "forged-"
"""The start of the run id of every forged task."""

_KINDS: Final = (
    "result.unsigned",
    "result.unknown_key",
    "result.wrong_key",
    "result.task",
    "task.unsigned",
    "task.unknown_key",
    "task.wrong_key",
)


@final
class ForgingBroker:
    """A `Broker` that is the simulation's memory broker, with an intruder
    who publishes forgeries (see the module's docstring).

    Args:
      inner: The broker everything goes to.
      signing: The fleet's keyring (the intruder knows its current key id,
        not its keys), or None: then nothing is forged (a fleet that signs
        nothing accepts anything, by design).
      rate: Probability of a forgery beside each task sent.
      rng: The intruder's random source.
      builds: What it hands each genuine task and result it sees going
        out to, before any forgery beside it.

    Attributes:
      forged: How many forged messages were published.
      violations: What got through: results published for forged tasks.
      task_sent: Set (and replaced) each time a task goes out.
    """

    def __init__(
        self,
        inner: MemoryBroker,
        signing: Keyring | None,
        rate: float,
        rng: random.Random,
        builds: BuildWatch,
    ) -> None:
        self.inner = inner
        self._builds = builds
        self._rate = rate if signing is not None else 0.0
        self._rng = rng
        self._intruder = Keyring.single(rng.randbytes(32), "intruder")
        current = "k" if signing is None else signing.current
        self._lookalike = Keyring.single(rng.randbytes(32), current)
        self._runs = 0
        self.forged = 0
        self.violations: list[str] = []
        self.task_sent = trio.Event()

    @property
    def durable(self) -> bool:
        # As the memory broker: not durable, so engines send again the
        # steps out on it once no engine that sends on it is open.
        return self.inner.durable

    @property
    def needs_heartbeat(self) -> bool:
        # As the memory broker: workers announce once, with no heartbeat.
        return self.inner.needs_heartbeat

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        forgeries = [forgery for m in messages for forgery in self._watch(m)]
        await self.inner.dispatch([*messages, *forgeries])
        self.forged += len(forgeries)

    def _watch(self, message: Outgoing) -> list[Outgoing]:
        task = _task(message.body)
        if task is not None:
            self.task_sent.set()
            self.task_sent = trio.Event()
            self._builds.task_sent(task, message.queue, trio.current_time())
        if task is None:
            result = _result(message.body)
            if result is not None and result.run_id.startswith(FORGED_RUN):
                self.violations.append(
                    f"a worker ran the forged task of {result.run_id!r} ({result.step})"
                )
            elif result is not None:
                self._builds.result_sent(result, trio.current_time())
            return []
        if self._rate <= 0 or self._rng.random() >= self._rate:
            return []
        kind = self._rng.choice(_KINDS)
        if kind == "result.task":
            return [Outgoing(queue=task.reply_to, body=message.body)]
        role, how = kind.split(".")
        if role == "result":
            failed = self._rng.random() < 0.5
            forged = Result(
                run_id=task.run_id,
                seq=task.seq,
                attempt=task.attempt,
                step=task.step,
                workflow=task.workflow,
                status="failed" if failed else "completed",
                output=None if failed else json.dumps(FORGED),
                error=FORGED if failed else None,
                code=FORGED if failed else None,
                retryable=False,
                worker="intruder",
                queue=task.queue,
                kind=task.kind,
            )
            return [
                Outgoing(queue=task.reply_to, body=self._signed(how, "result", forged.encode()))
            ]
        self._runs += 1
        copy = attrs.evolve(task, run_id=f"{FORGED_RUN}{self._runs}")
        return [Outgoing(queue=message.queue, body=self._signed(how, "task", copy.encode()))]

    def _signed(self, how: str, role: MessageRole, body: bytes) -> bytes:
        if how == "unsigned":
            return body
        return sign(self._intruder if how == "unknown_key" else self._lookalike, role, body)

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        async with self.inner.open_consumer(queue, prefetch=prefetch) as consumer:
            yield consumer

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    async def ping(self) -> None:
        await self.inner.ping()

    async def backlog(self, queue: str) -> int:
        return await self.inner.backlog(queue)

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _task(body: bytes) -> Task | None:
    try:
        return Task.decode(open_signed(None, "task", body))
    except WireError:
        return None


def _result(body: bytes) -> Result | None:
    try:
        return Result.decode(open_signed(None, "result", body))
    except WireError:
        return None


async def forgery_violations(store: Store) -> list[str]:
    """Checkpoints and runs that hold what a forged result carried."""
    violations: list[str] = []
    for run in await store.list_runs(limit=1_000_000):
        if (run.output and FORGED in run.output) or (run.error and run.error.code == FORGED):
            violations.append(f"run {run.id} ended with a forged result")
        for cp in await store.get_checkpoints(run.id):
            if (cp.output and FORGED in cp.output) or (cp.error and cp.error.code == FORGED):
                violations.append(f"checkpoint {run.id}@{cp.seq} holds a forged result")
    return violations
