"""An engine whose app lacks a run's workflow leaves the run to an engine
that has it, and does not take it back at once when the two engines'
clocks disagree.

Engines that read the wall clock at different moments (the default
``time.time``, read as each opens) disagree on durable time by the real
time between their opens. A timer due by the clock of the engine that
lacks the workflow is not yet due by the other's: it took the run, passed
it on (backoff, announce), the other turned it and wrote the timer's due
time again, which the first saw as passed, and took the run again, for
ever, at one virtual instant under the autojump clock. The backoff now
holds on the passing engine's own clock (`_passed_on`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, fixed_wall, shared_store
from trio_durable._kernel._passed_on import PassedOn

app = td.App("has-it")
lacking_app = td.App("lacks-it")


@app.workflow()
async def sleeper(ctx: td.Context, seconds: float) -> str:
    await ctx.sleep(seconds)
    return "slept"


@contextmanager
def real_time_limit(seconds: float) -> Iterator[None]:
    """Fail the block after ``seconds`` of real time (a thread's timer,
    which the autojump clock does not see): a livelock would run for ever."""
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        timer = threading.Timer(seconds, token.run_sync_soon, (scope.cancel,))
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            timer.join()
    assert not scope.cancelled_caught, f"still going after {seconds} s of real time"


def ahead(skew: float) -> Callable[[], float]:
    """A wall clock ``skew`` seconds ahead of `fixed_wall`."""
    return lambda: fixed_wall() + skew


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("skew", [0.003, -0.003, 0.0])
async def test_an_engine_that_lacks_the_workflow_hands_a_due_run_over_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, kind: str, skew: float
) -> None:
    # ``skew`` > 0: the lacking engine's clock is ahead, and sees the
    # timer due first.
    async with shared_store(kind, tmp_path) as store:
        with real_time_limit(30.0):
            async with (
                td.open_engine(app, store=store, engine_id="has", wall_clock=fixed_wall) as has,
                td.open_engine(
                    lacking_app, store=store, engine_id="lacks", wall_clock=ahead(skew)
                ) as lacks,
            ):
                t0 = trio.current_time()
                run = await has.start(sleeper, 10.0)
                assert await has.result(run.id) == "slept"
                # Exactly when it was due, by the clock of the engine that
                # has the workflow.
                assert trio.current_time() == t0 + 10.0
                await has.drain()
                await lacks.drain()
                # The lacking engine passed it on once at most; the other
                # turned it to start, maybe once more when told, and at
                # its timer.
                assert lacks.statistics().turns <= 1
                assert has.statistics().turns <= 3
                ended = await store.get_run(run.id)
                assert ended is not None
                assert (ended.status, ended.updated_at) == ("completed", WALL_START + t0 + 10.0)


async def test_engines_with_their_own_wall_clocks_do_not_hand_a_run_back_and_forth(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The default wall clock, read as each engine opens: the lacking one,
    # opened later, is ahead by the real time between the opens.
    store = td.MemoryStore()
    with real_time_limit(30.0):
        async with td.open_engine(app, store=store, engine_id="has") as has:
            time.sleep(0.003)  # noqa: ASYNC251 (real time between the opens, on purpose)
            async with td.open_engine(lacking_app, store=store, engine_id="lacks") as lacks:
                t0 = trio.current_time()
                run = await has.start(sleeper, 10.0)
                assert await has.result(run.id) == "slept"
                assert trio.current_time() == t0 + 10.0
                assert lacks.statistics().turns <= 1


async def test_with_no_engine_that_has_it_the_run_is_passed_on_once_per_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    async with td.open_engine(app, store=store, engine_id="has", wall_clock=fixed_wall) as has:
        run = await has.start(sleeper, 10.0)
        await has.drain()
    with real_time_limit(30.0):
        async with td.open_engine(
            lacking_app, store=store, engine_id="lacks", wall_clock=fixed_wall
        ) as lacks:
            await trio.sleep(10.0 + 60.0 * 3 + 1.0)
            # At 10 (due), 70, 130 and 190: one turn per backoff.
            assert lacks.statistics().turns == 4
    stored = await store.get_run(run.id)
    assert stored is not None
    assert stored.status == "suspended"


async def test_passed_on_runs_are_held_back_until_their_time_and_then_forgotten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    passed = PassedOn()
    passed.passed("a", trio.current_time() + 60.0)
    assert passed.held_back("a")
    assert not passed.held_back("b")
    await trio.sleep(59.0)
    assert passed.held_back("a")
    await trio.sleep(1.0)
    assert not passed.held_back("a")
    # Lapsed entries are swept as more are added: the map stays small.
    for i in range(1000):
        passed.passed(f"r{i}", trio.current_time() + 1.0)
        await trio.sleep(1.0)
    assert len(passed._until) <= 128
