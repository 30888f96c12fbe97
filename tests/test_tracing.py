"""OpenTelemetry traces over the memory broker (docs/tracing.md): spans for
turns, local step attempts, remote dispatch-to-settle on the engine and
execution on a worker, the worker's a child of the engine's through the
trace context in the task; and none of it without ``tracing=``."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import trio

import traced
import trio_durable as td
from conftest import EngineFactory, fixed_wall
from traced import Recorder, app, check_order_spans, order
from trio_durable._kernel._engine_options import EngineOptions
from trio_durable._kernel._options import WorkerOptions
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


def page_example(tmp_path: Path) -> Path:
    """The first Python block of docs/tracing.md, as a script."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "tracing.md").read_text()
    example = re.search(r"```python\n(.*?)```", page, re.DOTALL)
    assert example is not None
    script = tmp_path / "example.py"
    script.write_text(example.group(1))
    return script


async def test_the_example_of_the_tracing_page_prints_the_spans_it_shows(tmp_path: Path) -> None:
    script = page_example(tmp_path)
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, str(script)], capture_stdout=True, capture_stderr=True
        )
    assert done.stderr == b""
    rows = [line.split() for line in done.stdout.decode().splitlines()]
    names = [" ".join(row[:2]) for row in rows]
    assert names == [
        "turn order",
        "step reserve",
        "dispatch charge",
        "execute charge",
        "turn order",
    ]
    ids = [row[2] for row in rows]
    parents = [row[4] for row in rows]
    assert parents == ["-", ids[0], ids[0], ids[2], "-"]


async def test_tracing_without_the_otel_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, open_test_engine: EngineFactory
) -> None:
    # None in sys.modules makes `import opentelemetry` raise ImportError, as
    # it does where the extra is not installed.
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(td.UsageError, match=r"pip install 'trio-durable\[otel\]'"):
        async with open_test_engine(app, tracing=True):
            pass  # pragma: no cover
    with pytest.raises(td.UsageError, match=r"pip install 'trio-durable\[otel\]'"):
        async with td.open_worker(app, groups=["payments"], tracing=True):
            pass  # pragma: no cover


GLOBAL_PROVIDER = """
import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import trio_durable as td

app = td.App("global")


@app.step()
async def one() -> int:
    return 1


@app.workflow()
async def wf(ctx: td.Context) -> int:
    return await ctx.step(one)


async def main() -> None:
    async with td.open_engine(app, tracing=True) as engine:
        await engine.start(wf, run_id="g-1")
        await engine.result("g-1")


exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
trio.run(main)
print(sorted(span.name for span in exporter.get_finished_spans()))
"""


async def test_tracing_true_uses_the_global_tracer_provider() -> None:
    # In a process of its own: the global provider can be set only once.
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-c", GLOBAL_PROVIDER], capture_stdout=True, capture_stderr=True
        )
    assert done.stderr == b""
    assert done.stdout.decode().strip() == "['step one', 'turn wf']"
