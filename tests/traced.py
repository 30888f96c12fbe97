"""A traced order: the workflow, the engine and worker with their own
in-memory span exporters, and the checks on the spans they record. Shared
by tests/test_tracing.py (the memory broker) and
tests/integration/test_tracing_rabbitmq.py (a real RabbitMQ).

The engine and the worker each get a tracer provider of their own, as two
processes would: the only link between their spans is the W3C trace context
the task carries across the broker.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import attrs
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import trio_durable as td

app = td.App("traced")

flaky_calls: list[int] = []


@app.step()
async def reserve(item: str) -> str:
    return f"held-{item}"


@app.step(retry=td.Retry(attempts=2, backoff=0.5, jitter=0.0))
async def flaky(item: str) -> str:
    flaky_calls.append(len(flaky_calls))
    if len(flaky_calls) == 1:
        raise RuntimeError("the first try fails")
    return item


@app.step(group="payments")
async def charge(amount: int) -> str:
    return f"charged-{amount}"


@app.step(group="payments")
async def refuse(amount: int) -> str:
    raise td.FatalError("card declined", code="card_declined")


@app.workflow()
async def order(ctx: td.Context, item: str, amount: int) -> str:
    held = await ctx.step(reserve, item)
    await ctx.step(flaky, item)
    paid = await ctx.step(charge, amount)
    with contextlib.suppress(td.RemoteStepError):
        await ctx.step(refuse, amount)
    return f"{held}/{paid}"


@attrs.define
class Recorder:
    """A tracer provider that keeps the spans it ends in memory."""

    provider: TracerProvider
    exporter: InMemorySpanExporter

    @classmethod
    def make(cls) -> Recorder:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        return cls(provider, exporter)

    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


def the(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


def attributes_of(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def check_order_spans(
    engine: Sequence[ReadableSpan],
    worker: Sequence[ReadableSpan],
    *,
    run_id: str,
    namespace: str,
    worker_id: str,
) -> None:
    """What one run of `order` leaves in the engine's and the worker's
    exporters."""
    where = {"trio_durable.run_id": run_id, "trio_durable.workflow": "order"}
    here = {**where, "trio_durable.namespace": namespace}

    # A span per turn: the run suspends at each remote step, so it takes
    # more than one turn.
    turns = named(engine, "turn order")
    assert len(turns) >= 3
    for turn in turns:
        assert attributes_of(turn) == here
        assert turn.status.status_code is StatusCode.UNSET

    # A span per local step attempt, a child of its turn; the failed
    # attempt is an error with the exception recorded.
    turn_ids = {turn.context.span_id for turn in turns}
    reserved = the(engine, "step reserve")
    assert attributes_of(reserved) == {
        **here,
        "trio_durable.step": "reserve",
        "trio_durable.seq": 1,
        "trio_durable.attempt": 1,
    }
    assert reserved.parent is not None
    assert reserved.parent.span_id in turn_ids
    first, second = sorted(named(engine, "step flaky"), key=lambda s: s.start_time or 0)
    assert attributes_of(first)["trio_durable.attempt"] == 1
    assert attributes_of(second)["trio_durable.attempt"] == 2
    assert first.status.status_code is StatusCode.ERROR
    assert first.status.description == "RuntimeError: the first try fails"
    assert [event.name for event in first.events] == ["exception"]
    assert second.status.status_code is StatusCode.UNSET

    # Remote steps: the engine's dispatch span (a child of the turn that
    # sent it) is the parent of the worker's execution span, across the
    # broker.
    for step, seq, failed in (("charge", 3, False), ("refuse", 4, True)):
        sent = the(engine, f"dispatch {step}")
        ran = the(worker, f"execute {step}")
        assert sent.kind is SpanKind.PRODUCER
        assert ran.kind is SpanKind.CONSUMER
        assert sent.parent is not None
        assert sent.parent.span_id in turn_ids
        assert ran.parent is not None
        assert ran.parent.is_remote
        assert ran.context.trace_id == sent.context.trace_id
        assert ran.parent.span_id == sent.context.span_id
        step_attributes = {
            **here,
            "trio_durable.step": step,
            "trio_durable.seq": seq,
            "trio_durable.attempt": 1,
        }
        assert attributes_of(ran) == {**step_attributes, "trio_durable.worker": worker_id}
        route = "payments" if namespace == "default" else f"payments@{namespace}"
        expected_sent = {
            **step_attributes,
            "trio_durable.route": route,
            "trio_durable.worker": worker_id,
        }
        if failed:
            expected_sent["trio_durable.error_code"] = "card_declined"
        assert attributes_of(sent) == expected_sent
        # Settled after the worker ran it.
        assert sent.end_time is not None
        assert ran.end_time is not None
        assert sent.end_time >= ran.end_time
        if failed:
            assert sent.status.status_code is StatusCode.ERROR
            assert sent.status.description == "card declined"
            assert ran.status.status_code is StatusCode.ERROR
            assert ran.status.description == "FatalError: card declined"
        else:
            assert sent.status.status_code is StatusCode.UNSET
            assert ran.status.status_code is StatusCode.UNSET


def reset() -> None:
    flaky_calls.clear()
