"""OpenTelemetry traces over the memory broker (docs/tracing.md): spans for
turns, local step attempts, remote dispatch-to-settle on the engine and
execution on a worker, the worker's a child of the engine's through the
trace context in the task; and none of it without ``tracing=``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
import trio

import traced
import trio_durable as td
from conftest import EngineFactory, fixed_wall
from traced import Recorder, app, check_order_spans, order
from trio_durable._options import EngineOptions, WorkerOptions
from trio_durable.brokers import Outgoing


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    traced.reset()
    yield
    traced.reset()


async def test_the_worker_span_is_a_child_of_the_engine_dispatch_span(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    engine_spans, worker_spans = Recorder.make(), Recorder.make()
    broker = td.MemoryBroker()
    async with (
        open_test_engine(app, broker=broker, tracing=engine_spans.provider) as engine,
        td.open_worker(
            app,
            broker=broker,
            groups=["payments"],
            instance_id="w1",
            wall_clock=fixed_wall,
            seed=1,
            tracing=worker_spans.provider,
        ),
    ):
        await engine.start(order, "book", 30, run_id="o-1")
        assert await engine.result("o-1") == "held-book/charged-30"
    check_order_spans(
        engine_spans.spans(),
        worker_spans.spans(),
        run_id="o-1",
        namespace="default",
        worker_id="w1",
    )


async def test_an_embedded_worker_traces_too(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    spans = Recorder.make()
    async with open_test_engine(
        app, serve=["payments@shop"], tracing=spans.provider, engine_id="e1"
    ) as engine:
        await engine.start(order, "cup", 5, run_id="o-2", namespace="shop")
        assert await engine.result("o-2") == "held-cup/charged-5"
    everything = spans.spans()
    check_order_spans(everything, everything, run_id="o-2", namespace="shop", worker_id="e1.worker")


async def test_a_failed_run_marks_its_last_turn_as_an_error(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    doomed = td.App("doomed")

    @doomed.step()
    async def boom() -> None:
        raise td.FatalError("no way")

    @doomed.workflow()
    async def wf(ctx: td.Context) -> None:
        await ctx.step(boom)

    spans = Recorder.make()
    async with open_test_engine(doomed, tracing=spans.provider) as engine:
        await engine.start(wf, run_id="d-1")
        with pytest.raises(td.RunFailed):
            await engine.result("d-1")
    step = traced.the(spans.spans(), "step boom")
    turn = traced.the(spans.spans(), "turn wf")
    assert step.status.description == "FatalError: no way"
    assert turn.status.status_code.name == "ERROR"
    assert turn.status.description is not None
    assert turn.status.description.startswith("run failed: ")


async def test_without_tracing_no_span_is_made_and_tasks_carry_no_context(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    broker = td.MemoryBroker()
    sent: list[bytes] = []
    dispatch = broker.dispatch

    async def watch(messages: Sequence[Outgoing]) -> None:
        sent.extend(message.body for message in messages)
        await dispatch(messages)

    broker.dispatch = watch  # type: ignore[method-assign]
    async with open_test_engine(app, broker=broker, serve=["payments"]) as engine:
        await engine.start(order, "pen", 2, run_id="o-3")
        assert await engine.result("o-3") == "held-pen/charged-2"
    assert sent
    assert all(b"traceparent" not in body for body in sent)


def test_tracing_must_be_a_bool_or_a_tracer_provider() -> None:
    for options in (EngineOptions, WorkerOptions):
        with pytest.raises(td.UsageError, match="tracing must be True, False or a tracer provider"):
            options(tracing="yes")  # type: ignore[arg-type]
