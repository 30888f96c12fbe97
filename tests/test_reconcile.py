"""The reconcile pass: runs whose wake-up was lost are resumed.

An engine that dies after the write that settles what a run waits for (a
child's end, a fan's last member, a remote result) and before it wakes the
run leaves the run suspended with nothing pending. These tests lose that
wake on purpose (the join barrier, or the result consumer's wake, does
nothing once) and check that the reconcile pass resumes the run after
``reconcile_interval``, exactly then, and leaves waiting runs alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._base._records import Checkpoint
from trio_durable._features.children import _children
from trio_durable._kernel._scheduler import Scheduler
from trio_durable._stores._base import TurnState

app = td.App("reconcile")

INTERVAL = 60.0


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'runs.db'}"


@app.workflow()
async def kid(ctx: td.Context, x: int) -> int:
    return 2 * x


@app.workflow()
async def parent(ctx: td.Context, x: int) -> int:
    return await ctx.child(kid, x) + 1


@app.workflow()
async def fan_parent(ctx: td.Context, n: int) -> list[int]:
    return await ctx.all(kid, list(range(n)))


@app.workflow()
async def waiter(ctx: td.Context) -> str:
    payload: str = await ctx.wait_signal("go")
    return payload


@app.step(group="math")
async def triple(x: int) -> int:
    return 3 * x


@app.workflow()
async def remote_parent(ctx: td.Context, x: int) -> int:
    return await ctx.step(triple, x)


@pytest.fixture
def lose_barrier_wakes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Makes the join barrier of a child's end drop its wakes, as an engine
    dying right after the settling write would; yields the ids of the runs
    it dropped."""
    lost: list[str] = []

    async def barrier(store: td.Store, changed: Iterable[Checkpoint], **_: object) -> list[str]:
        lost.extend(cp.run_id for cp in changed)
        return []

    monkeypatch.setattr(_children, "join_barrier", barrier)
    return lost


async def test_a_parent_whose_wake_was_lost_resumes_after_the_interval(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store_url: str,
    lose_barrier_wakes: list[str],
) -> None:
    async with open_test_engine(app, store=store_url, reconcile_interval=INTERVAL) as engine:
        run = await engine.start(parent, 5, run_id="p")
        await engine.drain()
        assert lose_barrier_wakes == ["p"]
        stored = await engine.get("p")
        assert stored is not None
        assert stored.status == "suspended"
        assert engine.statistics().reconciled == 0

        with trio.fail_after(2 * INTERVAL):
            assert await engine.result(run.id) == 11
        # Resumed by the first reconcile pass, not before.
        assert trio.current_time() == INTERVAL
        assert engine.statistics().reconciled == 1


async def test_a_pass_that_cannot_read_the_store_asks_again_soon(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store_url: str,
    lose_barrier_wakes: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_test_engine(app, store=store_url, reconcile_interval=INTERVAL) as engine:
        run = await engine.start(parent, 5, run_id="p")
        await engine.drain()
        assert lose_barrier_wakes == ["p"]
        listed = type(engine.store).list_stalled_runs
        failures: list[float] = []

        async def list_stalled_runs(store: Any, limit: int) -> list[str]:
            if not failures:
                # As a pooled connection that a database restart broke.
                failures.append(trio.current_time())
                raise td.StoreError("injected: the connection was closed")
            return await listed(store, limit)

        monkeypatch.setattr(type(engine.store), "list_stalled_runs", list_stalled_runs)
        with trio.fail_after(2 * INTERVAL):
            assert await engine.result(run.id) == 11
        assert failures == [INTERVAL]
        # Asked again after a short backoff, not at the next pass.
        assert INTERVAL < trio.current_time() < INTERVAL + 1


async def test_a_fan_parent_whose_last_wake_was_lost_resumes(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store_url: str,
    lose_barrier_wakes: list[str],
) -> None:
    async with open_test_engine(app, store=store_url, reconcile_interval=INTERVAL) as engine:
        run = await engine.start(fan_parent, 4, run_id="f")
        with trio.fail_after(2 * INTERVAL):
            assert await engine.result(run.id) == [0, 2, 4, 6]
        assert trio.current_time() == INTERVAL
        assert engine.statistics().reconciled == 1


async def test_a_run_whose_remote_result_wake_was_lost_resumes(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    store_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    woken: list[str] = []
    real_wake = Scheduler.wake

    def wake(self: Scheduler, run_id: str, **kwargs: Any) -> None:
        # The result consumer's wake of the run after its settle write is
        # lost once; every other wake goes through.
        if run_id == "r" and not woken and self.settling_now:
            woken.append(run_id)
            return
        real_wake(self, run_id, **kwargs)

    monkeypatch.setattr(Scheduler, "wake", wake)
    async with open_test_engine(
        app,
        store=store_url,
        broker="memory://reconcile",
        serve=["math"],
        reconcile_interval=INTERVAL,
    ) as engine:
        run = await engine.start(remote_parent, 7, run_id="r")
        with trio.fail_after(2 * INTERVAL):
            assert await engine.result(run.id) == 21
        assert woken == ["r"]
        assert trio.current_time() == INTERVAL
        assert engine.statistics().reconciled == 1


async def test_waiting_runs_are_left_alone(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, store_url: str
) -> None:
    async with open_test_engine(app, store=store_url, reconcile_interval=INTERVAL) as engine:
        await engine.start(waiter, run_id="w")
        await engine.drain()
        turns = engine.statistics().turns
        await trio.sleep(10 * INTERVAL)
        # One pass, a minute after the run suspended, found nothing stalled
        # (a signal is still to come); none since, as nothing changed.
        assert engine.statistics().reconciled == 0
        assert engine.statistics().turns == turns
        await engine.signal("w", "go", "now")
        assert await engine.result("w") == "now"


# -- a child that ends while another engine holds its parent ------------------


@app.workflow()
async def gated_kid(ctx: td.Context, tag: str = "") -> str:
    payload: str = await ctx.wait_signal("go")
    return payload


@app.workflow()
async def waits_for_kid(ctx: td.Context) -> str:
    return await ctx.child(gated_kid)


@app.workflow()
async def waits_for_kids(ctx: td.Context) -> list[str]:
    return await ctx.all(gated_kid, ["x", "y"])


class GatedStore:
    """Delegates to a store, but holds the turn of one run right after it
    took the lease and read the checkpoints, until released."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner
        self.run_id: str | None = None
        self.holding = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        state = await self.inner.begin_turn(run_id, owner, expiry, now)
        if run_id == self.run_id:
            self.run_id = None
            self.holding.set()
            await self.release.wait()
        return state


@pytest.mark.parametrize(
    ("workflow", "kids", "expected"),
    [
        (waits_for_kid, ["p.child.1"], "now"),
        (waits_for_kids, ["p.all.1.0", "p.all.1.1"], ["now", "now"]),
    ],
)
async def test_a_child_ending_while_another_engine_holds_the_parent_wakes_it(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    workflow: td.Workflow[..., object],
    kids: list[str],
    expected: object,
) -> None:
    store = td.MemoryStore()
    gated = GatedStore(store)
    # No reconcile pass within the test: only the engines' own wakes count.
    async with (
        open_test_engine(app, store=gated, engine_id="a", reconcile_interval=10 * INTERVAL) as a,
        open_test_engine(app, store=store, engine_id="b", reconcile_interval=10 * INTERVAL) as b,
    ):
        await a.start(workflow, run_id="p")
        await a.drain()
        for kid in kids[:-1]:
            await b.signal(kid, "go", "now")
        await b.drain()
        # A turn of the parent on engine a reads the child still pending and
        # holds the lease...
        gated.run_id = "p"
        a._rt.scheduler.wake("p")
        await gated.holding.wait()
        # ...while the last child ends on engine b, whose wake of the parent
        # cannot take the lease.
        await b.signal(kids[-1], "go", "now")
        await b.drain()
        stored = await b.get(kids[-1])
        assert stored is not None
        assert stored.status == "completed"
        gated.release.set()
        with trio.fail_after(INTERVAL):
            assert await a.result("p") == expected
        assert a.statistics().reconciled == b.statistics().reconciled == 0
