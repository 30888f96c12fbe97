"""Results replayed into a later execution: shared by the tests over the
memory broker (tests/test_replayed_results.py) and over real NATS and
RabbitMQ (tests/integration/test_replayed_results_brokers.py).

Each scenario takes an open broker, a namespace of its own (its queues are
fresh on a shared server) and the fleet's signing ring (or None). A worker
publishes through a `Tap`, which keeps a copy of every result it sends, as
someone who can read the results queue could; the scenario then publishes
a captured result again, correctly signed, where a later execution of the
same step waits: after `Engine.retry` from a seq, after a retryable
failure, into a new run under a pruned run's id, or as a duplicate. Each
time the engine rejects it as stale (`EngineStatistics.rejected_stale`,
``trio_durable_messages_stale_total``), it changes nothing, and the step's
own result settles it afterwards.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import pytest
import trio

import trio_durable as td
from prometheus_samples import sample
from trio_durable._wire._messages import Result
from trio_durable._wire._signing import open_signed
from trio_durable.brokers import (
    RESULTS,
    Broker,
    Consumer,
    Delivery,
    Outgoing,
    WorkerDescriptor,
)

PATIENCE: Final = 30.0
"""Seconds a scenario waits for something a real broker delivers."""

RING: Final = td.Keyring.single(b"the fleet's key of 32 bytes.....", "k1")

app = td.App("replays")

RUNS: dict[str, int] = {}
"""How often `charge` ran for each order."""

GATES: dict[tuple[str, int], trio.Event] = {}
"""`charge` of (order, n) waits for its gate, if it has one, on its n-th run."""

FAIL_ON: set[tuple[str, int]] = set()
"""`charge` of (order, n) fails (retryably) on its n-th run."""

ADDED: list[int] = []
"""The arguments `add_one` ran with."""


@app.step(group="pay", retry=td.Retry(attempts=2, backoff=0.5, jitter=0.0))
async def charge(order: str) -> str:
    n = RUNS[order] = RUNS.get(order, 0) + 1
    gate = GATES.get((order, n))
    if gate is not None:
        await gate.wait()
    if (order, n) in FAIL_ON:
        raise RuntimeError(f"the card network is down (execution #{n})")
    return f"charged {order} execution #{n}"


@app.workflow()
async def ship(ctx: td.Context, order: str) -> str:
    return "shipped " + await ctx.step(charge, order)


@app.step(group="g")
async def add_one(x: int) -> int:
    ADDED.append(x)
    return x + 1


@app.workflow(group="deciders")
async def decided(ctx: td.Context, x: int) -> int:
    """A remote workflow: its decisions are bound to their task too."""
    return await ctx.step(add_one, x) * 10


engine_app = td.App("replays-engine")
decided_by_name = engine_app.remote_workflow("decided", group="deciders")


class _Consumer:
    """A consumer of ``inner`` that keeps the bodies it rejected for good."""

    def __init__(self, inner: Consumer, dead: list[bytes]) -> None:
        self.inner = inner
        self.dead = dead

    async def receive(self, max_items: int) -> list[Delivery]:
        return await self.inner.receive(max_items)

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await self.inner.ack(deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        await self.inner.reject(deliveries, requeue=requeue)
        if not requeue:
            self.dead.extend(d.body for d in deliveries)


class Tap:
    """A broker that keeps a copy of every result published through it,
    and of every message its consumers reject for good (dead-lettered
    where the broker keeps dead letters), and passes everything on to
    ``inner``."""

    def __init__(self, inner: Broker) -> None:
        self.inner = inner
        self.results: list[bytes] = []
        self.dead: list[bytes] = []

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        # Kept first: the engine may settle a result before the publish
        # returns here.
        self.results.extend(m.body for m in messages if m.queue.startswith(RESULTS))
        await self.inner.dispatch(messages)

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        async with self.inner.open_consumer(queue, prefetch=prefetch) as consumer:
            yield _Consumer(consumer, self.dead)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def captured(self, run_id: str, **fields: Any) -> list[tuple[bytes, Result]]:
        """The results of ``run_id`` published so far (each as sent, and
        read), those whose fields have the values given."""
        found = []
        for body in self.results:
            result = Result.decode(open_signed(None, "result", body))
            if result.run_id == run_id and all(
                getattr(result, name) == value for name, value in fields.items()
            ):
                found.append((body, result))
        return found


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll ``predicate`` (counters on the far side of a broker, which
    nothing here signals) until it holds, for at most `PATIENCE` seconds."""
    with trio.fail_after(PATIENCE):
        while not predicate():  # noqa: ASYNC110 -- the broker delivers on its own time
            await trio.sleep(0.05)


def stale_sample(engine: td.Engine) -> float | None:
    return sample(engine.metrics(), "trio_durable_messages_stale_total", kind="result")


async def replay(tap: Tap, engine: td.Engine, bodies: Sequence[bytes]) -> None:
    """Publish ``bodies`` to ``engine`` (whose broker is ``tap``) and wait
    until it rejected every one of them as stale, for good."""
    before = engine.statistics().rejected_stale
    dead = len(tap.dead)
    await tap.inner.dispatch([Outgoing(queue=engine.results_queue, body=body) for body in bodies])
    await wait_until(lambda: engine.statistics().rejected_stale >= before + len(bodies))
    assert engine.statistics().rejected_stale == before + len(bodies)
    assert sorted(tap.dead[dead:]) == sorted(bodies)


async def step_of(engine: td.Engine, run_id: str, seq: int = 1) -> td.Checkpoint:
    [cp] = [cp for cp in await engine.store.get_checkpoints(run_id) if cp.seq == seq]
    return cp


def _unsigned(body: bytes) -> bytes:
    return open_signed(None, "result", body)


async def replayed_after_retry_from_seq(
    broker: Broker, namespace: str, signing: td.Keyring | None
) -> None:
    """The first execution's signed result, published again once
    ``retry(from_seq=1)`` runs the step again (its attempt is 1 again):
    stale, while the step runs; the second execution's result completes
    the run. Without signing, the same result with its execution id cut
    out (as a worker older than execution ids sends it) is stale too: a
    retry ran that seq again."""
    order = f"{namespace}-retried"
    tap = Tap(broker)
    async with (
        td.open_engine(app, broker=tap, signing=signing, seed=1) as engine,
        td.open_worker(app, broker=tap, groups=[f"pay@{namespace}"], signing=signing),
    ):
        run_id = f"{namespace}.retried"
        await engine.start(ship, order, run_id=run_id, namespace=namespace)
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #1"
        [(first, _)] = tap.captured(run_id)
        gate = GATES[(order, 2)] = trio.Event()
        await engine.retry(run_id, from_seq=1)
        await wait_until(lambda: RUNS[order] == 2)
        replayed = [first]
        if signing is None:
            legacy = _unsigned(first).replace(b'"execution":', b'"was":', 1)
            assert Result.decode(legacy).execution is None
            replayed.append(legacy)
        await replay(tap, engine, replayed)
        step = await step_of(engine, run_id)
        assert (step.status, step.attempts, step.rerun) == ("pending", 1, True)
        assert (await engine.get(run_id)).status == "suspended"
        assert stale_sample(engine) == len(replayed)
        gate.set()
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #2"
        assert engine.statistics().rejected_stale == len(replayed)


async def replayed_after_a_retryable_failure(
    broker: Broker, namespace: str, signing: td.Keyring | None
) -> None:
    """A step's first attempt fails (retryably): its failure, published
    again while the second attempt runs, is stale. The step fails for good
    on that second attempt, and the run with it; `Engine.retry` runs the
    step again from attempt 1, where the first execution's failure of
    attempt 1, published again, is stale too, and the run completes."""
    order = f"{namespace}-flaky"
    FAIL_ON.update({(order, 1), (order, 2)})
    tap = Tap(broker)
    async with (
        td.open_engine(app, broker=tap, signing=signing, seed=2) as engine,
        td.open_worker(app, broker=tap, groups=[f"pay@{namespace}"], signing=signing),
    ):
        run_id = f"{namespace}.flaky"
        second = GATES[(order, 2)] = trio.Event()
        await engine.start(ship, order, run_id=run_id, namespace=namespace)
        await wait_until(lambda: RUNS.get(order) == 2)
        [(failure, result)] = tap.captured(run_id, attempt=1)
        assert result.status == "failed"
        assert result.retryable
        await replay(tap, engine, [failure])
        step = await step_of(engine, run_id)
        assert (step.status, step.attempts, len(step.errors)) == ("pending", 2, 1)
        second.set()
        with trio.fail_after(PATIENCE), pytest.raises(td.RunFailed):
            await engine.result(run_id)
        third = GATES[(order, 3)] = trio.Event()
        await engine.retry(run_id)
        await wait_until(lambda: RUNS[order] == 3)
        step = await step_of(engine, run_id)
        assert (step.status, step.attempts, step.rerun) == ("pending", 1, True)
        # Without execution ids, it would fail attempt 1 of this execution.
        await replay(tap, engine, [failure])
        assert (await step_of(engine, run_id)).status == "pending"
        assert stale_sample(engine) == 2
        third.set()
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #3"


async def replayed_into_a_new_run_under_a_pruned_id(
    broker: Broker, namespace: str, signing: td.Keyring | None
) -> None:
    """A run completes and is pruned; a new run takes its id and its step
    runs: the old run's result, published again, is stale."""
    order = f"{namespace}-reused"
    tap = Tap(broker)
    async with (
        td.open_engine(app, broker=tap, signing=signing, seed=3) as engine,
        td.open_worker(app, broker=tap, groups=[f"pay@{namespace}"], signing=signing),
    ):
        run_id = f"{namespace}.reused"
        await engine.start(ship, order, run_id=run_id, namespace=namespace)
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #1"
        [(old, _)] = tap.captured(run_id)
        # Ended a moment ago: past a retention of 0 seconds once time moved.
        await trio.sleep(0.01)
        assert await engine.prune(td.Retention(completed=0)) == 1
        with pytest.raises(td.RunNotFoundError):
            await engine.get(run_id)
        gate = GATES[(order, 2)] = trio.Event()
        await engine.start(ship, order, run_id=run_id, namespace=namespace)
        await wait_until(lambda: RUNS[order] == 2)
        await replay(tap, engine, [old])
        assert (await step_of(engine, run_id)).status == "pending"
        gate.set()
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #2"


async def duplicates_of_an_old_result(
    broker: Broker, namespace: str, signing: td.Keyring | None
) -> None:
    """A result delivered again after it settled its step (as a broker that
    redelivers, or anyone who read it, would): stale each time, and the
    store does not change."""
    order = f"{namespace}-twice"
    tap = Tap(broker)
    async with (
        td.open_engine(app, broker=tap, signing=signing, seed=4) as engine,
        td.open_worker(app, broker=tap, groups=[f"pay@{namespace}"], signing=signing),
    ):
        run_id = f"{namespace}.twice"
        await engine.start(ship, order, run_id=run_id, namespace=namespace)
        with trio.fail_after(PATIENCE):
            assert await engine.result(run_id) == f"shipped charged {order} execution #1"
        [(settled, _)] = tap.captured(run_id)
        before = await engine.store.get_checkpoints(run_id)
        await replay(tap, engine, [settled, settled])
        assert await engine.store.get_checkpoints(run_id) == before
        assert stale_sample(engine) == 2
        assert RUNS[order] == 1


async def decisions_replayed_into_a_new_run_under_a_pruned_id(
    broker: Broker, namespace: str, signing: td.Keyring | None
) -> None:
    """A remote workflow's first decision (call ``add_one(5)``), published
    again while a new run under the pruned run's id waits for its own first
    decision (attempt 1 too): stale; the new run's own decision calls
    ``add_one(6)``."""
    tap = Tap(broker)
    groups = [f"deciders@{namespace}", f"g@{namespace}"]
    run_id = f"{namespace}.decided"
    async with td.open_engine(engine_app, broker=tap, signing=signing, seed=5) as engine:
        async with td.open_worker(app, broker=tap, groups=groups, signing=signing):
            await engine.start(decided_by_name, 5, run_id=run_id, namespace=namespace)
            with trio.fail_after(PATIENCE):
                assert await engine.result(run_id) == 60
        [(first, _)] = tap.captured(run_id, kind="decision", attempt=1)
        await trio.sleep(0.01)
        assert await engine.prune(td.Retention(completed=0)) == 1
        await engine.start(decided_by_name, 6, run_id=run_id, namespace=namespace)
        # No worker decides yet: the run waits for its first decision.
        await wait_until_deciding(engine, run_id)
        await replay(tap, engine, [first])
        [marker] = await engine.store.get_records(run_id)
        assert (marker.kind, marker.status, marker.attempts) == ("decision", "pending", 1)
        added = len(ADDED)
        async with td.open_worker(app, broker=tap, groups=groups, signing=signing):
            with trio.fail_after(PATIENCE):
                assert await engine.result(run_id) == 70
        assert ADDED[added:] == [6]


async def wait_until_deciding(engine: td.Engine, run_id: str) -> None:
    """Wait until ``run_id``'s decision task is out (its decision record
    pending, the task sent)."""

    async def out() -> bool:
        found = [r for r in await engine.store.get_records(run_id) if r.kind == "decision"]
        return bool(found) and found[0].status == "pending" and found[0].started_at is not None

    with trio.fail_after(PATIENCE):
        while not await out():  # noqa: ASYNC110 -- another task's turn writes it
            await trio.sleep(0.05)


async def wait_until_pending(engine: td.Engine, run_id: str, seq: int) -> None:
    """Wait until ``run_id`` has a pending checkpoint at ``seq`` whose
    attempt is out."""

    async def out() -> bool:
        found = [cp for cp in await engine.store.get_checkpoints(run_id) if cp.seq == seq]
        return bool(found) and found[0].status == "pending" and found[0].started_at is not None

    with trio.fail_after(PATIENCE):
        while not await out():  # noqa: ASYNC110 -- another task's turn writes it
            await trio.sleep(0.05)
