"""Fans of child runs: `Context.all` and `Context.all_settled`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._stores._ops import SettleCheckpoint

app = td.App("fans")

turns: Counter[str] = Counter()
"""Body entries per run id: one per turn that replayed the body."""

log: list[tuple[str, int, float]] = []
"""(what, member index, trio time) as recorded by the `mark` step."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    turns.clear()
    log.clear()
    yield
    turns.clear()
    log.clear()


@attrs.define(frozen=True)
class Job:
    """What one fan member does: sleep ``seconds``, then fail or return."""

    index: int
    seconds: float = 0.0
    fail: str | None = None
    in_step: bool = False
    compensated: bool = False


@app.step()
async def mark(what: str, index: int) -> None:
    log.append((what, index, trio.current_time()))


@app.step()
async def busy(seconds: float) -> None:
    """Holds its turn: the member is running, not suspended, meanwhile."""
    await trio.sleep(seconds)


@app.step()
async def release(index: int) -> None:
    log.append(("release", index, trio.current_time()))


@app.step()
async def reserve(index: int) -> int:
    return index


@app.workflow()
async def member(ctx: td.Context, job: Job) -> int:
    turns[ctx.run_id] += 1
    await ctx.step(mark, "start", job.index)
    if job.compensated:
        await ctx.step(reserve, job.index, compensate=release)
    if job.in_step:
        await ctx.step(busy, job.seconds)
    else:
        await ctx.sleep(job.seconds)
    if job.fail is not None:
        raise td.FatalError(
            f"member {job.index} failed", code=job.fail, details={"index": job.index}
        )
    await ctx.step(mark, "end", job.index)
    return job.index * 10


@app.step()
async def tick(n: int) -> int:
    return n


Mode = Literal["fail_fast", "wait_all"]
# Typed constants: mypy widens a bare "fail_fast" to str when it infers the
# inputs of engine.start, and str does not fit the workflow's Literal.
FAIL_FAST: Mode = "fail_fast"
WAIT_ALL: Mode = "wait_all"


@app.workflow()
async def fan(
    ctx: td.Context,
    jobs: list[Job],
    concurrency: int | None,
    mode: Mode,
) -> dict[str, Any]:
    turns[ctx.run_id] += 1
    await ctx.step(tick, 0)  # so the fan's first seq is 2
    try:
        results = await ctx.all(member, jobs, concurrency=concurrency, mode=mode)
    except td.GatherError as exc:
        return {"failures": [attrs.asdict(f) for f in exc.failures], "total": exc.total}
    after = await ctx.step(tick, 1)
    return {"results": results, "after": after}


@app.workflow()
async def settled_fan(ctx: td.Context, jobs: list[Job]) -> list[dict[str, Any]]:
    turns[ctx.run_id] += 1
    return await ctx.all_settled(member, jobs, concurrency=2)


@app.workflow()
async def square(ctx: td.Context, x: int) -> int:
    return x * x


@app.workflow()
async def big_fan(ctx: td.Context, n: int, concurrency: int) -> list[int]:
    turns[ctx.run_id] += 1
    return await ctx.all(square, list(range(n)), concurrency=concurrency)


def _run_events(rx: trio.MemoryReceiveChannel[td.Event], run_id: str) -> list[td.Event]:
    """The ``run.*`` events of ``run_id`` received so far."""
    events: list[td.Event] = []
    while True:
        try:
            event = rx.receive_nowait()
        except trio.WouldBlock:
            return events
        if event.run_id == run_id and event.kind.startswith("run."):
            events.append(event)


async def test_all_returns_results_in_input_order_under_derived_ids(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # Later inputs end first, so completion order is the reverse of input order.
    jobs = [Job(index=i, seconds=5 - i) for i in range(5)]
    async with open_test_engine(app) as engine:
        await engine.start(fan, jobs, None, FAIL_FAST, run_id="p")
        assert await engine.result("p") == {"results": [0, 10, 20, 30, 40], "after": 1}
        assert trio.current_time() == 5.0
        children = await engine.store.list_runs(parent_id="p")
        assert sorted(run.id for run in children) == [f"p.all.2.{i}" for i in range(5)]
        for run in children:
            index = int(run.id.rsplit(".", 1)[1])
            assert run.status == "completed"
            assert run.parent_seq == 2 + index
        cps = await engine.store.get_checkpoints("p")
        assert [(cp.seq, cp.kind, cp.child_id) for cp in cps] == [
            (1, "local", None),
            *[(2 + i, "child", f"p.all.2.{i}") for i in range(5)],
            (7, "local", None),  # one seq per input was reserved up front
        ]
        for cp in cps[1:6]:
            assert (cp.parallel_group, cp.parallel_size, cp.parallel_mode) == (2, 5, "fail_fast")
        assert [e for e in log if e[0] == "end"] == [("end", i, 5.0 - i) for i in range(4, -1, -1)]


async def test_concurrency_slides_a_window_and_the_parent_turns_twice(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    durations = [3, 1, 2, 5, 4, 2, 1]
    jobs = [Job(index=i, seconds=s) for i, s in enumerate(durations)]
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, 3, WAIT_ALL, run_id="p")
            result = await engine.result("p")
            await engine.drain()
            events = _run_events(rx, "p")
    assert result == {"results": [i * 10 for i in range(7)], "after": 1}
    starts = {i: t for what, i, t in log if what == "start"}
    ends = {i: t for what, i, t in log if what == "end"}
    # Each end starts the waiting member of lowest index at once: no member
    # waits for a wave's slowest (waves of three would end at 9).
    assert starts == {0: 0.0, 1: 0.0, 2: 0.0, 3: 1.0, 4: 2.0, 5: 3.0, 6: 5.0}
    assert ends == {0: 3.0, 1: 1.0, 2: 2.0, 3: 6.0, 4: 6.0, 5: 5.0, 6: 6.0}
    for t in sorted(set(starts.values())):
        assert sum(1 for i in starts if starts[i] <= t < ends[i]) <= 3
    # The parent turns to start the fan and once it all ended.
    assert turns["p"] == 2
    assert [(e.kind, e.at - 1_700_000_000.0) for e in events] == [
        ("run.started", 0.0),
        ("run.suspended", 0.0),
        ("run.completed", 6.0),
    ]


async def test_join_barrier_resumes_the_parent_once_for_a_hundred_members(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    jobs = [Job(index=i, seconds=i % 7) for i in range(100)]
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, None, FAIL_FAST, run_id="p")
            result = await engine.result("p")
            await engine.drain()
            events = _run_events(rx, "p")
    assert result == {"results": [i * 10 for i in range(100)], "after": 1}
    assert trio.current_time() == 6.0
    assert turns["p"] == 2
    assert [e.kind for e in events] == ["run.started", "run.suspended", "run.completed"]
    assert sum(1 for what, _, _ in log if what == "end") == 100


async def test_fail_fast_cancels_survivors_and_never_starts_the_rest(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    jobs = [
        Job(index=0, seconds=10, compensated=True),  # suspended on a timer
        Job(index=1, seconds=2, fail="boom"),
        Job(index=2, seconds=10, in_step=True),  # mid-turn, in a step, when the fan fails
        Job(index=3, seconds=1),
        Job(index=4, seconds=1),
    ]
    async with open_test_engine(app) as engine:
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, 3, FAIL_FAST, run_id="p")
            result = await engine.result("p")
            assert trio.current_time() == 2.0
            parent_after = await engine.get("p")
            cps_after = await engine.store.get_checkpoints("p")
            await engine.drain()
            # The survivors' ends did not wait for their timers or steps.
            assert trio.current_time() == 2.0
            events = _run_events(rx, "p")

        assert result == {
            "failures": [
                {
                    "index": 1,
                    "id": "p.all.2.1",
                    "error": "member 1 failed",
                    "code": "boom",
                    "details": {"index": 1},
                }
            ],
            "total": 5,
        }
        # Survivors end cancelled; the one with an undo ran it.
        for run_id in ("p.all.2.0", "p.all.2.2"):
            with pytest.raises(td.RunCancelled) as info:
                await engine.result(run_id)
            assert info.value.code == "cancelled"
        assert ("release", 0, 2.0) in log
        [undo] = await engine.store.get_checkpoints("p.all.2.0", -10, -1)
        assert (undo.seq, undo.name, undo.status) == (-2, "release", "completed")
        # The member busy in a step was cut short: it ran no further step, but
        # kept the one it had completed.
        kept = await engine.store.get_checkpoints("p.all.2.2")
        assert [(cp.seq, cp.name, cp.status) for cp in kept] == [(1, "mark", "completed")]
        assert ("end", 2, 10.0) not in log
        # Unstarted members never got a run row, nor ran at all.
        assert await engine.store.get_run("p.all.2.3") is None
        assert await engine.store.get_run("p.all.2.4") is None
        assert {i for what, i, _ in log if what == "start"} == {0, 1, 2}
        assert sorted(r.id for r in await engine.store.list_runs(parent_id="p")) == [
            "p.all.2.0",
            "p.all.2.1",
            "p.all.2.2",
        ]

        cps = {cp.seq: cp for cp in await engine.store.get_checkpoints("p")}
        assert cps[3].status == "failed"
        assert cps[3].error is not None
        assert cps[3].error.code == "boom"
        for seq in (2, 4, 5, 6):
            error = cps[seq].error
            assert cps[seq].status == "failed"
            assert error is not None
            assert error.code == "fan_cancelled"
        # Members that never started waited under their derived ids, with
        # no run behind them.
        assert (cps[5].child_id, cps[5].started_at) == ("p.all.2.3", None)
        assert (cps[6].child_id, cps[6].started_at) == ("p.all.2.4", None)
        # The survivors' own ends ("cancelled") arrived after the fan froze:
        # they changed nothing, and the parent was not woken again.
        assert list(cps.values()) == cps_after
        assert await engine.get("p") == parent_after
        assert parent_after.status == "completed"
        assert turns["p"] == 2
        assert [e.kind for e in events] == ["run.started", "run.suspended", "run.completed"]
        # Nor would any later settle of a frozen member.
        late = SettleCheckpoint("p", 2, "completed", '{"ok":true,"value":0}', None, 0.0)
        assert await engine.store.apply([late]) == [None]
        assert (await engine.store.get_checkpoints("p", 2, 2)) == [cps[2]]


async def test_wait_all_collects_every_failure(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    jobs = [
        Job(index=0, seconds=4),
        Job(index=1, seconds=1, fail="first"),
        Job(index=2, seconds=2),
        Job(index=3, seconds=3, fail="second"),
    ]
    async with open_test_engine(app) as engine:
        await engine.start(fan, jobs, None, WAIT_ALL, run_id="p")
        result = await engine.result("p")
        # The parent waited for the slowest member, not the first failure.
        assert trio.current_time() == 4.0
        assert result == {
            "failures": [
                {
                    "index": 1,
                    "id": "p.all.2.1",
                    "error": "member 1 failed",
                    "code": "first",
                    "details": {"index": 1},
                },
                {
                    "index": 3,
                    "id": "p.all.2.3",
                    "error": "member 3 failed",
                    "code": "second",
                    "details": {"index": 3},
                },
            ],
            "total": 4,
        }
        statuses = {r.id: r.status for r in await engine.store.list_runs(parent_id="p")}
        assert statuses == {
            "p.all.2.0": "completed",
            "p.all.2.1": "failed",
            "p.all.2.2": "completed",
            "p.all.2.3": "failed",
        }
        assert turns["p"] == 2


async def test_all_settled_returns_every_outcome_in_order(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    jobs = [
        Job(index=0, seconds=3, fail="bad"),
        Job(index=1, seconds=1),
        Job(index=2, seconds=2, fail="worse"),
        Job(index=3, seconds=0),
        Job(index=4, seconds=1, fail="bad"),
    ]
    async with open_test_engine(app) as engine:
        await engine.start(settled_fan, jobs, run_id="p")
        assert await engine.result("p") == [
            {
                "status": "rejected",
                "id": "p.all.1.0",
                "error": "member 0 failed",
                "code": "bad",
                "details": {"index": 0},
            },
            {"status": "fulfilled", "value": 10},
            {
                "status": "rejected",
                "id": "p.all.1.2",
                "error": "member 2 failed",
                "code": "worse",
                "details": {"index": 2},
            },
            {"status": "fulfilled", "value": 30},
            {
                "status": "rejected",
                "id": "p.all.1.4",
                "error": "member 4 failed",
                "code": "bad",
                "details": {"index": 4},
            },
        ]
        # A window of two: 1 ends at 1 and starts 2 (ends at 3); 0 ends at 3
        # and starts 3 (ends at once), which starts 4 (ends at 4).
        assert trio.current_time() == 4.0
        assert turns["p"] == 2


async def test_all_settled_never_raises_even_when_every_member_fails(
    open_test_engine: EngineFactory,
) -> None:
    jobs = [Job(index=i, fail="nope") for i in range(3)]
    async with open_test_engine(app) as engine:
        await engine.start(settled_fan, jobs, run_id="p")
        outcomes = await engine.result("p")
        assert [o["status"] for o in outcomes] == ["rejected"] * 3
        assert [o["id"] for o in outcomes] == [f"p.all.1.{i}" for i in range(3)]
        assert (await engine.get("p")).status == "completed"


async def test_a_fan_of_a_thousand_with_concurrency_fifty(open_test_engine: EngineFactory) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(big_fan, 1000, 50, run_id="p")
        assert await engine.result("p") == [i * i for i in range(1000)]
        await engine.drain()
        # Started, then woken once the last member ended (waves would turn 21 times).
        assert turns["p"] == 2
        cps = await engine.store.get_checkpoints("p")
        assert len(cps) == 1000
        assert all(cp.status == "completed" for cp in cps)
        assert len(await engine.store.list_runs(parent_id="p", limit=2000)) == 1000


BAD_FANS: dict[str, dict[str, Any]] = {
    "concurrency 0": {"concurrency": 0},
    "concurrency -1": {"concurrency": -1},
    "concurrency 1.5": {"concurrency": 1.5},
    "concurrency True": {"concurrency": True},
    "mode typo": {"mode": "fail-fast"},
    "inputs dict": {"inputs": {"a": 1}},
    "inputs str": {"inputs": "abc"},
    "inputs generator": {"inputs": (x for x in [1, 2])},
    "settled concurrency 0": {"concurrency": 0, "settled": True},
    "settled inputs int": {"inputs": 3, "settled": True},
}


@app.workflow()
async def misuse(ctx: td.Context, case: str) -> str:
    kwargs = dict(BAD_FANS[case])
    inputs = kwargs.pop("inputs", [1, 2])
    settled = kwargs.pop("settled", False)
    try:
        if settled:
            await ctx.all_settled(square, inputs, **kwargs)
        else:
            await ctx.all(square, inputs, **kwargs)
    except td.UsageError as exc:
        # The fan took no seq: the next op is seq 1.
        await ctx.step(tick, 7)
        return type(exc).__name__
    return "no error"


@pytest.mark.parametrize("case", list(BAD_FANS))
async def test_bad_fan_input_raises_usage_error_and_writes_nothing(
    case: str, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(misuse, case, run_id="p")
        assert await engine.result("p") == "UsageError"
        [cp] = await engine.store.get_checkpoints("p")
        assert (cp.seq, cp.name) == (1, "tick")
        assert await engine.store.list_runs(parent_id="p") == []
