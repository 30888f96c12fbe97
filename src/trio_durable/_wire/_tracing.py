"""OpenTelemetry traces, when switched on (see docs/tracing.md).

Tracing is off unless `open_engine` or `open_worker` is given
``tracing=True`` (the global tracer provider) or a tracer provider. Off, a
`Tracing` does nothing and opentelemetry is never imported, so the core runs
without the ``otel`` extra installed. On, it makes one span per run turn, one
per local step attempt, one per remote step attempt on the engine from
dispatch to settle, and one per remote execution on a worker, the child of
the engine's dispatch span through the W3C trace context the task carries.

Spans take their times from the OpenTelemetry SDK; nothing here reads a
clock.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._base._exceptions import UsageError

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from ._messages import Result, Task

PREFIX: Final = "trio_durable."
"""The prefix of every span attribute trio-durable sets."""

MAX_OPEN_DISPATCHES: Final = 10_000
"""How many dispatch spans an engine keeps open waiting for their results;
past it the oldest is ended unsettled, so a broker that loses results
cannot grow the engine's memory without bound."""

Attributes = Mapping[str, str | int]


def attributes(**values: str | int | None) -> dict[str, str | int]:
    """Span attributes under the ``trio_durable.`` prefix; None values are
    left out."""
    return {PREFIX + key: value for key, value in values.items() if value is not None}


def _error_status(description: str) -> Any:
    from opentelemetry.trace import Status, StatusCode

    return Status(StatusCode.ERROR, description)


@final
class Tracing:
    """An engine's or a worker's spans; does nothing without a tracer.

    Args:
      tracer: The tracer spans come from, or None when tracing is off.
    """

    def __init__(self, tracer: Tracer | None = None) -> None:
        self._tracer = tracer
        # Dispatch spans by (run id, seq, attempt), ended when the result
        # settles; insertion order is the order of dispatch.
        self._open: dict[tuple[str, int, int], Span] = {}

    @property
    def enabled(self) -> bool:
        """Whether spans are made."""
        return self._tracer is not None

    @contextmanager
    def span(
        self,
        name: str,
        attrs_: Attributes,
        *,
        parent: Mapping[str, str] | None = None,
        consumer: bool = False,
    ) -> Iterator[None]:
        """A span around the block, current inside it (so spans a step makes
        itself are its children). An `Exception` leaving the block is
        recorded on it with status ERROR; a Trio cancellation is not an error.

        Args:
          name: The span's name.
          attrs_: Its attributes.
          parent: A W3C trace context carrier (``traceparent``,
            ``tracestate``) to continue; otherwise the current span is the
            parent.
          consumer: Whether the span consumes a message (kind CONSUMER).
        """
        if self._tracer is None:
            yield
            return
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        context = None if parent is None else propagate.extract(dict(parent))
        with self._tracer.start_as_current_span(
            name,
            context=context,
            kind=SpanKind.CONSUMER if consumer else SpanKind.INTERNAL,
            attributes=dict(attrs_),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except Exception as exc:
                span.record_exception(exc)
                span.set_status(_error_status(f"{type(exc).__name__}: {exc}"))
                raise

    def failed(self, description: str) -> None:
        """Mark the current span (a turn whose run failed) as an error."""
        if self._tracer is None:
            return
        from opentelemetry import trace

        trace.get_current_span().set_status(_error_status(description))

    def dispatched(self, task: Task, namespace: str) -> Task:
        """Open the dispatch span of ``task`` (a child of the current span)
        and return the task carrying its trace context."""
        if self._tracer is None:
            return task
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind

        key = (task.run_id, task.seq, task.attempt)
        again = self._open.pop(key, None)
        if again is not None:
            # Sent again (a redispatch, or a repair after a lost write): the
            # earlier span ends here, the new one waits for the result.
            again.set_attribute(PREFIX + "sent_again", True)
            again.end()
        span = self._tracer.start_span(
            f"dispatch {task.step}",
            kind=SpanKind.PRODUCER,
            attributes=attributes(
                run_id=task.run_id,
                workflow=task.workflow,
                step=task.step,
                seq=task.seq,
                attempt=task.attempt,
                namespace=namespace,
                route=task.route,
            ),
        )
        self._open[key] = span
        while len(self._open) > MAX_OPEN_DISPATCHES:
            oldest = next(iter(self._open))
            self._end_unsettled(self._open.pop(oldest))
        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        return attrs.evolve(
            task, traceparent=carrier.get("traceparent"), tracestate=carrier.get("tracestate")
        )

    def settled(self, result: Result) -> None:
        """End the dispatch span of the task ``result`` answers, if this
        engine sent it: an error if the attempt failed."""
        span = self._open.pop((result.run_id, result.seq, result.attempt), None)
        if span is None:
            return
        if result.worker:
            span.set_attribute(PREFIX + "worker", result.worker)
        if result.status == "failed":
            span.set_status(_error_status(result.error or "failed"))
            if result.code is not None:
                span.set_attribute(PREFIX + "error_code", result.code)
        span.end()

    def close(self) -> None:
        """End the dispatch spans still waiting (the engine is closing);
        they are marked unsettled."""
        open_spans, self._open = self._open, {}
        for span in open_spans.values():
            self._end_unsettled(span)

    @staticmethod
    def _end_unsettled(span: Span) -> None:
        span.set_attribute(PREFIX + "unsettled", True)
        span.end()


DISABLED: Final = Tracing()


def make_tracing(setting: bool | TracerProvider) -> Tracing:
    """The `Tracing` that ``tracing=`` of `open_engine` or `open_worker`
    asks for.

    Raises:
      UsageError: Tracing is asked for but opentelemetry-api is not
        installed, or ``setting`` is neither a bool nor a tracer provider.
    """
    if setting is False:
        return Tracing()
    if setting is not True and not callable(getattr(setting, "get_tracer", None)):
        raise UsageError(f"tracing must be True, False or a tracer provider, not {setting!r}")
    try:
        from opentelemetry import trace
    except ImportError:
        raise UsageError(
            "tracing=True needs opentelemetry-api: pip install 'trio-durable[otel]'"
        ) from None
    provider = trace.get_tracer_provider() if setting is True else setting
    return Tracing(provider.get_tracer("trio_durable"))
