"""Waiters in a flow-control queue's line (runs waiting for admission, steps
waiting for a slot) look at the line again ever further apart: after as
long as they have waited, from ``blocked_recheck`` up to `RECHECK_CAP`. A
long line costs a few looks per waiter, then one per cap, not one per
``blocked_recheck``; a slot whose wake was lost is still found within the
cap."""

from __future__ import annotations

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._base._records import Checkpoint
from trio_durable._features.flow_control import _admission as admission
from trio_durable._features.flow_control._admission import RECHECK_CAP, next_look

app = td.App("recheck")
app.queue("one", concurrency=1)

LONG = 3600.0
WAITERS = 20
entered_at: dict[int, float] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    entered_at.clear()


@app.step()
async def hold(i: int, seconds: float) -> int:
    entered_at[i] = trio.current_time()
    await trio.sleep(seconds)
    return i


@app.workflow(concurrency_key=lambda i, seconds: "k")
async def keyed(ctx: td.Context, i: int, seconds: float) -> int:
    return await ctx.step(hold, i, seconds)


@app.step(group="work")
async def remote_hold(i: int, seconds: float) -> int:
    return await hold.fn(i, seconds)


@app.workflow()
async def queued(ctx: td.Context, i: int, seconds: float) -> int:
    return await ctx.step(remote_hold, i, seconds, queue="one")


def test_looks_double_from_blocked_recheck_up_to_the_cap() -> None:
    cp = Checkpoint(run_id="r", seq=1, name="s", kind="remote", enqueued_at=100.0)
    looks = [100.0]
    while looks[-1] < 400.0:
        looks.append(next_look(cp.enqueued_at, looks[-1], 5.0))
    assert [t - 100.0 for t in looks] == [0, 5, 10, 20, 40, 80, 140, 200, 260, 320]
    # A blocked_recheck longer than the cap is the interval.
    assert next_look(cp.enqueued_at, 1000.0, 100.0) == 1100.0
    assert RECHECK_CAP == 60.0


async def _batches_while_waiting(store: td.MemoryStore, until: float) -> int:
    before = store.statistics().batches
    await trio.sleep_until(until)
    return store.statistics().batches - before


def _bound(start: float, end: float, per_look: int) -> int:
    """The most batches WAITERS waiters, in line since 0, may write in
    ``[start, end]`` with looks backing off to the cap (each look
    ``per_look`` batches), with one look of slack each, besides the
    holder's lease renewals (every 10 s while its local step runs)."""
    cp = Checkpoint(run_id="r", seq=1, name="s", kind="remote", enqueued_at=0.0)
    t, looks = 5.0, 0
    while t <= end:
        looks += t >= start
        t = next_look(cp.enqueued_at, t, 5.0)
    return WAITERS * per_look * (looks + 1) + int((end - start) / 10.0) + 1


@pytest.mark.parametrize("kind", ["admission", "step"])
async def test_a_long_line_costs_few_store_writes(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, kind: str
) -> None:
    store = td.MemoryStore()
    serve = ["work"] if kind == "step" else []
    async with open_test_engine(app, store=store, serve=serve, broker=td.MemoryBroker()) as engine:
        wf = keyed if kind == "admission" else queued
        handles = [await engine.start(wf, 0, LONG)]
        await trio.testing.wait_all_tasks_blocked()
        handles += [await engine.start(wf, i, 1.0) for i in range(1, WAITERS + 1)]
        await trio.testing.wait_all_tasks_blocked()
        # The first minute: looks at 5, 10, 20, 40 s, not 12 of them.
        first = await _batches_while_waiting(store, 60.0)
        # Then one look per RECHECK_CAP, not one per 5 s.
        rest = await _batches_while_waiting(store, LONG - 1)
        print(
            f"{kind}: {WAITERS} waiters, {first} batches in the first minute, "
            f"{rest} in the next {LONG - 61:.0f} s"
        )
        assert first <= _bound(0.0, 60.0, 3)
        assert rest <= _bound(60.0, LONG - 1, 3)
        # Looks every 5 s (three batches each) would write ten times more.
        assert rest < WAITERS * (LONG - 61) / 5.0 * 3 / 10
        assert [await h.result() for h in handles] == list(range(WAITERS + 1))
        # Each was let in by the release before it, at once.
        assert entered_at[1] == pytest.approx(LONG)
        assert entered_at[WAITERS] == pytest.approx(LONG + WAITERS - 1)


async def test_a_lost_wake_is_found_within_the_cap(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:

    # The release's write applies, but nobody is woken for it.
    monkeypatch.setattr(admission, "let_in", lambda rt, ops, results: None)
    async with open_test_engine(app) as engine:
        holder = await engine.start(keyed, 0, 1000.0)
        await trio.testing.wait_all_tasks_blocked()
        waiter = await engine.start(keyed, 1, 1.0)
        assert await holder.result() == 0
        assert await waiter.result() == 1
    # Looks at 5, 10, 20, 40, 80, 140, ..., 920, 980 s find no slot; the
    # slot is freed at 1000 s and the look at 1040 s finds it.
    assert entered_at[1] == 1040.0
    assert entered_at[1] - 1000.0 <= RECHECK_CAP
