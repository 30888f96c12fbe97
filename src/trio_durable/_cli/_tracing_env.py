"""``--tracing`` of the ``engine`` and ``worker`` processes: OpenTelemetry's
SDK, configured from the standard environment variables.

- ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default), ``console`` (spans as
  JSON on stdout), ``none``, or several, comma-separated;
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
  ``..._HEADERS``, ``..._TIMEOUT`` and the rest are read by the OTLP
  exporter itself (HTTP and protobuf: ``http/protobuf`` is the protocol
  this command speaks);
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name the process
  (``trio-durable-engine`` or ``trio-durable-worker`` when unset);
- ``OTEL_BSP_*`` tune the batch span processor.

The SDK and the exporter come with the ``otel-sdk`` extra. The provider is
shut down (its last spans flushed) when the process stops.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final

from ._common import EXIT_USAGE, CommandError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_EXPORTERS: Final = ("otlp", "console", "none")


@contextmanager
def tracer_provider(service: str) -> Iterator[TracerProvider]:
    """An SDK tracer provider as the ``OTEL_*`` variables say, shut down
    (flushed) on exit.

    Raises:
      CommandError: (exit 2) The SDK or the exporter is not installed, or
        ``OTEL_TRACES_EXPORTER`` names an exporter this command lacks.
    """
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        raise CommandError(
            "--tracing needs OpenTelemetry's SDK: pip install 'trio-durable[otel-sdk]'",
            EXIT_USAGE,
        ) from None
    names = [
        name.strip().lower()
        for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if name.strip()
    ]
    unknown = [name for name in names if name not in _EXPORTERS]
    if unknown:
        raise CommandError(
            f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}; --tracing knows"
            f" {', '.join(_EXPORTERS)}",
            EXIT_USAGE,
        )
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "console":
            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                raise CommandError(
                    "--tracing with the otlp exporter needs opentelemetry-exporter-otlp-proto-http:"
                    " pip install 'trio-durable[otel-sdk]'",
                    EXIT_USAGE,
                ) from None
            exporters.append(OTLPSpanExporter())
    # From OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the process's
    # kind where they name no service.
    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service}))
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    try:
        yield provider
    finally:
        provider.shutdown()
