"""OpenTelemetry traces over a real RabbitMQ (docs/tracing.md): the engine
and a worker, each with a tracer provider of its own as two processes
would have, linked only by the W3C trace context the task carries through
the broker. The same checks as over the memory broker (tests/traced.py)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator

import pytest
import trio

import traced
import trio_durable as td
from traced import Recorder, app, check_order_spans, order


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    traced.reset()
    yield
    traced.reset()


async def test_the_worker_span_is_a_child_of_the_engine_dispatch_span_over_rabbitmq(
    real_server: Callable[[str], str],
) -> None:
    url = real_server("rabbitmq")
    # A namespace of its own: no other test's worker takes these tasks.
    namespace = f"traced-{secrets.token_hex(4)}"
    engine_spans, worker_spans = Recorder.make(), Recorder.make()
    with trio.fail_after(60):
        async with (
            td.open_worker(
                app,
                broker=url,
                groups=[f"payments@{namespace}"],
                instance_id=f"{namespace}-w",
                tracing=worker_spans.provider,
            ),
            td.open_engine(app, broker=url, seed=0, tracing=engine_spans.provider) as engine,
        ):
            run_id = f"{namespace}.order"
            await engine.start(order, "book", 30, run_id=run_id, namespace=namespace)
            assert await engine.result(run_id) == "held-book/charged-30"
    check_order_spans(
        engine_spans.spans(),
        worker_spans.spans(),
        run_id=run_id,
        namespace=namespace,
        worker_id=f"{namespace}-w",
    )
