"""Rate limits: at most ``starts`` admissions per ``per`` seconds, fleet-wide,
for a workflow's runs and a flow-control queue's steps (see `_rate_limits`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from trio_durable._features.flow_control._rate_limits import next_admission

app = td.App("rates")
app.queue("api", concurrency=10, rate_limit=td.RateLimit(2, 5.0))

began: dict[str, list[float]] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    began.clear()


def note(name: str) -> None:
    began.setdefault(name, []).append(trio.current_time())


@app.step()
async def record(name: str) -> None:
    note(name)


@app.workflow(rate_limit=td.RateLimit(2, 10.0))
async def report(ctx: td.Context, n: int) -> int:
    await ctx.step(record, "report")
    return n


@app.workflow(concurrency_key=lambda n: "one", max_concurrent=1, rate_limit=td.RateLimit(1, 3.0))
async def keyed_and_rated(ctx: td.Context, n: int) -> int:
    await ctx.step(record, "keyed")
    await ctx.sleep(1)
    return n


@app.step(group="calls", queue="api")
async def call_api(n: int) -> int:
    note("call_api")
    return n


@app.workflow()
async def calls(ctx: td.Context, n: int) -> int:
    return await ctx.step(call_api, n)


def test_the_next_admission_keeps_every_span_to_the_limit() -> None:
    assert next_admission([], 2, 10.0, 3.0) == 3.0
    assert next_admission([3.0], 2, 10.0, 3.0) == 3.0
    assert next_admission([3.0, 3.0], 2, 10.0, 4.0) == 13.0
    # After every earlier reservation, even one in the future.
    assert next_admission([3.0, 13.0], 2, 10.0, 5.0) == 13.0
    assert next_admission([13.0, 13.0], 2, 10.0, 5.0) == 23.0
    assert next_admission([1.0], 1, 10.0, 30.0) == 30.0


async def test_a_workflow_admits_at_most_starts_per_period(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()
    async with open_test_engine(app, store=store) as engine:
        handles = [await engine.start(report, i) for i in range(5)]
        await trio.sleep(1)
        # A run over the limit is visible as such, due when the window
        # lets it in: no look before then.
        waiting = await engine.get(handles[4].id)
        assert waiting.status == "suspended"
        assert waiting.wake_at == WALL_START + 20.0
        [record] = await store.get_records(handles[4].id)
        assert record.kind == "admission"
        assert record.status == "pending"
        assert json.loads(record.output or "{}") == {"rate_at": WALL_START + 20.0}
        assert [await h.result() for h in handles] == list(range(5))
    assert began["report"] == [0.0, 0.0, 10.0, 10.0, 20.0]


async def test_the_limit_is_shared_by_two_engines(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    async with (
        td.open_store(f"sqlite:///{tmp_path / 'rates.db'}") as store,
        td.open_engine(app, store=store, engine_id="a", seed=1, wall_clock=fixed_wall) as a,
        td.open_engine(app, store=store, engine_id="b", seed=2, wall_clock=fixed_wall) as b,
    ):
        ids: list[str] = []

        async def start(i: int) -> None:
            ids.append((await (a, b)[i % 2].start(report, i)).id)

        async with trio.open_nursery() as nursery:
            for i in range(9):
                nursery.start_soon(start, i)
        for run_id in ids:
            await a.result(run_id)
    assert began["report"] == [0.0, 0.0, 10.0, 10.0, 20.0, 20.0, 30.0, 30.0, 40.0]


async def test_a_key_and_a_rate_together(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        handles = [await engine.start(keyed_and_rated, i) for i in range(3)]
        assert [await h.result() for h in handles] == [0, 1, 2]
    # One at a time (each holds its slot 1 s), and one start per 3 s.
    assert began["keyed"] == [0.0, 3.0, 6.0]


async def test_cancelling_a_run_that_waits_for_the_rate(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        handles = [await engine.start(report, i) for i in range(3)]
        await trio.sleep(1)
        await engine.cancel(handles[2].id)
        with pytest.raises(td.RunCancelled):
            await handles[2].result()
        assert [await h.result() for h in handles[:2]] == [0, 1]
        # Its reservation is spent: the next start comes after it.
        late = await engine.start(report, 9)
        assert await late.result() == 9
    assert began["report"] == [0.0, 0.0, 10.0]


async def test_a_queue_rate_limits_its_steps(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, serve=["calls"]) as engine:
        handles = [await engine.start(calls, n) for n in range(5)]
        await trio.sleep(1)
        # The steps over the limit wait unsent, marked, due when it lets them.
        marks = []
        for handle in handles:
            [cp] = await engine.store.get_checkpoints(handle.id, 1, 1)
            marks.append((cp.started_at is None, cp.mark and cp.mark.code, cp.wake_at))
        assert sorted(marks, key=str) == sorted(
            [(False, None, None)] * 2
            + [(True, "rate_limited", WALL_START + 5.0)] * 2
            + [(True, "rate_limited", WALL_START + 10.0)],
            key=str,
        )
        assert [await h.result() for h in handles] == list(range(5))
    assert began["call_api"] == [0.0, 0.0, 5.0, 5.0, 10.0]


def test_a_queue_rate_limit_is_checked() -> None:
    other = td.App("other")
    with pytest.raises(td.RegistrationError, match="rate_limit"):
        other.queue("q", concurrency=1, rate_limit=(1, 2))  # type: ignore[arg-type]
