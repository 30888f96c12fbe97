"""Tasks and results over the broker's size limit (``max_payload``), on
memory brokers with a small limit: the step fails with code
``payload_too_large``, for good and at once; its neighbours in the batch go
through; nothing is retried forever or left waiting."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from trio_durable._brokers._base import (
    RESULTS,
    Consumer,
    Outgoing,
    PayloadTooLarge,
    WorkerDescriptor,
    check_payload_sizes,
)
from trio_durable._brokers._memory import MemoryBroker

LIMIT: Final = 4_000
"""The memory brokers' max_payload here (bytes)."""

app = td.App("payload")

calls: list[tuple[str, int, float]] = []
"""(step, size of its argument, trio time) per call of a remote step."""

_names = itertools.count()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    yield
    calls.clear()


def memory_url() -> str:
    return f"memory://payload-{next(_names)}?max_payload={LIMIT}"


@app.step(group="blobs", retry=td.Retry(attempts=3, backoff=1.0, jitter=0))
async def measure(text: str) -> int:
    calls.append(("measure", len(text), trio.current_time()))
    return len(text)


@app.step(group="blobs", retry=td.Retry(attempts=3, backoff=1.0, jitter=0))
async def inflate(size: int) -> str:
    """Returns ``size`` characters, after a second (so that the results of
    a wave reach the worker's publisher together, in one batch)."""
    calls.append(("inflate", size, trio.current_time()))
    await trio.sleep(1)
    return "x" * size


@app.step()
async def note(text: str) -> str:
    return f"noted {len(text)}"


@app.workflow()
async def measure_all(ctx: td.Context, texts: list[str]) -> list[dict[str, Any]]:
    return await ctx.all_settled(measure, texts)


@app.workflow()
async def inflate_all(ctx: td.Context, sizes: list[int]) -> list[dict[str, Any]]:
    return await ctx.all_settled(inflate, sizes)


@app.workflow()
async def guarded(ctx: td.Context, text: str, size: int) -> list[str]:
    """A workflow that goes on past its failed remote steps."""
    seen = [await ctx.step(note, text)]
    try:
        length = await ctx.step(measure, text)
        seen.append(str(length))
    except td.RemoteStepError as exc:
        seen.append(f"{exc.step}: {exc.code} after {exc.attempts} attempt(s)")
    try:
        seen.append(await ctx.step(inflate, size))
    except td.RemoteStepError as exc:
        seen.append(f"{exc.step}: {exc.code} after {exc.attempts} attempt(s)")
    length = await ctx.step(measure, "small")
    seen.append(str(length))
    return seen


@app.workflow()
async def unguarded(ctx: td.Context, text: str) -> int:
    return await ctx.step(measure, text)


def watch(broker: Any, monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[str, int]]]:
    """Record each dispatch through ``broker``: its messages' queues and sizes."""
    batches: list[list[tuple[str, int]]] = []
    real = broker.dispatch

    async def dispatch(messages: Sequence[Outgoing]) -> None:
        batches.append([(m.queue, len(m.body)) for m in messages])
        await real(messages)

    monkeypatch.setattr(broker, "dispatch", dispatch)
    return batches


def check_too_large(outcome: dict[str, Any], of: str) -> None:
    assert outcome["status"] == "rejected"
    assert outcome["code"] == "payload_too_large"
    size = outcome["details"]["size"]
    assert size > LIMIT
    assert outcome["details"] == {"size": size, "limit": LIMIT, "of": of}
    assert f" is {size} bytes, over the broker's max_payload of {LIMIT} bytes" in outcome["error"]


async def test_an_input_over_the_limit_fails_its_step_at_dispatch(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    texts = ["a", "b" * LIMIT, "cc"]
    async with open_test_engine(app, broker=memory_url(), serve=["blobs"]) as engine:
        assert engine.broker.max_payload == LIMIT
        batches = watch(engine.broker, monkeypatch)
        await engine.start(measure_all, texts, run_id="inputs")
        outcomes = await engine.result("inputs")
        checkpoints = await engine.store.get_checkpoints("inputs", 1, 3)
    assert outcomes[0] == {"status": "fulfilled", "value": 1}
    assert outcomes[2] == {"status": "fulfilled", "value": 2}
    check_too_large(outcomes[1], "input")
    assert "its input is too large to send" in outcomes[1]["error"]
    # The step never ran and was not retried (it may be retried thrice); its
    # neighbours ran once. Nothing waited: no dispatch was tried again.
    assert sorted(calls) == [("measure", 1, 0.0), ("measure", 2, 0.0)]
    assert [(cp.status, cp.attempts) for cp in checkpoints] == [
        ("completed", 1),
        ("failed", 1),
        ("completed", 1),
    ]
    assert trio.current_time() == 0.0
    # One dispatch carried the wave: the two tasks, and in place of the
    # third, its failure to the engine's results queue.
    tasks = [batch for batch in batches if any(q == "blobs" for q, _ in batch)]
    assert len(tasks) == 1
    [(first, _), (failure, failure_size), (third, _)] = tasks[0]
    assert (first, third) == ("blobs", "blobs")
    assert failure.startswith(RESULTS)
    assert failure_size <= LIMIT


async def test_an_output_over_the_limit_fails_its_step_on_the_worker(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = memory_url()
    async with (
        open_test_engine(app, broker=url) as engine,
        td.open_worker(app, broker=url, groups=["blobs"], seed=0, wall_clock=fixed_wall) as worker,
    ):
        batches = watch(engine.broker, monkeypatch)
        await engine.start(inflate_all, [10, 2 * LIMIT, 20], run_id="outputs")
        outcomes = await engine.result("outputs")
        await worker.wait_idle()
    assert outcomes[0] == {"status": "fulfilled", "value": "x" * 10}
    assert outcomes[2] == {"status": "fulfilled", "value": "x" * 20}
    check_too_large(outcomes[1], "result")
    assert "its output is too large to send back" in outcomes[1]["error"]
    # Each step ran once: the oversized one was not retried.
    assert sorted(size for _, size, _ in calls) == [10, 20, 2 * LIMIT]
    assert trio.current_time() == 1.0
    # The three results went back in one batch, the failure in place of the
    # oversized one.
    results = [batch for batch in batches if all(q.startswith(RESULTS) for q, _ in batch)]
    assert [len(batch) for batch in results] == [3]
    assert all(size <= LIMIT for _, size in results[0])
    stats = worker.statistics()
    assert (stats.completed, stats.in_flight) == (3, 0)


async def test_a_workflow_sees_the_failure_like_any_other(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    big = "z" * LIMIT
    async with open_test_engine(app, broker=memory_url(), serve=["blobs"]) as engine:
        await engine.start(guarded, big, 2 * LIMIT, run_id="guarded")
        assert await engine.result("guarded") == [
            f"noted {LIMIT}",
            "measure: payload_too_large after 1 attempt(s)",
            "inflate: payload_too_large after 1 attempt(s)",
            "5",
        ]
        await engine.start(unguarded, big, run_id="unguarded")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result("unguarded")
        run = await engine.get("unguarded")
    assert caught.value.code == "payload_too_large"
    assert run.status == "failed"
    assert run.wake_at is None


class Understating:
    """A view of a memory broker that does not tell its limit
    (``max_payload`` None), or tells a stale one, and refuses what is over
    the real one, only for messages to ``refuse_on`` queues: a broker that
    reconnected to a server with a lower limit."""

    def __init__(
        self, inner: MemoryBroker, limit: int, *, claimed: int | None, refuse_on: str = ""
    ) -> None:
        self.inner = inner
        self.limit = limit
        self.claimed = claimed
        self.refuse_on = refuse_on
        self.refusals = 0

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.claimed

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        try:
            check_payload_sizes(
                [m for m in messages if m.queue.startswith(self.refuse_on)], self.limit
            )
        except PayloadTooLarge:
            self.refusals += 1
            raise
        await self.inner.dispatch(messages)

    def open_consumer(self, queue: str, *, prefetch: int) -> AbstractAsyncContextManager[Consumer]:
        return self.inner.open_consumer(queue, prefetch=prefetch)

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues)

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    async def aclose(self) -> None:
        await self.inner.aclose()


@asynccontextmanager
async def engine_and_worker(
    open_test_engine: EngineFactory, broker: Understating
) -> AsyncIterator[tuple[td.Engine, td.Worker]]:
    async with (
        open_test_engine(app, broker=broker) as engine,
        td.open_worker(
            app, broker=broker, groups=["blobs"], seed=0, wall_clock=fixed_wall
        ) as worker,
    ):
        yield engine, worker


@pytest.mark.parametrize("claimed", [None, 4 * LIMIT])
async def test_a_limit_lower_than_the_broker_said_is_met_by_fitting_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, claimed: int | None
) -> None:
    broker = Understating(MemoryBroker(), LIMIT, claimed=claimed)
    with trio.fail_after(600):
        async with engine_and_worker(open_test_engine, broker) as (engine, worker):
            await engine.start(measure_all, ["a", "b" * LIMIT], run_id="inputs")
            await engine.start(inflate_all, [10, 2 * LIMIT], run_id="outputs")
            inputs = await engine.result("inputs")
            outputs = await engine.result("outputs")
            await worker.wait_idle()
    assert inputs[0] == {"status": "fulfilled", "value": 1}
    assert outputs[0] == {"status": "fulfilled", "value": "x" * 10}
    check_too_large(inputs[1], "input")
    check_too_large(outputs[1], "result")
    # The engine's dispatch and the worker's result batch were each refused
    # once, then fitted to the limit the refusal named.
    assert broker.refusals == 2
    assert sorted(size for _, size, _ in calls) == [1, 10, 2 * LIMIT]


async def test_a_result_too_large_for_even_its_failure_is_dropped_not_retried(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Results may be at most 100 bytes: not even a failure fits.
    broker = Understating(MemoryBroker(), 100, claimed=None, refuse_on=RESULTS)
    with trio.fail_after(600):
        async with engine_and_worker(open_test_engine, broker) as (engine, worker):
            await engine.start(inflate_all, [1, 2], run_id="outputs")
            # The steps end at +1 s (virtual): their results are refused.
            await trio.sleep(2)
            await worker.wait_idle()
            run = await engine.get("outputs")
            queued = broker.inner.depth("blobs")
    # The tasks were dead-lettered (the memory broker drops them), not
    # requeued: the worker is idle and no task waits on the broker.
    stats = worker.statistics()
    assert (stats.received, stats.in_flight, queued) == (2, 0, 0)
    assert run.status == "suspended"
    dropped = [r for r in caplog.records if "not even its payload_too_large failure" in r.message]
    assert len(dropped) == 2
    assert all(r.levelno == logging.ERROR for r in dropped)


# -- the memory broker's limit -----------------------------------------------------


async def test_the_memory_broker_refuses_a_batch_with_a_body_over_its_limit() -> None:
    broker = MemoryBroker(max_payload=10)
    assert broker.max_payload == 10
    with pytest.raises(PayloadTooLarge) as caught:
        await broker.dispatch(
            [Outgoing(queue="q", body=b"small"), Outgoing(queue="q", body=b"x" * 11)]
        )
    assert (caught.value.queue, caught.value.size, caught.value.limit) == ("q", 11, 10)
    assert "11 bytes for queue 'q' is over the broker's limit of 10 bytes" in str(caught.value)
    # Nothing of the batch was sent.
    assert broker.depth("q") == 0
    await broker.dispatch([Outgoing(queue="q", body=b"x" * 10)])
    assert broker.depth("q") == 1
    assert MemoryBroker().max_payload is None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_the_memory_broker_limit_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_payload"):
        MemoryBroker(max_payload=bad)  # type: ignore[arg-type]
