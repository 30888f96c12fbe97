"""Observability: events on subscribable Trio channels, and the counts
behind the Prometheus metrics (rendered by `trio_durable._front._prometheus`)."""

from __future__ import annotations

import bisect
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
    "run.terminated",
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
        ``run.suspended``, ``run.cancelled``, ``run.terminated``,
        ``run.routed`` (handed to an
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


# Upper bounds of the turn-latency histogram's buckets, in seconds: a turn
# is mostly store round trips (milliseconds), but one running local steps
# may take minutes.
TURN_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0)

Labels = tuple[tuple[str, str], ...]


def _bound(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(value)


@final
class Metrics:
    """Counts what an engine or a worker did, for the Prometheus metrics
    `trio_durable._front._prometheus` renders (every family is in `FAMILIES`).

    Plain numbers, cheap to update on every event; prometheus-client reads
    them only when metrics are asked for.
    """

    # The families, in the order they are exposed: name (a counter's without
    # its ``_total``), type and help text.
    FAMILIES: Final = {
        "trio_durable_runs": ("counter", "Run events by workflow and event."),
        "trio_durable_steps": ("counter", "Step events by step and event."),
        "trio_durable_step_duration_seconds": ("summary", "Step attempt durations in seconds."),
        "trio_durable_runs_routed": (
            "counter",
            "Failed runs handed to an on-error handler, by code.",
        ),
        "trio_durable_messages_rejected": (
            "counter",
            "Broker messages rejected because they did not decode, by kind (task or result).",
        ),
        "trio_durable_turn_duration_seconds": (
            "histogram",
            "Seconds per turn (lease, replay, writes), by workflow, on the engine's clock.",
        ),
        "trio_durable_messages_unauthenticated": (
            "counter",
            "Broker messages rejected by the signature check, by kind (task or result)"
            " and reason (unsigned, forged or unknown_key).",
        ),
        "trio_durable_messages_stale": (
            "counter",
            "Broker messages rejected as stale, by kind (result): no step waits for them"
            " (a duplicate, or a replay of an earlier execution's result).",
        ),
    }

    def __init__(self) -> None:
        self._values: dict[tuple[str, Labels], float] = {}
        # Turn durations by workflow: how many fell in each bucket (not
        # cumulative; the last is +Inf), their sum and count. Kept apart
        # from ``_values`` since a turn is counted twice per run at least;
        # `samples` gives the cumulative buckets.
        self._turns: dict[str, list[float]] = {}

    def count(self, event: Event) -> None:
        group, _, what = event.kind.partition(".")
        if group == "run":
            self._add("trio_durable_runs_total", (("workflow", event.workflow), ("event", what)))
            if what == "routed":
                code = event.data.get("code")
                self._add(
                    "trio_durable_runs_routed_total",
                    (("code", "*" if code is None else str(code)),),
                )
        else:
            duration = event.data.get("duration")
            self.count_step(
                event.name or "",
                what,
                float(duration) if isinstance(duration, int | float) else None,
            )

    def count_step(self, step: str, what: str, duration: float | None = None) -> None:
        """Count an attempt of ``step`` that ``what`` (``started``,
        ``completed``, ``failed``, ...), and, once it ended, its ``duration``
        in seconds."""
        self._add("trio_durable_steps_total", (("step", step), ("event", what)))
        if what != "started" and duration is not None:
            labels = (("step", step),)
            self._add("trio_durable_step_duration_seconds_sum", labels, duration)
            self._add("trio_durable_step_duration_seconds_count", labels)

    def count_rejected(self, kind: str) -> None:
        """Count a broker message of ``kind`` (``task`` or ``result``)
        rejected at the boundary."""
        self._add("trio_durable_messages_rejected_total", (("kind", kind),))

    def count_unauthenticated(self, kind: str, reason: str) -> None:
        """Count a broker message of ``kind`` (``task`` or ``result``)
        rejected by the signature check, for ``reason`` (``unsigned``,
        ``forged`` or ``unknown_key``; see `_signing`)."""
        self._add(
            "trio_durable_messages_unauthenticated_total", (("kind", kind), ("reason", reason))
        )

    def count_stale(self, kind: str) -> None:
        """Count a broker message of ``kind`` (``result``) rejected because
        nothing waits for it: a duplicate, or a replay of an earlier
        execution's (see `_executions`)."""
        self._add("trio_durable_messages_stale_total", (("kind", kind),))

    def observe_turn(self, workflow: str, seconds: float) -> None:
        """Count a turn of a run of ``workflow`` that took ``seconds``."""
        counts = self._turns.get(workflow)
        if counts is None:
            counts = self._turns[workflow] = [0.0] * (len(TURN_BUCKETS) + 3)
        counts[bisect.bisect_left(TURN_BUCKETS, seconds)] += 1.0
        counts[-2] += seconds
        counts[-1] += 1.0

    def _add(self, name: str, labels: Labels, amount: float = 1.0) -> None:
        key = (name, labels)
        self._values[key] = self._values.get(key, 0.0) + amount

    def samples(self) -> dict[tuple[str, Labels], float]:
        """Every sample counted so far: (name, labels) to value."""
        samples = dict(self._values)
        name = "trio_durable_turn_duration_seconds"
        for workflow, counts in self._turns.items():
            # Every bucket gets a sample, empty ones too.
            total = 0.0
            for bound, count in zip((*TURN_BUCKETS, math.inf), counts, strict=False):
                total += count
                samples[(name + "_bucket", (("workflow", workflow), ("le", _bound(bound))))] = total
            samples[(name + "_sum", (("workflow", workflow),))] = counts[-2]
            samples[(name + "_count", (("workflow", workflow),))] = counts[-1]
        return samples
