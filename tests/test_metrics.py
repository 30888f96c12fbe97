"""Prometheus metrics of engines and workers, read back with
prometheus-client's own parser: turn latency, leases, queue depths, one
registry per engine."""

from __future__ import annotations

import math

import prometheus_client
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory, fixed_wall
from prometheus_samples import families, sample, samples

app = td.App("metrics")
gpu = app.queue("gpu", concurrency=2)
app.queue("spare", concurrency=3)

TURN_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0, 300.0)


@app.step()
async def pause(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@app.step(group="work", queue="gpu")
async def render(x: int) -> int:
    await trio.sleep(10)
    return x * 10


@app.workflow()
async def two_turns(ctx: td.Context) -> float:
    first = await ctx.step(pause, 0.3)
    await ctx.sleep(100)
    return first + await ctx.step(pause, 7.0)


@app.workflow()
async def one_pause(ctx: td.Context, seconds: float) -> float:
    return await ctx.step(pause, seconds)


@app.workflow()
async def through_gpu(ctx: td.Context, x: int) -> int:
    return await ctx.step(render, x)


def _buckets(text: str, workflow: str) -> dict[str, float]:
    return {
        dict(labels)["le"]: value
        for labels, value in samples(text, "trio_durable_turn_duration_seconds_bucket").items()
        if ("workflow", workflow) in labels
    }


async def test_turn_latency_histogram_counts_virtual_seconds_per_turn(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        assert _buckets(engine.metrics(), "two_turns") == {}
        assert await engine.result((await engine.start(two_turns)).id) == 7.3
        text = engine.metrics()
    assert families(text)["trio_durable_turn_duration_seconds"] == "histogram"
    # Turn one ran a step of 0.3 s and slept; turn two, 100 s later, one of 7 s.
    expected = {
        ("+Inf" if math.isinf(bound) else repr(bound)): float((bound >= 0.3) + (bound >= 7.0))
        for bound in (*TURN_BOUNDS, math.inf)
    }
    assert _buckets(text, "two_turns") == expected
    assert (expected["0.25"], expected["0.5"], expected["10.0"]) == (0, 1, 2)
    turn = "trio_durable_turn_duration_seconds"
    assert sample(text, turn + "_count", workflow="two_turns") == 2
    assert sample(text, turn + "_sum", workflow="two_turns") == pytest.approx(7.3)


async def test_leases_held_counts_the_turns_in_flight(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        assert sample(engine.metrics(), "trio_durable_leases_held") == 0
        await engine.start(one_pause, 5.0, run_id="a")
        await engine.start(one_pause, 8.0, run_id="b")
        await trio.sleep(1)
        # Both turns are in their step: each holds its run's lease.
        assert sample(engine.metrics(), "trio_durable_leases_held") == 2
        await trio.sleep(5)
        assert sample(engine.metrics(), "trio_durable_leases_held") == 1
        await engine.result("b")
        await engine.drain()
        assert sample(engine.metrics(), "trio_durable_leases_held") == 0


async def test_queue_gauges_show_the_fleet_wide_depth_as_last_sampled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    broker = td.MemoryBroker()
    async with (
        td.open_engine(
            app,
            store=store,
            broker=broker,
            serve=["work"],
            engine_id="a",
            seed=1,
            wall_clock=fixed_wall,
            metrics_interval=1.0,
        ) as a,
        td.open_engine(
            app,
            store=store,
            broker=broker,
            engine_id="b",
            seed=2,
            wall_clock=fixed_wall,
            metrics_interval=1.0,
        ) as b,
    ):

        def gauges(engine: td.Engine, queue: str) -> tuple[float | None, ...]:
            text = engine.metrics()
            return tuple(
                sample(text, f"trio_durable_queue_{what}", queue=queue)
                for what in ("limit", "admitted", "waiting")
            )

        assert gauges(a, "gpu") == (2, 0, 0)
        assert gauges(a, "spare") == (3, 0, 0)
        for i in range(6):
            await (a if i % 2 else b).start(through_gpu, i, run_id=f"g-{i}")
        await trio.sleep(1.5)
        # Two hold the queue's slots, four wait: the same on both engines,
        # whichever started the run.
        assert gauges(a, "gpu") == gauges(b, "gpu") == (2, 2, 4)
        assert gauges(b, "spare") == (3, 0, 0)
        assert [await a.result(f"g-{i}") for i in range(6)] == [i * 10 for i in range(6)]
        assert trio.current_time() == 30.0
        await trio.sleep(1.5)
        assert gauges(a, "gpu") == gauges(b, "gpu") == (2, 0, 0)
        await a.drain()
        await b.drain()


async def test_each_engine_has_its_own_registry(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with (
        open_test_engine(app, store=td.MemoryStore(), engine_id="one") as one,
        open_test_engine(app, store=td.MemoryStore(), engine_id="two") as two,
    ):
        await one.result((await one.start(one_pause, 1.0)).id)
        await one.result((await one.start(one_pause, 2.0)).id)
        await two.result((await two.start(one_pause, 4.0)).id)
        assert one.metrics_registry is one.metrics_registry
        assert one.metrics_registry is not two.metrics_registry
        first, second = one.metrics(), two.metrics()
        runs = "trio_durable_runs_total"
        assert sample(first, runs, workflow="one_pause", event="completed") == 2
        assert sample(second, runs, workflow="one_pause", event="completed") == 1
        step_seconds = "trio_durable_step_duration_seconds_sum"
        assert sample(first, step_seconds, step="pause") == 3.0
        assert sample(second, step_seconds, step="pause") == 4.0
        # The registry is what `metrics()` renders, ready to mount elsewhere.
        assert prometheus_client.generate_latest(one.metrics_registry).decode() == first
    # The process-wide default registry is left alone.
    default = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert "trio_durable" not in default


async def test_every_metric_has_the_prefix_on_engines_and_workers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(app, broker=broker, seed=0, wall_clock=fixed_wall) as engine,
        td.open_worker(app, broker=broker, groups=["work"], seed=1) as worker,
    ):
        assert await engine.result((await engine.start(through_gpu, 4)).id) == 40
        assert await engine.result((await engine.start(two_turns)).id) == 7.3
        engine_families = families(engine.metrics())
        worker_families = families(worker.metrics())
    assert {name: kind for name, kind in engine_families.items()} == {
        "trio_durable_runs": "counter",
        "trio_durable_steps": "counter",
        "trio_durable_step_duration_seconds": "summary",
        "trio_durable_runs_routed": "counter",
        "trio_durable_messages_rejected": "counter",
        "trio_durable_turn_duration_seconds": "histogram",
        "trio_durable_messages_unauthenticated": "counter",
        "trio_durable_messages_stale": "counter",
        "trio_durable_leases_held": "gauge",
        "trio_durable_queue_limit": "gauge",
        "trio_durable_queue_admitted": "gauge",
        "trio_durable_queue_waiting": "gauge",
    }
    # A worker counts its steps and the tasks it rejects; it runs no turns
    # and holds no leases.
    assert set(worker_families) == {
        "trio_durable_runs",
        "trio_durable_steps",
        "trio_durable_step_duration_seconds",
        "trio_durable_runs_routed",
        "trio_durable_messages_rejected",
        "trio_durable_turn_duration_seconds",
        "trio_durable_messages_unauthenticated",
        "trio_durable_messages_stale",
    }
    assert all(name.startswith("trio_durable_") for name in engine_families)


async def test_metrics_interval_must_be_positive() -> None:
    with pytest.raises(td.UsageError, match="metrics_interval"):
        async with td.open_engine(app, metrics_interval=0):
            pass
