"""Flow-control queues: fleet-wide admission, priorities, exactly-once release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, fixed_wall
from trio_durable._stores._base import TurnState

app = td.App("queues")
gpu = app.queue("gpu", concurrency=2)
single = app.queue("single", concurrency=1)
app.queue("urgent", concurrency=1, priority=7)

running: list[int] = []
peak: list[int] = [0]
started: list[int] = []


@app.step(group="work")
async def render(x: int) -> int:
    running.append(x)
    started.append(x)
    peak[0] = max(peak[0], len(running))
    try:
        await trio.sleep(10)
    finally:
        running.remove(x)
    return x * 10


@app.step(group="work", queue="single")
async def exclusive(x: int) -> int:
    return await render.fn(x)


@app.workflow()
async def through(ctx: td.Context, x: int, queue: str, priority: int | None) -> int:
    return await ctx.step(render, x, queue=queue, priority=priority)


@app.workflow()
async def fan_through_queue(ctx: td.Context) -> list[int]:
    return await ctx.all(exclusive, [1, 2])


@pytest.fixture(autouse=True)
def _reset() -> None:
    running.clear()
    started.clear()
    peak[0] = 0


async def test_a_queue_admits_at_most_its_concurrency_across_engines(
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
        ) as a,
        td.open_engine(
            app,
            store=store,
            broker=broker,
            serve=["work"],
            engine_id="b",
            seed=2,
            wall_clock=fixed_wall,
        ) as b,
    ):
        runs = []
        for i in range(6):
            engine = a if i % 2 else b
            runs.append(await engine.start(through, i, "gpu", None, run_id=f"q-{i}"))
        results = [await a.result(run.id) for run in runs]
        assert results == [i * 10 for i in range(6)]
        assert peak[0] == 2
        # Six steps of ten seconds, two at a time.
        assert trio.current_time() == 30.0
        await a.drain()
        await b.drain()


async def test_higher_priority_is_admitted_first(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        await engine.start(through, 0, "single", 0, run_id="first")
        await trio.testing.wait_all_tasks_blocked()
        assert running == [0]
        for x, priority in ((1, 0), (2, 5), (3, 1), (4, 5)):
            await engine.start(through, x, "single", priority, run_id=f"p-{x}")
            await trio.testing.wait_all_tasks_blocked()
        # All four wait in line behind the first.
        for x in (1, 2, 3, 4):
            [cp] = await engine.store.get_checkpoints(f"p-{x}")
            assert cp.status == "pending"
            assert cp.mark is not None
            assert cp.mark.code == "queued"
            assert cp.started_at is None
        for x in (1, 2, 3, 4):
            await engine.result(f"p-{x}")
        # Priority 5 first (in arrival order), then 1, then 0.
        assert started == [0, 2, 4, 3, 1]
        assert trio.current_time() == 50.0


async def test_the_queue_priority_is_the_default(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        await engine.start(through, 0, "urgent", None, run_id="u0")
        await trio.testing.wait_all_tasks_blocked()
        await engine.start(through, 1, "urgent", 6, run_id="u1")
        await trio.testing.wait_all_tasks_blocked()
        await engine.start(through, 2, "urgent", None, run_id="u2")  # 7, the queue's
        await trio.testing.wait_all_tasks_blocked()
        for run_id in ("u0", "u1", "u2"):
            await engine.result(run_id)
        assert started == [0, 2, 1]


async def test_a_slot_is_released_once_also_when_the_run_was_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        await engine.start(through, 0, "single", None, run_id="holder")
        await trio.testing.wait_all_tasks_blocked()
        await engine.start(through, 1, "single", None, run_id="next")
        await trio.testing.wait_all_tasks_blocked()
        assert running == [0]
        # The holder's run is cancelled while its step runs on the worker:
        # its result is dropped, yet it gives the slot back.
        await engine.cancel("holder")
        with pytest.raises(td.RunCancelled):
            await engine.result("holder")
        assert await engine.result("next") == 10
        assert started == [0, 1]
        assert trio.current_time() == 20.0
        [cp] = await engine.store.get_checkpoints("holder")
        assert cp.status == "pending"  # the late result changed nothing


async def test_duplicated_results_release_a_slot_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker(td.BrokerFaults(duplicate=1.0, seed=3))
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=broker
    ) as engine:
        for i in range(5):
            await engine.start(through, i, "gpu", None, run_id=f"d-{i}")
        for i in range(5):
            assert await engine.result(f"d-{i}") == i * 10
        # Every task ran twice (duplicated), yet never more than two at once:
        # a duplicate result never frees a second slot.
        assert peak[0] <= 4
        assert sorted(started) == sorted([*range(5), *range(5)])
        await engine.drain()


async def test_a_fan_over_a_queued_step_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        run = await engine.start(fan_through_queue)
        with pytest.raises(td.RunFailed, match="concurrency="):
            await engine.result(run.id)
        assert started == []


async def test_unknown_queue_and_local_steps(autojump_clock: trio.testing.MockClock) -> None:
    local = td.App("local-queues")

    @local.step()
    async def here(x: int) -> int:
        return x

    @local.step(group="work")
    async def there(x: int) -> int:
        return x

    @local.workflow()
    async def bad_queue(ctx: td.Context) -> int:
        return await ctx.step(there, 1, queue="nope")

    @local.workflow()
    async def local_queue(ctx: td.Context) -> int:
        return await ctx.step(here, 1, queue="nope")

    async with td.open_engine(
        local, seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        for workflow, match in (
            (bad_queue, "no flow-control queue 'nope'"),
            (local_queue, "remote"),
        ):
            run = await engine.start(workflow)
            with pytest.raises(td.RunFailed, match=match):
                await engine.result(run.id)


def test_queue_registration_is_checked() -> None:
    local = td.App("reg")
    local.queue("q", concurrency=1)
    with pytest.raises(td.RegistrationError, match="already registered"):
        local.queue("q", concurrency=2)
    for concurrency in (0, -1, 1.5, True):
        with pytest.raises(td.RegistrationError, match="concurrency"):
            local.queue("other", concurrency=concurrency)  # type: ignore[arg-type]
    with pytest.raises(td.RegistrationError, match="queue="):

        @local.step(queue="q")
        async def local_step() -> None: ...

    assert local.get_queue("q") == td.FlowQueue(name="q", concurrency=1, priority=0)


@app.step(group="work")
async def brief(x: int) -> int:
    started.append(x)
    await trio.sleep(0.1)
    return x


@app.workflow()
async def brief_through(ctx: td.Context, x: int) -> int:
    return await ctx.step(brief, x, queue="gpu")


STORE_KINDS = ["memory", "sqlite"]


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_released_slot_admits_the_next_waiter_at_once(
    autojump_clock: trio.testing.MockClock, store_kind: str, tmp_path: Path
) -> None:
    store = "memory://" if store_kind == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    async with td.open_engine(
        app, store=store, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        for i in range(6):
            await engine.start(brief_through, i, run_id=f"b-{i}")
        for i in range(6):
            assert await engine.result(f"b-{i}") == i
        # Six steps of 0.1 s, two at a time: each release lets the next
        # waiter in at once, not at its next look in blocked_recheck (5 s).
        assert trio.current_time() == pytest.approx(0.3)
        assert sorted(started) == list(range(6))
        await engine.drain()


@pytest.mark.parametrize("store_kind", STORE_KINDS)
async def test_a_release_on_one_engine_admits_a_waiter_of_another_at_once(
    autojump_clock: trio.testing.MockClock, store_kind: str, tmp_path: Path
) -> None:
    # Two engines on one store: one MemoryStore, or one SQLite file each
    # engine opens on its own (as engine processes would).
    store: str | td.MemoryStore = (
        td.MemoryStore() if store_kind == "memory" else f"sqlite:///{tmp_path / 'q.db'}"
    )
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
        ) as a,
        td.open_engine(
            app, store=store, broker=broker, engine_id="b", seed=2, wall_clock=fixed_wall
        ) as b,
    ):
        # Engine a's runs take both slots and b's runs wait in line; the
        # results that release the slots are settled by either engine.
        for i in range(4):
            engine = a if i < 2 else b
            await engine.start(brief_through, i, run_id=f"f-{i}")
            await trio.testing.wait_all_tasks_blocked()
        for i in range(4):
            assert await b.result(f"f-{i}") == i
        # The runs' end stamps, not the clock: on SQLite, b learns of the
        # ends a wrote only at its next result poll (result_poll_interval).
        ends = [(await b.get(f"f-{i}")).updated_at - WALL_START for i in range(4)]
        assert max(ends) == pytest.approx(0.2)
        await a.drain()
        await b.drain()


class GatedStore:
    """Delegates to a store, but holds the turn of one run right after it
    took the lease and read the checkpoints, until released."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self.inner = inner
        self.run_id: str | None = None
        self.holding = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> Any:
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


async def test_a_waiter_let_in_while_another_engine_holds_its_run_is_sent_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = td.MemoryStore()
    gated = GatedStore(store)
    async with (
        td.open_engine(
            app,
            store=gated,
            broker=td.MemoryBroker(),
            serve=["work"],
            engine_id="a",
            seed=1,
            wall_clock=fixed_wall,
            blocked_recheck=100,
        ) as a,
        td.open_engine(
            app,
            store=store,
            broker=td.MemoryBroker(),
            serve=["work"],
            engine_id="b",
            seed=2,
            wall_clock=fixed_wall,
            blocked_recheck=100,
        ) as b,
    ):
        await b.start(through, 0, "single", None, run_id="holder")
        await trio.testing.wait_all_tasks_blocked()
        await a.start(through, 1, "single", None, run_id="waiter")
        await a.drain()
        # A turn of the waiter on engine a reads it still in line (its next
        # look due at +100 s) and holds the lease...
        gated.run_id = "waiter"
        a._rt.scheduler.wake("waiter")
        await gated.holding.wait()
        # ...while the holder's step ends on engine b at +10 s: b lets the
        # waiter in, but its wake of the run cannot take the lease.
        assert await b.result("holder") == 0
        await b.drain()
        [cp] = await store.get_checkpoints("waiter")
        assert cp.status == "pending"
        assert cp.error is None
        gated.release.set()
        assert await a.result("waiter") == 10
        assert trio.current_time() == 20.0
        assert started == [0, 1]


@app.workflow()
async def awaits_through(ctx: td.Context, x: int) -> int:
    return await ctx.child(through, x, "single", None)


async def test_a_step_sent_again_after_a_retry_asks_its_queue_for_a_slot_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with td.open_engine(
        app, serve=["work"], seed=1, wall_clock=fixed_wall, broker=td.MemoryBroker()
    ) as engine:
        await engine.start(awaits_through, 1, run_id="p")
        await trio.sleep(1)
        # The child is cancelled while its step is out; the step ends at
        # t=10, its result is dropped and its slot given back.
        await engine.cancel("p.child.1")
        with pytest.raises(td.RunFailed):
            await engine.result("p")
        await engine.drain()
        assert trio.current_time() == 10.0
        await engine.start(through, 2, "single", None, run_id="other")
        await trio.testing.wait_all_tasks_blocked()
        assert running == [2]
        # Retried, the child sends its step again, through the queue: it
        # waits for the slot "other" holds.
        await engine.retry("p")
        assert await engine.result("p") == 10
        assert trio.current_time() == 30.0
        assert started == [1, 2, 1]
        assert peak[0] == 1
        [cp] = await engine.store.get_checkpoints("p.child.1")
        assert (cp.status, cp.attempts, cp.error) == ("completed", 2, None)


def test_a_history_entry_names_the_queue_a_step_waits_in() -> None:
    def entry(mark: td.Mark) -> td.HistoryEntry:
        return td.HistoryEntry.of(
            td.Checkpoint(run_id="r", seq=1, name="s", kind="remote", mark=mark)
        )

    said = "waiting for a slot of queue 'mail'"
    assert entry(td.Mark("queued", said, {"queue": "mail"})).queue == "mail"
    # A mark written before marks carried the queue names it in its message.
    assert entry(td.Mark("queued", said)).queue == "mail"
    assert entry(td.Mark("blocked", said)).queue is None
