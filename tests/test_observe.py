"""Events on subscriber channels, and metrics in the Prometheus text format."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory

app = td.App("observe")


@app.step()
async def add(a: int, b: int) -> int:
    await trio.sleep(1.5)
    return a + b


@app.step(retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0))
async def flaky(x: int) -> int:
    if x < 0:
        raise td.FatalError("negative", code="negative", details={"x": x})
    await trio.sleep(0.25)
    raise RuntimeError(f"flaky {x}")


@app.workflow()
async def simple(ctx: td.Context, x: int) -> int:
    y = await ctx.step(add, x, 1)
    await ctx.sleep(5)
    return await ctx.step(add, y, 1)


@app.workflow()
async def failing(ctx: td.Context, x: int) -> int:
    return await ctx.step(flaky, x)


@app.workflow()
async def chatty(ctx: td.Context, n: int) -> int:
    total = 0
    for i in range(n):
        total += await ctx.step(add, i, 0)
    return total


def _received(rx: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    events: list[td.Event] = []
    while True:
        try:
            events.append(rx.receive_nowait())
        except trio.WouldBlock:
            return events


def _shape(events: list[td.Event]) -> list[tuple[Any, ...]]:
    return [(e.kind, e.run_id, e.seq, e.name, e.at - WALL_START) for e in events]


async def test_event_sequence_of_a_simple_run(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(simple, 1, run_id="s")
            assert await engine.result("s") == 3
            events = _received(rx)
    assert _shape(events) == [
        ("run.started", "s", None, None, 0.0),
        ("step.started", "s", 1, "add", 0.0),
        ("step.completed", "s", 1, "add", 1.5),
        ("run.suspended", "s", None, None, 1.5),
        # The replay of seq 1 and the timer at seq 2 emit nothing.
        ("step.started", "s", 3, "add", 6.5),
        ("step.completed", "s", 3, "add", 8.0),
        ("run.completed", "s", None, None, 8.0),
    ]
    assert all(e.workflow == "simple" for e in events)
    assert [e.data for e in events] == [
        {},
        {"attempt": 1},
        {"attempt": 1, "duration": 1.5},
        {"wake_at": WALL_START + 6.5},
        {"attempt": 1},
        {"attempt": 1, "duration": 1.5},
        {},
    ]


async def test_failures_emit_step_failed_and_run_failed_with_the_code(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(failing, -1, run_id="fatal")
            with pytest.raises(td.RunFailed):
                await engine.result("fatal")
            fatal = _received(rx)
            await engine.start(failing, 2, run_id="retried")
            with pytest.raises(td.RunFailed):
                await engine.result("retried")
            retried = _received(rx)
    assert [(e.kind, e.seq, e.name, e.data) for e in fatal] == [
        ("run.started", None, None, {}),
        ("step.started", 1, "flaky", {"attempt": 1}),
        (
            "step.failed",
            1,
            "flaky",
            {"attempt": 1, "duration": 0.0, "error": "negative", "code": "negative", "final": True},
        ),
        ("run.failed", None, None, {"error": "negative", "code": "negative"}),
    ]
    # Three attempts, 0.25 s each, with waits of 1 s and 2 s between them.
    assert [(e.kind, e.data.get("attempt"), e.at - WALL_START) for e in retried] == [
        ("run.started", None, 0.0),
        ("step.started", 1, 0.0),
        ("step.failed", 1, 0.25),
        ("step.started", 2, 1.25),
        ("step.failed", 2, 1.5),
        ("step.started", 3, 3.5),
        ("step.failed", 3, 3.75),
        ("run.failed", None, 3.75),
    ]
    failed = [e.data for e in retried if e.kind == "step.failed"]
    assert [(d["final"], d["error"], d["code"], d["duration"]) for d in failed] == [
        (False, "flaky 2", None, 0.25),
        (False, "flaky 2", None, 0.25),
        (True, "flaky 2", None, 0.25),
    ]
    assert retried[-1].data == {"error": "flaky 2", "code": None}


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(
    rf"^(?P<name>{_NAME})"
    r"(?:\{(?P<labels>[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\n]|\\[\\\"n])*\""
    r"(?:,[a-zA-Z_][a-zA-Z0-9_]*=\"(?:[^\"\\\n]|\\[\\\"n])*\")*)?\})?"
    r" (?P<value>\S+)$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def parse_exposition(text: str) -> tuple[dict[str, tuple[str, str]], dict[tuple[Any, ...], float]]:
    """Parse Prometheus text format 0.0.4 strictly.

    Returns the families (name -> (type, help)) and the samples
    ((name, sorted label pairs) -> value). Fails on anything malformed: a
    sample before its family's TYPE or outside its family's block, a family
    typed twice, a duplicate sample, a suffix the family's type does not allow.
    """
    assert text.endswith("\n")
    families: dict[str, tuple[str, str]] = {}
    helps: dict[str, str] = {}
    samples: dict[tuple[Any, ...], float] = {}
    current = ""
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            assert re.fullmatch(_NAME, name), line
            assert name not in helps, f"HELP twice for {name}"
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            assert re.fullmatch(_NAME, name), line
            assert kind in ("counter", "gauge", "summary", "histogram", "untyped"), line
            assert name not in families, f"TYPE twice for {name}"
            families[name] = (kind, helps.get(name, ""))
            current = name
        else:
            assert not line.startswith("#"), line
            match = _SAMPLE.match(line)
            assert match is not None, f"malformed sample line {line!r}"
            name = match["name"]
            kind = ""
            family = name
            for suffix in ("", "_sum", "_count", "_bucket"):
                if suffix and name.endswith(suffix) and name[: -len(suffix)] in families:
                    family = name[: -len(suffix)]
                    kind = families[family][0]
                    break
                if not suffix and name in families:
                    kind = families[name][0]
                    break
            assert kind, f"sample {name} before its family's TYPE"
            assert family == current, f"sample {name} outside its family's block"
            if kind == "summary":
                assert name in (family + "_sum", family + "_count"), line
            if kind == "counter":
                assert name == family, line
            labels = tuple(sorted(_LABEL.findall(match["labels"] or "")))
            key = (name, labels)
            assert key not in samples, f"duplicate sample {line!r}"
            value = float(match["value"])
            assert not math.isnan(value)
            samples[key] = value
    assert set(helps) == set(families)
    return families, samples


def _key(name: str, **labels: str) -> tuple[Any, ...]:
    return (name, tuple(sorted(labels.items())))


TURN_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60, 300)


def _histogram(
    name: str, observed: dict[float, int], **labels: str
) -> dict[tuple[Any, ...], float]:
    """The samples of one histogram series that observed each of
    ``observed``'s durations so many times (buckets are cumulative)."""
    samples: dict[tuple[Any, ...], float] = {}
    for bound in (*TURN_BOUNDS, math.inf):
        le = "+Inf" if math.isinf(bound) else str(float(bound))
        count = sum(n for seconds, n in observed.items() if seconds <= bound)
        samples[_key(name + "_bucket", le=le, **labels)] = count
    samples[_key(name + "_sum", **labels)] = sum(s * n for s, n in observed.items())
    samples[_key(name + "_count", **labels)] = sum(observed.values())
    return samples


async def test_metrics_are_valid_prometheus_text_with_exact_values(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        families, samples = parse_exposition(engine.metrics())
        assert samples == {("trio_durable_leases_held", ()): 0}
        await engine.start(simple, 1, run_id="s1")
        await engine.start(simple, 2, run_id="s2")
        await engine.start(failing, 2, run_id="f")
        await engine.result("s1")
        await engine.result("s2")
        with pytest.raises(td.RunFailed):
            await engine.result("f")
        families, samples = parse_exposition(engine.metrics())
    assert families == {
        "trio_durable_runs_total": ("counter", "Run events by workflow and event."),
        "trio_durable_steps_total": ("counter", "Step events by step and event."),
        "trio_durable_step_duration_seconds": ("summary", "Step attempt durations in seconds."),
        "trio_durable_runs_routed_total": (
            "counter",
            "Failed runs handed to an on-error handler, by code.",
        ),
        "trio_durable_messages_rejected_total": (
            "counter",
            "Broker messages rejected because they did not decode, by kind (task or result).",
        ),
        "trio_durable_turn_duration_seconds": (
            "histogram",
            "Seconds per turn (lease, replay, writes), by workflow, on the engine's clock.",
        ),
        "trio_durable_messages_unauthenticated_total": (
            "counter",
            "Broker messages rejected by the signature check, by kind (task or result)"
            " and reason (unsigned, forged or unknown_key).",
        ),
        "trio_durable_messages_stale_total": (
            "counter",
            "Broker messages rejected as stale, by kind (result): no step waits for them"
            " (a duplicate, or a replay of an earlier execution's result).",
        ),
        "trio_durable_leases_held": (
            "gauge",
            "Runs whose lease this engine holds (a turn in flight).",
        ),
        # Families with no samples: this app has no flow-control queue.
        "trio_durable_queue_limit": (
            "gauge",
            "Steps of a flow-control queue that may run at once, fleet-wide.",
        ),
        "trio_durable_queue_admitted": (
            "gauge",
            "Steps holding a slot of a flow-control queue, fleet-wide, as last read from the store.",
        ),
        "trio_durable_queue_waiting": (
            "gauge",
            "Steps waiting for a slot of a flow-control queue, fleet-wide, as last read from the"
            " store.",
        ),
    }
    runs = "trio_durable_runs_total"
    steps = "trio_durable_steps_total"
    duration = "trio_durable_step_duration_seconds"
    assert samples == {
        _key(runs, workflow="simple", event="started"): 2,
        _key(runs, workflow="simple", event="suspended"): 2,
        _key(runs, workflow="simple", event="completed"): 2,
        _key(runs, workflow="failing", event="started"): 1,
        _key(runs, workflow="failing", event="failed"): 1,
        _key(steps, step="add", event="started"): 4,
        _key(steps, step="add", event="completed"): 4,
        _key(steps, step="flaky", event="started"): 3,
        _key(steps, step="flaky", event="failed"): 3,
        # Four attempts of 1.5 s; three of 0.25 s (failed ones count too).
        _key(duration + "_sum", step="add"): 6.0,
        _key(duration + "_count", step="add"): 4,
        _key(duration + "_sum", step="flaky"): 0.75,
        _key(duration + "_count", step="flaky"): 3,
        # Each run of `simple` takes two turns of 1.5 s (one `add` each);
        # `failing` one of 3.75 s: three attempts of 0.25 s, backoffs 1 + 2.
        **_histogram("trio_durable_turn_duration_seconds", {1.5: 4}, workflow="simple"),
        **_histogram("trio_durable_turn_duration_seconds", {3.75: 1}, workflow="failing"),
        ("trio_durable_leases_held", ()): 0,
    }


async def test_a_slow_subscriber_drops_events_and_never_blocks_the_engine(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe(buffer=3) as slow, engine.subscribe() as full:
            assert engine.statistics().events_dropped == 0
            await engine.start(chatty, 10, run_id="c")
            # Nobody reads `slow` while the run goes: the run still completes.
            assert await engine.result("c") == 45
            await engine.drain()
            everything = _received(full)
            kept = _received(slow)
            stats = engine.statistics()
    # run.started, 10 x (step.started, step.completed), run.completed
    assert len(everything) == 22
    assert kept == everything[:3]  # the newest are the ones dropped
    assert stats.events_dropped == 22 - 3
    assert trio.current_time() == 15.0
