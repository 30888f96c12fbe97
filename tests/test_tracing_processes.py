"""``trio-durable engine --tracing``: a real engine process sends its spans
to an OTLP receiver (HTTP, protobuf) that the OTEL_* environment variables
name, under the service name they give, and flushes them as it stops."""

from __future__ import annotations

import signal
from pathlib import Path

import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cli_processes import cli_process, start_runs, wait_for_runs
from test_cli import invoke, one_error_line


async def _receiver(
    received: list[ExportTraceServiceRequest], *, task_status: trio.TaskStatus[str]
) -> None:
    """An OTLP/HTTP trace receiver on a free loopback port."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    async def traces(request: Request) -> Response:
        document = ExportTraceServiceRequest()
        document.ParseFromString(await request.body())
        received.append(document)
        return Response(b"", media_type="application/x-protobuf")

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
    async with trio.open_nursery() as nursery:
        urls: list[str] = await nursery.start(serve, app, config)
        task_status.started(urls[0])


async def test_an_engine_sends_its_spans_where_the_environment_says(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    received: list[ExportTraceServiceRequest] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(_receiver, received)
        args = ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--tracing"]
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,
            "OTEL_SERVICE_NAME": "shop-engine",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        }
        async with cli_process([*args, "--reconcile-interval", "0.2"], env=env) as engine:
            await engine.wait_for("ready: app cli-test")
            await start_runs(store, [("traced-1", "doubled", (3,)), ("traced-2", "hello", ("t",))])
            await wait_for_runs(store, ["traced-1", "traced-2"])
            # Stopping flushes the spans the batch processor holds.
            assert await engine.stop(signal.SIGTERM) == 0
        nursery.cancel_scope.cancel()
    spans = {
        span.name: (
            {a.key: a.value.string_value for a in resource.resource.attributes},
            {a.key: a.value for a in span.attributes},
        )
        for document in received
        for resource in document.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    }
    assert {"step greet", "execute double"} <= spans.keys(), sorted(spans)
    resource, attributes = spans["step greet"]
    assert resource["service.name"] == "shop-engine"
    assert resource["deployment.environment"] == "test"
    assert attributes["trio_durable.run_id"].string_value == "traced-2"


def test_an_unknown_exporter_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    result = invoke(
        ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--tracing"],
        env={"OTEL_TRACES_EXPORTER": "zipkin"},
    )
    assert result.exit_code == 2, result.output
    assert one_error_line(result) == (
        "Error: OTEL_TRACES_EXPORTER names 'zipkin'; --tracing knows otlp, console, none"
    )
