"""Observability: events on subscribable Trio channels, and metrics in the
Prometheus text format."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final, Literal, final

import attrs
import trio

EventKind = Literal[
    "run.started",
    "run.completed",
    "run.failed",
    "run.suspended",
    "run.cancelled",
    "run.routed",
    "run.unrouted",
    "step.started",
    "step.completed",
    "step.failed",
    "step.redispatched",
]


@final
@attrs.define(frozen=True, kw_only=True)
class Event:
    """Something that happened to a run.

    Attributes:
      kind: ``run.started``, ``run.completed``, ``run.failed``,
        ``run.suspended``, ``run.cancelled``, ``run.routed`` (handed to an
        on-error handler), ``run.unrouted`` (a route matched but live
        workers disagree on the routes), ``step.started``,
        ``step.completed``, ``step.failed`` or ``step.redispatched``.
      run_id: The run.
      workflow: The run's workflow name.
      at: When it happened (durable time).
      seq: The checkpoint's seq, for step events.
      name: The step's name, for step events.
      data: More about it: ``attempt`` and ``duration`` of a step,
        ``error`` and ``code`` of a failure, ``compensation`` for an undo.
    """

    kind: EventKind
    run_id: str
    workflow: str
    at: float
    seq: int | None = None
    name: str | None = None
    data: dict[str, Any] = attrs.field(factory=dict)


DEFAULT_EVENT_BUFFER: Final = 10_000


@final
class EventHub:
    """Fans events out to subscribers without ever blocking the engine.

    A subscriber that falls more than its buffer behind loses the newest
    events; the losses are counted in ``dropped``.
    """

    def __init__(self) -> None:
        self._subscribers: list[trio.MemorySendChannel[Event]] = []
        self.dropped = 0

    @contextmanager
    def subscribe(
        self, buffer: float = DEFAULT_EVENT_BUFFER
    ) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        send, receive = trio.open_memory_channel[Event](buffer)
        self._subscribers.append(send)
        try:
            with receive:
                yield receive
        finally:
            self._subscribers.remove(send)
            send.close()

    def emit(self, event: Event) -> None:
        for send in self._subscribers:
            try:
                send.send_nowait(event)
            except trio.WouldBlock:
                self.dropped += 1
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{key}="{_escape(val)}"' for key, val in labels) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == int(value):
        return str(int(value))
    return repr(value)


@final
class Metrics:
    """Counters exposed in the Prometheus text format (version 0.0.4).

    - ``trio_durable_runs_total{workflow, event}``: run events.
    - ``trio_durable_steps_total{step, event}``: step events.
    - ``trio_durable_step_duration_seconds{step}``: a summary (``_sum`` and
      ``_count``) of step attempt durations.
    - ``trio_durable_messages_rejected_total{kind}``: broker messages
      rejected because they did not decode (``kind`` is ``task`` or
      ``result``).
    """

    _HELP: Final = {
        "trio_durable_runs_total": ("counter", "Run events by workflow and event."),
        "trio_durable_steps_total": ("counter", "Step events by step and event."),
        "trio_durable_step_duration_seconds": ("summary", "Step attempt durations in seconds."),
        "durable_runs_routed_total": (
            "counter",
            "Failed runs handed to an on-error handler, by code.",
        ),
        "trio_durable_messages_rejected_total": (
            "counter",
            "Broker messages rejected because they did not decode, by kind (task or result).",
        ),
    }

    def __init__(self) -> None:
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    def count(self, event: Event) -> None:
        group, _, what = event.kind.partition(".")
        if group == "run":
            self._add("trio_durable_runs_total", (("workflow", event.workflow), ("event", what)))
            if what == "routed":
                code = event.data.get("code")
                self._add(
                    "durable_runs_routed_total", (("code", "*" if code is None else str(code)),)
                )
        else:
            step = event.name or ""
            self._add("trio_durable_steps_total", (("step", step), ("event", what)))
            duration = event.data.get("duration")
            if what != "started" and isinstance(duration, int | float):
                labels = (("step", step),)
                self._add("trio_durable_step_duration_seconds_sum", labels, float(duration))
                self._add("trio_durable_step_duration_seconds_count", labels)

    def count_rejected(self, kind: str) -> None:
        """Count a broker message of ``kind`` (``task`` or ``result``)
        rejected at the boundary."""
        self._add("trio_durable_messages_rejected_total", (("kind", kind),))

    def _add(self, name: str, labels: tuple[tuple[str, str], ...], amount: float = 1.0) -> None:
        key = (name, labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 if never counted)."""
        return self._values.get((name, tuple(labels.items())), 0.0)

    def render(self, *others: Metrics) -> str:
        """The counters in the text format, with those of ``others`` (an
        engine's embedded worker) added in."""
        values = dict(self._values)
        for other in others:
            for key, value in other._values.items():
                values[key] = values.get(key, 0.0) + value
        lines: list[str] = []
        for family, (kind, help_text) in self._HELP.items():
            samples = sorted(
                (name, labels, value)
                for (name, labels), value in values.items()
                if name == family or name.startswith(family + "_")
            )
            lines.append(f"# HELP {family} {help_text}")
            lines.append(f"# TYPE {family} {kind}")
            lines.extend(
                f"{name}{_labels(labels)} {_number(value)}" for name, labels, value in samples
            )
        return "\n".join(lines) + "\n"
