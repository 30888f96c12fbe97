"""`Engine.drain` is exact, and leaving `open_engine` leaves nothing behind."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import Any, cast

import pytest
import trio
import trio.lowlevel
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable._brokers._base import (
    RESULTS,
    BrokerUnavailable,
    Consumer,
    Delivery,
    Outgoing,
    WorkerDescriptor,
)
from trio_durable._stores._base import Store

app = td.App("drain")


@app.step()
async def pause(seconds: float) -> float:
    await trio.sleep(seconds)
    return seconds


@app.workflow()
async def busy(ctx: td.Context, seconds: float) -> float:
    return await ctx.step(pause, seconds)


@app.workflow()
async def napper(ctx: td.Context, seconds: float) -> str:
    await ctx.step(pause, 0)
    await ctx.sleep(seconds)
    return "rested"


@app.workflow()
async def waiter(ctx: td.Context) -> str:
    value: str = await ctx.wait_signal("go")
    return value


@app.workflow()
async def family(ctx: td.Context, n: int) -> list[float]:
    first = await ctx.child(busy, 1.0)
    rest = await ctx.all(busy, [float(i) for i in range(n)], concurrency=2)
    return [first, *rest]


@app.step(group="calc")
async def double(x: int) -> int:
    await trio.sleep(1)
    return 2 * x


@app.workflow()
async def doubled_twice(ctx: td.Context, x: int) -> int:
    y: int = await ctx.step(double, x)
    z: int = await ctx.step(double, y)
    return z


@app.workflow()
async def once(ctx: td.Context, x: int) -> int:
    y: int = await ctx.step(double, x)
    return y


@app.workflow()
async def patient(ctx: td.Context, x: int) -> str:
    try:
        await ctx.step(double, x)
    except td.RemoteStepError as exc:
        # The run goes on waiting (a timer): only the lost step is decided.
        await ctx.sleep(1000)
        return f"gave up: {exc.code}"
    return "ran"


def _tasks() -> list[trio.lowlevel.Task]:
    """Every task in the run, by walking the task tree from the root."""
    found: list[trio.lowlevel.Task] = []
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        assert task is not None
        found.append(task)
        for nursery in task.child_nurseries:
            todo.extend(nursery.child_tasks)
    return found


def _turn_tasks() -> list[str]:
    return sorted(t.name for t in _tasks() if t.name.startswith("trio_durable turn "))


def _engine_tasks() -> list[str]:
    return sorted(t.name for t in _tasks() if "trio_durable" in t.name)


async def test_after_drain_nothing_is_written_until_the_next_timer(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(napper, 100, run_id="n")
        await engine.start(family, 3, run_id="f")
        await engine.start(waiter, run_id="w")
        await engine.drain()
        # A child of 1 s, then the fan's members of 0, 1 and 2 s in a window
        # of two: member 2 starts as member 0 ends, at once: 1 + 2 s.
        assert trio.current_time() == 3.0
        assert (await engine.get("f")).status == "completed"
        assert (await engine.get("n")).status == "suspended"
        assert (await engine.get("w")).status == "suspended"
        assert _turn_tasks() == []
        assert engine.statistics().runs_active == 0
        ops = engine.store.statistics().ops

        await trio.testing.wait_all_tasks_blocked()
        assert engine.store.statistics().ops == ops
        # The timer is due at t=100: nothing happens before it.
        autojump_clock.jump(96.5)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.current_time() == 99.5
        assert engine.store.statistics().ops == ops
        await trio.sleep_until(99.999)
        assert engine.store.statistics().ops == ops
        assert _turn_tasks() == []
        assert (await engine.get("n")).status == "suspended"

        await trio.sleep_until(100)
        await engine.drain()
        assert trio.current_time() == 100.0
        assert await engine.result("n") == "rested"
        assert engine.store.statistics().ops > ops


async def test_drain_returns_exactly_when_the_last_effect_ends(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await trio.sleep(3)
        t0 = trio.current_time()
        await engine.start(busy, 5.0, run_id="b")
        await trio.testing.wait_all_tasks_blocked()
        assert _turn_tasks() == ["trio_durable turn b"]
        await engine.drain()
        assert trio.current_time() == t0 + 5
        run = await engine.get("b")
        assert run.status == "completed"
        assert run.updated_at == WALL_START + t0 + 5
        assert _turn_tasks() == []


async def test_drain_counts_a_timer_that_is_due_now(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(napper, 10, run_id="n")
        await engine.drain()
        assert trio.current_time() == 0.0
        await trio.sleep(10)
        # Due now: drain waits for that turn rather than returning first.
        await engine.drain()
        assert (await engine.get("n")).status == "completed"
        assert trio.current_time() == 10.0


async def test_drain_returns_at_once_with_runs_waiting_on_a_signal_or_a_timer(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app) as engine:
        await engine.start(waiter, run_id="w")
        await engine.start(napper, 30 * 86_400, run_id="n")
        await engine.drain()
        assert trio.current_time() == 0.0
        assert (await engine.get("w")).status == "suspended"
        assert (await engine.get("n")).wake_at == WALL_START + 30 * 86_400
        # With nothing executing, drain returns without a pause.
        with trio.fail_after(0.001):
            await engine.drain()
        assert trio.current_time() == 0.0

        await engine.signal("w", "go", "now")
        await engine.drain()
        assert await engine.result("w") == "now"
        assert trio.current_time() == 0.0


def _descendants(task: trio.lowlevel.Task) -> set[trio.lowlevel.Task]:
    found: set[trio.lowlevel.Task] = set()
    for nursery in task.child_nurseries:
        for child in nursery.child_tasks:
            found |= {child, *_descendants(child)}
    return found


async def test_leaving_open_engine_cancels_and_joins_everything(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    store = td.MemoryStore()

    async def use_engine() -> None:
        async with open_test_engine(app, store=store) as engine:
            await engine.start(busy, 1000.0, run_id="b")
            await engine.start(napper, 50, run_id="n")
            await engine.start(waiter, run_id="w")
            await trio.sleep(1)
            assert _turn_tasks() == ["trio_durable turn b"]
            assert "trio_durable due-run poller" in _engine_tasks()
            assert len(_descendants(trio.lowlevel.current_task())) >= 3
        # Everything the engine ran was under this task, and is gone.
        assert _descendants(trio.lowlevel.current_task()) == set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(use_engine)
        await trio.testing.wait_all_tasks_blocked()
        assert len(_descendants(trio.lowlevel.current_task())) > 3
    assert trio.current_time() == 1.0
    assert _engine_tasks() == []
    assert _descendants(trio.lowlevel.current_task()) == set()
    # The busy run's lease was given back, so another engine can resume it
    # at once; its unfinished turn wrote nothing.
    b = await store.get_run("b")
    assert b is not None
    assert (b.status, b.lease_owner, b.lease_expiry) == ("running", None, None)
    assert await store.get_checkpoints("b") == []

    # A fresh engine on the same store picks the run up and finishes it.
    async with open_test_engine(app, store=store, engine_id="second") as engine:
        assert await engine.result("b") == 1000.0
        assert trio.current_time() == 1001.0
        await engine.drain()
    assert _engine_tasks() == []


# -- what drain waits for, whatever the broker ---------------------------------


class _DeafConsumer:
    """A consumer that never receives (its engine takes no results)."""

    async def receive(self, max_items: int) -> list[Delivery]:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        await trio.lowlevel.checkpoint()

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        await trio.lowlevel.checkpoint()


class BrokerView:
    """A view of a `td.MemoryBroker` for one engine.

    By default it stands for a broker whose queues live on a server
    (RabbitMQ, NATS): it cannot tell when its queues are quiet. It can also
    lose the first ``lose`` messages sent to ``lossy`` queues (all of them if
    None), as a broker that accepted them and lost them would, fail every
    dispatch to ``refused`` queues, and give nothing to consumers of ``deaf``
    queues.
    """

    def __init__(
        self,
        inner: td.MemoryBroker,
        *,
        tells_quiet: bool = False,
        lossy: Sequence[str] = (),
        lose: int | None = None,
        refused: Sequence[str] = (),
        deaf: Sequence[str] = (),
    ) -> None:
        self.inner = inner
        self.tells_quiet = tells_quiet
        self.lossy = set(lossy)
        self.lose = lose
        self.refused = set(refused)
        self.deaf = set(deaf)
        self.lost = 0

    @property
    def durable(self) -> bool:
        return self.inner.durable

    @property
    def max_payload(self) -> int | None:
        return self.inner.max_payload

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        if any(m.queue in self.refused for m in messages):
            await trio.lowlevel.checkpoint()
            raise BrokerUnavailable("the queue refuses messages")
        kept = []
        for message in messages:
            if message.queue in self.lossy and (self.lose is None or self.lost < self.lose):
                self.lost += 1
                continue
            kept.append(message)
        await self.inner.dispatch(kept)

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[Consumer]:
        if queue in self.deaf:
            yield _DeafConsumer()
            return
        async with self.inner.open_consumer(queue, prefetch=prefetch) as consumer:
            yield consumer

    async def announce(self, descriptor: WorkerDescriptor, ttl: float) -> None:
        await self.inner.announce(descriptor, ttl)

    async def withdraw(self, instance_id: str) -> None:
        await self.inner.withdraw(instance_id)

    async def worker_descriptors(self, group: str | None = None) -> list[WorkerDescriptor]:
        return await self.inner.worker_descriptors(group)

    async def worker_groups(self) -> list[str]:
        return await self.inner.worker_groups()

    def quiet(self, queues: Sequence[str]) -> trio.Event | None:
        return self.inner.quiet(queues) if self.tells_quiet else None

    async def aclose(self) -> None:
        await self.inner.aclose()


class _TaskSteps(trio.abc.Instrument):
    """Counts how often the scheduler runs one task."""

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.steps += 1


@contextmanager
def wakeups() -> Iterator[_TaskSteps]:
    """How often the current task is woken inside the block."""
    counter = _TaskSteps(trio.lowlevel.current_task())
    trio.lowlevel.add_instrument(counter)
    try:
        yield counter
    finally:
        trio.lowlevel.remove_instrument(counter)


def results_queue(store: td.MemoryStore) -> str:
    return f"{RESULTS}.{store.scope}"


async def ended_at(engine: td.Engine, *run_ids: str) -> float:
    """The Trio time the last of these runs was written (all completed)."""
    runs = [await engine.get(run_id) for run_id in run_ids]
    assert [run.status for run in runs] == ["completed"] * len(runs)
    return max(run.updated_at for run in runs) - WALL_START


@pytest.mark.parametrize("tells_quiet", [False, True], ids=["server", "memory"])
async def test_drain_waits_for_the_tasks_it_serves_itself(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tells_quiet: bool
) -> None:
    # Delivery delays keep each task and result on the broker for a while,
    # where no worker or consumer counts them as busy: the engine's own
    # count of what it sent keeps drain waiting, on a broker that can tell
    # when its queues are quiet or not.
    inner = td.MemoryBroker(td.BrokerFaults(delay=5.0, seed=3))
    broker = BrokerView(inner, tells_quiet=tells_quiet)
    async with open_test_engine(app, broker=broker, serve=["calc"]) as engine:
        for x in range(4):
            await engine.start(doubled_twice, x, run_id=f"d{x}")
        with wakeups() as woken:
            await engine.drain()
        # Exactly when the last run ended, which took longer than its two
        # one-second steps (the deliveries were late).
        # (Durable times are WALL_START + Trio time: equal to float precision.)
        ended = await ended_at(engine, "d0", "d1", "d2", "d3")
        assert trio.current_time() == pytest.approx(ended, abs=1e-6)
        assert trio.current_time() > 2
        assert [await engine.result(f"d{x}") for x in range(4)] == [0, 4, 8, 12]
        assert inner.depth("calc") == inner.depth(engine.results_queue) == 0
        # It waited on events, not in a polling loop (one that slept a
        # millisecond at a time would have run thousands of times).
        assert woken.steps <= 40


async def test_drain_waits_on_events_not_in_a_polling_loop(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # On the memory broker, with each message held back up to 30 s: a drain
    # that looked at the queues every millisecond would be woken tens of
    # thousands of times; this one is woken when something it waits for
    # ends, and no sooner.
    broker = td.MemoryBroker(td.BrokerFaults(delay=30.0, seed=5))
    async with open_test_engine(app, broker=broker, serve=["calc"]) as engine:
        for x in range(3):
            await engine.start(doubled_twice, x, run_id=f"d{x}")
        with wakeups() as woken:
            await engine.drain()
        ended = await ended_at(engine, "d0", "d1", "d2")
        assert trio.current_time() == pytest.approx(ended, abs=1e-6)
        assert trio.current_time() > 30
        assert woken.steps <= 30
        assert broker.depth("calc") == broker.depth(engine.results_queue) == 0


async def test_drain_does_not_wait_for_a_separate_worker_but_for_its_results(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    broker = td.MemoryBroker()
    async with (
        open_test_engine(app, broker=broker) as engine,
        td.open_worker(app, broker=broker, groups=["calc"], instance_id="w") as worker,
    ):
        await engine.start(doubled_twice, 5, run_id="d")
        # The step is the separate worker's: like a signal, it comes from
        # outside the engine, so drain returns while the worker runs it.
        await engine.drain()
        assert trio.current_time() == 0
        assert (await engine.get("d")).status == "suspended"
        await trio.sleep(0.5)
        assert worker.busy
        # Its result is on the results queue once the worker is idle: drain
        # settles it, and runs the turn it wakes (which sends the second step).
        await worker.wait_idle()
        assert trio.current_time() == 1
        await engine.drain()
        assert trio.current_time() == 1
        [first, second] = await engine.store.get_checkpoints("d")
        assert (first.status, second.status) == ("completed", "pending")
        assert await engine.result("d") == 20
        assert trio.current_time() == 2


@pytest.mark.parametrize("tells_quiet", [False, True], ids=["server", "memory"])
async def test_drain_never_hangs_on_a_result_another_engine_settled(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, tells_quiet: bool
) -> None:
    # Engine a runs the step on its own worker, but its result consumer
    # takes nothing: engine b, on the same store, settles the result and
    # resumes the run. a learns that from b at once (they share a process),
    # and has nothing left to do: the resumed turn is b's.
    store = td.MemoryStore()
    inner = td.MemoryBroker()
    deaf = BrokerView(inner, tells_quiet=tells_quiet, deaf=[results_queue(store)])
    async with (
        open_test_engine(app, store=store, broker=deaf, serve=["calc"], engine_id="a") as a,
        open_test_engine(app, store=store, broker=inner, engine_id="b") as b,
    ):
        await a.start(once, 1, run_id="d")
        with trio.fail_after(100):
            await a.drain()
        assert trio.current_time() == 1
        [cp] = await a.store.get_checkpoints("d")
        assert cp.status == "completed"
        await b.drain()
        assert trio.current_time() == await ended_at(b, "d") == 1
        assert await b.result("d") == 2


async def test_drain_learns_of_results_settled_in_another_process_at_reconcile(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # As above, but b stands for an engine in another process: it shares
    # the store and the results queue, and tells a nothing. a's reconcile
    # pass looks up the steps it still counts (only while a drain waits).
    store = td.MemoryStore()
    inner = td.MemoryBroker()
    deaf = BrokerView(inner, deaf=[results_queue(store)])
    async with (
        open_test_engine(
            app,
            store=cast(Store, _ElsewhereWritten(store)),
            broker=deaf,
            serve=["calc"],
            engine_id="a",
            reconcile_interval=60.0,
        ) as a,
        open_test_engine(app, store=store, broker=inner, engine_id="b") as b,
    ):
        b._rt.sent.leave()  # another process: its bookkeeping is not shared
        await a.start(doubled_twice, 1, run_id="d")
        with trio.fail_after(100):
            await a.drain()
        assert await ended_at(b, "d") == 2
        assert trio.current_time() == 60


class _ElsewhereWritten:
    """A view of a `td.MemoryStore` without its change feed: a store that
    other processes write too (as SQLite or PostgreSQL)."""

    def __init__(self, inner: td.MemoryStore) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("run_end_event", "due_event", "unwoken_runs", "unwoken_event"):
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_step_sent_again_after_it_was_lost_counts_once(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # The broker loses the first task: at the lost deadline (5 s) the
    # engine sends it again, and drain waits for that attempt alone.
    broker = BrokerView(td.MemoryBroker(), lossy=["calc"], lose=1)
    async with open_test_engine(
        app, broker=broker, serve=["calc"], remote_redispatch=(5.0, 3)
    ) as engine:
        await engine.start(patient, 4, run_id="p")
        with trio.fail_after(100):
            await engine.drain()
        assert trio.current_time() == await ended_at(engine, "p") == 6
        assert broker.lost == 1
        [cp] = await engine.store.get_checkpoints("p", 1, 1)
        assert (cp.status, cp.attempts) == ("completed", 2)


async def test_a_step_lost_for_good_stops_counting(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    # Every send is lost: after one redispatch the step fails with code
    # "lost", and the run waits on a timer. Nothing is left to come.
    broker = BrokerView(td.MemoryBroker(), lossy=["calc"])
    async with open_test_engine(
        app, broker=broker, serve=["calc"], remote_redispatch=(5.0, 1)
    ) as engine:
        await engine.start(patient, 4, run_id="p")
        with trio.fail_after(100):
            await engine.drain()
        assert trio.current_time() == 10
        assert broker.lost == 2
        [cp] = await engine.store.get_checkpoints("p", 1, 1)
        assert (cp.status, cp.error.code if cp.error else None) == ("failed", "lost")
        assert (await engine.get("p")).status == "suspended"
        assert await engine.result("p") == "gave up: lost"


async def test_a_task_that_cannot_be_sent_stops_counting(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    broker = BrokerView(td.MemoryBroker(), refused=["calc"])
    async with open_test_engine(app, broker=broker, serve=["calc"]) as engine:
        await engine.start(doubled_twice, 1, run_id="d")
        with trio.fail_after(100):
            await engine.drain()
        # Eight tries with backoff, then the step stays pending, unsent.
        assert 0 < trio.current_time() < 10
        [cp] = await engine.store.get_checkpoints("d")
        assert cp.status == "pending"
        t = trio.current_time()
        await engine.drain()
        assert trio.current_time() == t


async def test_duplicates_of_a_task_never_make_the_count_negative(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    inner = td.MemoryBroker(td.BrokerFaults(duplicate=1.0, seed=1))
    async with open_test_engine(app, broker=BrokerView(inner), serve=["calc"]) as engine:
        await engine.start(doubled_twice, 3, run_id="d")
        with trio.fail_after(100):
            await engine.drain()
        assert await engine.result("d") == 12
        # Every task ran twice and every result came twice; the extra ones
        # changed nothing, and drain still has nothing to wait for.
        t = trio.current_time()
        await trio.sleep(60)
        assert inner.depth("calc") == inner.depth(engine.results_queue) == 0
        assert inner.duplicated == 2 + 4  # both tasks, and the 4 results
        with trio.fail_after(0.001):
            await engine.drain()
        assert trio.current_time() == t + 60


async def test_a_cancelled_run_stops_counting_but_its_running_step_is_waited_for(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, broker=BrokerView(td.MemoryBroker()), serve=["calc"]) as e:
        await e.start(doubled_twice, 3, run_id="d")
        await trio.testing.wait_all_tasks_blocked()
        await e.cancel("d")
        with trio.fail_after(100):
            await e.drain()
        # Its result would change nothing, but the embedded worker was
        # running its step: drain waited for that.
        assert trio.current_time() == 1
        assert (await e.get("d")).status == "cancelled"


@pytest.mark.parametrize("waiting_on", ["sent task", "worker"])
async def test_drain_raises_once_the_engine_closed_under_it(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, waiting_on: str
) -> None:
    async with trio.open_nursery() as nursery:
        async with open_test_engine(app, broker=BrokerView(td.MemoryBroker()), serve=["calc"]) as e:
            await e.start(doubled_twice, 3, run_id="d")
            if waiting_on == "worker":
                # The run ended, but its step still runs on the worker.
                await trio.testing.wait_all_tasks_blocked()
                await e.cancel("d")
            failed = trio.Event()

            async def drain() -> None:
                with pytest.raises(td.EngineClosedError):
                    await e.drain()
                failed.set()

            nursery.start_soon(drain)
            await trio.sleep(0.5)
            assert e._rt.worker is not None
            assert (e._rt.sent.count, e._rt.worker.busy) == (
                (0, True) if waiting_on == "worker" else (1, True)
            )
        with trio.fail_after(1):
            await failed.wait()
