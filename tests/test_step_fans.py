"""Fans of remote steps: `Context.all` / `all_settled` over a step with a group.

Covers the seq reservation and its replay across an engine restart, the
chunked writes before any task is sent, waves, the join barrier, fail_fast
freezing, result batching in the engine's consumer (one store write per batch,
acks only after the write), lost steps (``remote_redispatch``) and bad input.

Every test records what the store committed, what the broker carried and
when, through `RecordingStore` and `RecordingBroker`, into one shared log, so
orderings ("every checkpoint is durable before the first task is sent", "a
result is acked only after its write committed") are asserted on what really
happened, in the order it happened.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory
from trio_durable._base._exceptions import RemoteStepError
from trio_durable._brokers._base import RESULTS, Delivery, Outgoing
from trio_durable._brokers._memory import MemoryBroker, MemoryConsumer
from trio_durable._kernel._replay import TurnDraft
from trio_durable._stores._ops import CreateRun, Op, PutCheckpoint, SettleCheckpoint, UpdateRun
from trio_durable._wire._messages import Result, Task

app = td.App("step_fans")


# -- what the steps and workflows record -----------------------------------------


@attrs.define
class World:
    """What the steps and bodies of this module saw (reset for each test)."""

    # (job index, trio time) each time a worker started a job.
    executions: list[tuple[int, float]] = attrs.field(factory=list)
    calls: Counter[int] = attrs.field(factory=Counter)
    # (run id, trio time) each time a body was entered: one per turn.
    bodies: list[tuple[str, float]] = attrs.field(factory=list)
    remote_errors: list[RemoteStepError] = attrs.field(factory=list)
    # Jobs with hold=True wait for the gate (once it exists) and set held.
    gate: trio.Event | None = None
    held: trio.Event | None = None
    # Once set, jobs with fail= succeed (the fault was fixed).
    fixed: bool = False


world = World()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    global world
    world = World()
    yield
    world = World()


@attrs.define(frozen=True)
class Job:
    """What one fan member does on the worker.

    Attributes:
      index: Its result is ``index * 10``.
      seconds: How long it works first.
      fail: Raise `td.FatalError` with this code instead of returning.
      hold: Wait for ``world.gate`` (until it is set).
      swallow: How many of its first executions never end.
      flaky: How many of its first executions raise a retryable error
        (for `retried`).
    """

    index: int
    seconds: float = 0.0
    fail: str | None = None
    hold: bool = False
    swallow: int = 0
    flaky: int = 0


@app.step(group="g", retry=td.Retry(attempts=1))
async def work(job: Job) -> int:
    world.calls[job.index] += 1
    world.executions.append((job.index, trio.current_time()))
    if world.calls[job.index] <= job.swallow:
        await trio.sleep_forever()
    if job.hold and world.gate is not None and not world.gate.is_set():
        assert world.held is not None
        world.held.set()
        await world.gate.wait()
    await trio.sleep(job.seconds)
    if job.fail is not None and not world.fixed:
        raise td.FatalError(f"job {job.index} failed", code=job.fail, details={"index": job.index})
    return job.index * 10


@app.step(group="g", retry=td.Retry(attempts=3, backoff=2.0, jitter=0.0))
async def retried(job: Job) -> int:
    world.calls[job.index] += 1
    world.executions.append((job.index, trio.current_time()))
    await trio.sleep(job.seconds)
    if world.calls[job.index] <= job.flaky:
        raise ValueError(f"job {job.index} flaked ({world.calls[job.index]})")
    return job.index * 10


@app.workflow()
async def retried_fan(ctx: td.Context, jobs: list[Job]) -> list[int]:
    world.bodies.append((ctx.run_id, trio.current_time()))
    return await ctx.all(retried, jobs)


@app.step()
async def prepare(n: int) -> int:
    return n


@app.workflow()
async def around(ctx: td.Context, jobs: list[Job], concurrency: int | None) -> dict[str, Any]:
    """A local step (seq 1), the fan (seqs 2..N+1), a remote step (N+2)."""
    world.bodies.append((ctx.run_id, trio.current_time()))
    before = await ctx.step(prepare, len(jobs))
    results = await ctx.all(work, jobs, concurrency=concurrency)
    after = await ctx.step(work, Job(index=100))
    return {"before": before, "results": results, "after": after}


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
    linger: float,
) -> dict[str, Any]:
    """The fan alone (seqs from 1); on failure, sleeps ``linger`` before
    returning the failures, so that late results find the run alive."""
    world.bodies.append((ctx.run_id, trio.current_time()))
    try:
        results = await ctx.all(work, jobs, concurrency=concurrency, mode=mode)
    except td.GatherError as exc:
        await ctx.sleep(linger)
        return {"failures": [attrs.asdict(f) for f in exc.failures], "total": exc.total}
    return {"results": results}


@app.workflow()
async def strict_fan(ctx: td.Context, jobs: list[Job]) -> list[int]:
    world.bodies.append((ctx.run_id, trio.current_time()))
    return await ctx.all(work, jobs)


@app.workflow()
async def settled(
    ctx: td.Context, jobs: list[Job], concurrency: int | None
) -> list[dict[str, Any]]:
    world.bodies.append((ctx.run_id, trio.current_time()))
    return await ctx.all_settled(work, jobs, concurrency=concurrency)


@app.workflow()
async def single(ctx: td.Context, job: Job) -> int:
    world.bodies.append((ctx.run_id, trio.current_time()))
    try:
        return await ctx.step(work, job)
    except RemoteStepError as exc:
        world.remote_errors.append(exc)
        raise


Misuse = Literal["local", "zero", "settled_zero", "bool", "negative"]


@app.workflow()
async def misuse(ctx: td.Context, which: Misuse, catch: bool) -> dict[str, Any]:
    """A bad fan call, then (if it was caught) one remote step."""
    message = ""
    try:
        if which == "local":
            await ctx.all(prepare, [1, 2])
        elif which == "zero":
            await ctx.all(work, [Job(index=0)], concurrency=0)
        elif which == "settled_zero":
            await ctx.all_settled(work, [Job(index=0)], concurrency=0)
        elif which == "bool":
            await ctx.all(work, [Job(index=0)], concurrency=True)
        else:
            await ctx.all(work, [Job(index=0)], concurrency=-3)
    except td.UsageError as exc:
        if not catch:
            raise
        message = str(exc)
    value = await ctx.step(work, Job(index=7))
    return {"error": message, "value": value}


# -- recording store and broker ---------------------------------------------------


@attrs.define(frozen=True)
class Applied:
    """One call of `Store.apply`: its ops, and whether it committed."""

    ops: tuple[Op, ...]
    ok: bool
    at: float

    def count(self, kind: type[Any]) -> int:
        return sum(1 for op in self.ops if isinstance(op, kind))

    @property
    def settles(self) -> tuple[int, ...]:
        """The seqs this call settles (the result consumer's writes)."""
        return tuple(op.seq for op in self.ops if isinstance(op, SettleCheckpoint))


@attrs.define(frozen=True)
class Sent:
    """One `Broker.dispatch` of tasks (results travelling back are not logged)."""

    tasks: tuple[Task, ...]
    at: float

    @property
    def seqs(self) -> list[int]:
        return [task.seq for task in self.tasks]


@attrs.define(frozen=True)
class Took:
    """What the engine's result consumer did with result deliveries."""

    what: Literal["receive", "ack", "reject"]
    seqs: tuple[int, ...]
    deliveries: tuple[int, ...]
    requeue: bool = False


@attrs.define(frozen=True)
class Woke:
    """A call of `Engine._wake`."""

    run_id: str


Entry = Applied | Sent | Took | Woke


class RecordingStore(td.MemoryStore):  # type: ignore[misc]
    """A memory store that logs every `apply`, and fails those ``fail`` picks
    (raising `td.StoreError` before anything is written)."""

    def __init__(
        self, log: list[Entry], fail: Callable[[Sequence[Op]], bool] | None = None
    ) -> None:
        super().__init__()
        self.log = log
        self.fail = fail

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        if self.fail is not None and self.fail(ops):
            await trio.lowlevel.checkpoint()
            self.log.append(Applied(tuple(ops), ok=False, at=trio.current_time()))
            raise td.StoreError("injected failure")
        results = await super().apply(ops)
        self.log.append(Applied(tuple(ops), ok=True, at=trio.current_time()))
        return results


def _seqs(deliveries: Sequence[Delivery]) -> tuple[int, ...]:
    return tuple(Result.decode(d.body).seq for d in deliveries)


class RecordingConsumer(MemoryConsumer):  # type: ignore[misc]
    """Logs what the engine's consumer of results receives, acks, rejects."""

    def __init__(self, broker: MemoryBroker, queue: str, prefetch: int, log: list[Entry]) -> None:
        super().__init__(broker, queue, prefetch)
        self._log = log if queue.startswith(RESULTS) else None

    def _record(
        self, what: Literal["receive", "ack", "reject"], batch: Sequence[Delivery], requeue: bool
    ) -> None:
        if self._log is not None:
            self._log.append(
                Took(what, _seqs(batch), tuple(d.deliveries for d in batch), requeue=requeue)
            )

    async def receive(self, max_items: int) -> list[Delivery]:
        batch = await super().receive(max_items)
        self._record("receive", batch, False)
        return batch

    async def ack(self, deliveries: Sequence[Delivery]) -> None:
        self._record("ack", deliveries, False)
        await super().ack(deliveries)

    async def reject(self, deliveries: Sequence[Delivery], *, requeue: bool) -> None:
        self._record("reject", deliveries, requeue)
        await super().reject(deliveries, requeue=requeue)


class RecordingBroker(MemoryBroker):  # type: ignore[misc]
    """A memory broker that logs each dispatch of tasks (calling ``on_send``
    first, with the tasks about to go out) and the result consumer's moves."""

    def __init__(self, log: list[Entry]) -> None:
        super().__init__()
        self.log = log
        self.on_send: Callable[[tuple[Task, ...]], Awaitable[None]] | None = None

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        tasks = tuple(Task.decode(m.body) for m in messages if not m.queue.startswith(RESULTS))
        if tasks:
            if self.on_send is not None:
                await self.on_send(tasks)
            self.log.append(Sent(tasks, trio.current_time()))
        await super().dispatch(messages)

    @asynccontextmanager
    async def open_consumer(self, queue: str, *, prefetch: int) -> AsyncIterator[MemoryConsumer]:
        consumer = RecordingConsumer(self, queue, prefetch, self.log)
        try:
            yield consumer
        finally:
            consumer._close()


def record_wakes(engine: td.Engine, log: list[Entry], monkeypatch: pytest.MonkeyPatch) -> None:
    """Log every wake of a run (who asked for a turn of which run)."""
    scheduler = engine._rt.scheduler
    original = scheduler.wake

    def wake(run_id: str, *, initial: TurnDraft | None = None) -> None:
        log.append(Woke(run_id))
        original(run_id, initial=initial)

    monkeypatch.setattr(scheduler, "wake", wake)


def sent(log: Sequence[Entry]) -> list[Sent]:
    return [entry for entry in log if isinstance(entry, Sent)]


def settle_writes(log: Sequence[Entry]) -> list[Applied]:
    """The result consumer's writes: applies that settle checkpoints (and
    nothing else)."""
    return [e for e in log if isinstance(e, Applied) and e.settles and len(e.settles) == len(e.ops)]


def run_events(rx: trio.MemoryReceiveChannel[td.Event], run_id: str) -> list[td.Event]:
    """The events of ``run_id`` received so far."""
    events: list[td.Event] = []
    while True:
        try:
            event = rx.receive_nowait()
        except trio.WouldBlock:
            return events
        if event.run_id == run_id:
            events.append(event)


def times(events: Sequence[td.Event], kind: str) -> list[float]:
    return [e.at - WALL_START for e in events if e.kind == kind]


# -- seqs and replay ------------------------------------------------------------


async def test_a_fan_reserves_one_seq_per_input_and_replays_across_a_restart(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    jobs = [Job(index=i, seconds=1, hold=i == 5) for i in range(10)]
    world.gate = trio.Event()
    world.held = trio.Event()
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], engine_id="first"
    ) as engine:
        await engine.start(around, jobs, 3, run_id="p")
        # Mid-fan: members 0, 1, 2 done, and each started one in its place
        # (3, 4, 5), with member 5 stuck on the worker.
        await world.held.wait()
        assert trio.current_time() == 1.0
        first_turns = engine.statistics().turns
    assert first_turns == 1  # the one that recorded the fan and sent its first three
    cps = await store.get_checkpoints("p")
    # Every member is recorded up front; those past the window wait unsent.
    # The step after the fan (12) is not recorded yet.
    assert [cp.seq for cp in cps] == list(range(1, 12))
    assert [cp.started_at is None for cp in cps[1:]] == [False] * 6 + [True] * 4
    run = await store.get_run("p")
    assert run is not None
    assert (run.status, run.lease_owner) == ("suspended", None)

    world.gate.set()
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], engine_id="second"
    ) as engine:
        # Nobody wakes the run but the result of the task the first engine's
        # worker left unacked, delivered again to this one's.
        result = await engine.result("p")
        assert trio.current_time() == 4.0
        await engine.drain()
        second_turns = engine.statistics().turns
    assert result == {"before": 10, "results": [i * 10 for i in range(10)], "after": 1000}
    # The one that sent the step after the fan, and the final one: the
    # members were started by the ends that made way for them.
    assert second_turns == 2
    assert world.calls[5] == 2  # once stuck, once on the second engine
    assert all(world.calls[i] >= 1 for i in range(10))

    cps = await store.get_checkpoints("p")
    assert [(cp.seq, cp.kind, cp.name, cp.status) for cp in cps] == [
        (1, "local", "prepare", "completed"),
        *[(2 + i, "remote", "work", "completed") for i in range(10)],
        # One seq per input was reserved up front: the next op is at first + N.
        (12, "remote", "work", "completed"),
    ]
    for cp in cps[1:11]:
        assert (cp.parallel_group, cp.parallel_size, cp.parallel_mode) == (2, 10, "fail_fast")
        assert cp.attempts == 1
        assert cp.group == "g"
    assert (cps[11].parallel_group, cps[11].parallel_size) == (None, None)
    # Every task went out once (redeliveries are the broker's, not new sends),
    # at first + i, each as soon as a member ended.
    sends = {seq: s.at for s in sent(log) for seq in s.seqs}
    assert sorted(seq for s in sent(log) for seq in s.seqs) == list(range(2, 13))
    assert sends == {
        **{2: 0.0, 3: 0.0, 4: 0.0, 5: 1.0, 6: 1.0, 7: 1.0},
        **{8: 2.0, 9: 2.0, 10: 2.0, 11: 3.0, 12: 4.0},
    }


# -- writes before dispatch -----------------------------------------------------


async def test_pending_checkpoints_are_written_in_chunks_before_any_task_is_sent(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    pending_at_first_send: list[int] = []

    async def on_send(tasks: tuple[Task, ...]) -> None:
        if not sent(log):
            pending_at_first_send.append(await store.count_checkpoints("p", 1, 10_000, ["pending"]))

    broker.on_send = on_send
    jobs = [Job(index=i) for i in range(450)]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
        result = await engine.result("p")
        await engine.drain()
    assert result == {"results": [i * 10 for i in range(450)]}

    first_send = next(i for i, e in enumerate(log) if isinstance(e, Sent))
    before = [e for e in log[:first_send] if isinstance(e, Applied)]
    assert all(e.ok for e in before)
    assert [
        (e.count(CreateRun), e.count(PutCheckpoint), e.count(UpdateRun), len(e.ops)) for e in before
    ] == [
        (1, 0, 0, 1),  # engine.start
        (0, 200, 1, 201),  # a chunk, fenced by the lease
        (0, 200, 1, 201),
        (0, 50, 1, 51),  # the rest, with the write that suspends the run
    ]
    put_seqs = [op.checkpoint.seq for e in before for op in e.ops if isinstance(op, PutCheckpoint)]
    assert put_seqs == list(range(1, 451))
    # Every member was pending in the store when the first task went out, and
    # that first dispatch carried all 450 tasks.
    assert pending_at_first_send == [450]
    assert sent(log)[0].seqs == list(range(1, 451))
    assert [s.at for s in sent(log)] == [0.0]
    # The suspend write came last before the send: the run was suspended.
    last = before[-1].ops[-1]
    assert isinstance(last, UpdateRun)
    assert last.changes["status"] == "suspended"


# -- waves and the join barrier -------------------------------------------------


async def test_a_window_sends_a_member_as_soon_as_one_ends(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    durations = [1, 2, 3, 1, 1, 1, 5, 1, 1, 2]
    jobs = [Job(index=i, seconds=s) for i, s in enumerate(durations)]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, 3, WAIT_ALL, 0.0, run_id="p")
            result = await engine.result("p")
            # Waves of three would end at 11: each waits for its slowest.
            assert trio.current_time() == 8.0
            await engine.drain()
            events = run_events(rx, "p")
        turns = engine.statistics().turns
    assert result == {"results": [i * 10 for i in range(10)]}
    # Each end sent the waiting member of lowest index at once; the slow
    # member 2 (3 s) and 6 (5 s) held back no other.
    sends = {seq: s.at for s in sent(log) for seq in s.seqs}
    assert sorted(seq for s in sent(log) for seq in s.seqs) == list(range(1, 11))
    assert sends == {
        **{1: 0.0, 2: 0.0, 3: 0.0, 4: 1.0, 5: 2.0, 6: 2.0, 7: 3.0, 8: 3.0, 9: 3.0},
        **{10: 4.0},
    }
    starts = dict(world.executions)
    assert starts == {0: 0, 1: 0, 2: 0, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3, 8: 3, 9: 4}
    ends = {i: starts[i] + durations[i] for i in starts}
    for t in set(starts.values()):
        assert sum(1 for i in starts if starts[i] <= t < ends[i]) <= 3
    # The parent turned to start the fan and once it all ended, not once
    # per result (ten results came back at six different times).
    assert turns == 2
    assert [t for _, t in world.bodies] == [0.0, 8.0]
    assert times(events, "run.suspended") == [0.0]
    assert times(events, "run.completed") == [8.0]
    assert len(times(events, "step.completed")) == 10


async def test_join_barrier_resumes_a_300_step_fan_once(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    jobs = [Job(index=i, seconds=i % 7) for i in range(300)]
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], worker_concurrency=300
    ) as engine:
        record_wakes(engine, log, monkeypatch)
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
            result = await engine.result("p")
            assert trio.current_time() == 6.0
            await engine.drain()
            events = run_events(rx, "p")
        turns = engine.statistics().turns
    assert result == {"results": [i * 10 for i in range(300)]}
    # Results came back in many batches (at least one per distinct duration)...
    writes = settle_writes(log)
    assert len(writes) >= 7
    assert sorted(seq for w in writes for seq in w.settles) == list(range(1, 301))
    # ... yet the parent resumed exactly twice in all: the first turn, which
    # suspended, and the final one, woken by the last batch only.
    assert turns == 2
    assert [t for _, t in world.bodies] == [0.0, 6.0]
    assert [e.kind for e in events if e.kind.startswith("run.")] == [
        "run.started",
        "run.suspended",
        "run.completed",
    ]
    wakes = [i for i, e in enumerate(log) if isinstance(e, Woke)]
    assert len(wakes) == 2  # engine.start, and the barrier once
    assert log.index(writes[-1]) < wakes[1]
    assert all(log.index(w) < wakes[1] for w in writes)
    # The final turn read each checkpoint once (the first turn read none).
    assert store.statistics().checkpoint_rows_read == 300


async def test_a_thousand_step_fan_in_a_window_of_fifty_reads_linearly(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    jobs = [Job(index=i) for i in range(1000)]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(fan, jobs, 50, FAIL_FAST, 0.0, run_id="p")
        result = await engine.result("p")
        await engine.drain()
        turns = engine.statistics().turns
    assert result == {"results": [i * 10 for i in range(1000)]}
    assert trio.current_time() == 0.0
    assert turns == 2  # the one that recorded the fan, the final one
    # Sent in index order, each once.
    assert [seq for s in sent(log) for seq in s.seqs] == list(range(1, 1001))
    assert all(world.calls[i] == 1 for i in range(1000))
    # Each start read the one row it started (950), and the final turn read
    # every member once (1,000): linear, where waves of fifty read
    # 50 * (1 + 2 + ... + 20) = 10,500 rows.
    assert store.statistics().checkpoint_rows_read == 950 + 1000


# -- failures -------------------------------------------------------------------


async def test_fail_fast_freezes_the_fan(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    jobs = [
        Job(index=0, seconds=10),
        Job(index=1, seconds=10),
        Job(index=2, seconds=1, fail="boom"),
        Job(index=3, seconds=10),
        *[Job(index=i) for i in range(4, 10)],
    ]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, 4, FAIL_FAST, 100.0, run_id="p")
            # The failure woke the parent at once; it froze the fan and now
            # sleeps, so results arriving at t=10 find the run alive.
            await trio.sleep(5)
            frozen = await store.get_checkpoints("p")
            result = await engine.result("p")
            assert trio.current_time() == 101.0
            await engine.drain()
            events = run_events(rx, "p")
    assert result == {
        "failures": [
            {
                "index": 2,
                "id": "p.all.1.2",
                "error": "job 2 failed",
                "code": "boom",
                "details": {"index": 2},
            }
        ],
        "total": 10,
    }
    # Only the first wave was ever sent, and the worker ran only it; the
    # survivors ran to their end at t=10.
    assert [s.seqs for s in sent(log)] == [[1, 2, 3, 4]]
    assert sorted(world.executions) == [(0, 0.0), (1, 0.0), (2, 0.0), (3, 0.0)]
    frozen_cps = {cp.seq: cp for cp in frozen if cp.kind == "remote"}
    cps = {cp.seq: cp for cp in await store.get_checkpoints("p") if cp.kind == "remote"}
    for each in (frozen_cps, cps):
        assert each[3].status == "failed"
        assert each[3].error == td.ErrorInfo(
            message="job 2 failed",
            code="boom",
            details={"index": 2},
            type="FatalError",
            step="work",
        )
        for seq in range(1, 11):
            assert (each[seq].parallel_group, each[seq].parallel_size) == (1, 10)
    for seq in (1, 2, 4, 5, 6, 7, 8, 9, 10):
        error = frozen_cps[seq].error
        assert (frozen_cps[seq].status, error and error.code) == ("failed", "fan_cancelled")
    # Members 0, 1 and 3 had been sent; 4..9 never were.
    assert [seq for seq in sorted(cps) if cps[seq].started_at is not None] == [1, 2, 3, 4]
    # The late results (t=10) changed nothing of the fan's outcome and woke
    # nobody, but their successes were kept on the members' checkpoints (so
    # a retry of a failed run would not run them again).
    for seq in (1, 2, 4):
        assert (cps[seq].status, cps[seq].error) == ("completed", None)
        assert cps[seq].output == str((seq - 1) * 10)
    for seq in range(5, 11):
        assert cps[seq] == frozen_cps[seq]
    late = [w for w in settle_writes(log) if w.at == 10.0]
    # Each was a claim of a pending step first (which found none), then one
    # write of the claims that keep a late success (of a cancelled member,
    # of a lost step), of which the first applied.
    assert sorted(seq for w in late for seq in w.settles) == [1, 1, 1, 2, 2, 2, 4, 4, 4]
    assert sorted(e.seq or 0 for e in events if e.kind == "step.completed") == [1, 2, 4]
    assert [(e.kind, e.at - WALL_START) for e in events if e.kind.startswith("run.")] == [
        ("run.started", 0.0),
        ("run.suspended", 0.0),
        ("run.suspended", 1.0),
        ("run.completed", 101.0),
    ]
    assert [t for _, t in world.bodies] == [0.0, 1.0, 101.0]


async def test_wait_all_collects_every_failure(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    jobs = [
        Job(index=0, seconds=2),
        Job(index=1, seconds=1, fail="first"),
        Job(index=2, seconds=2),
        Job(index=3, seconds=2),
        Job(index=4, seconds=3, fail="second"),
        Job(index=5, seconds=2),
    ]
    async with open_test_engine(
        app, store=RecordingStore(log), broker=RecordingBroker(log), serve=["g"]
    ) as engine:
        await engine.start(fan, jobs, None, WAIT_ALL, 0.0, run_id="p")
        result = await engine.result("p")
        # The parent waited for the slowest member, not the first failure.
        assert trio.current_time() == 3.0
        await engine.drain()
    assert result == {
        "failures": [
            {
                "index": 1,
                "id": "p.all.1.1",
                "error": "job 1 failed",
                "code": "first",
                "details": {"index": 1},
            },
            {
                "index": 4,
                "id": "p.all.1.4",
                "error": "job 4 failed",
                "code": "second",
                "details": {"index": 4},
            },
        ],
        "total": 6,
    }
    assert sorted(world.calls) == list(range(6))
    assert [t for _, t in world.bodies] == [0.0, 3.0]


async def test_all_settled_returns_outcomes_in_input_order(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    jobs = [
        Job(index=0, seconds=3),
        Job(index=1, seconds=1, fail="nope"),
        Job(index=2, seconds=2),
        Job(index=3, seconds=2, fail="again"),
        Job(index=4, seconds=1),
    ]
    async with open_test_engine(
        app, store=RecordingStore(log), broker=RecordingBroker(log), serve=["g"]
    ) as engine:
        await engine.start(settled, jobs, 2, run_id="p")
        result = await engine.result("p")
        assert trio.current_time() == 5.0
        await engine.drain()
    assert result == [
        {"status": "fulfilled", "value": 0},
        {
            "status": "rejected",
            "id": "p.all.1.1",
            "error": "job 1 failed",
            "code": "nope",
            "details": {"index": 1},
        },
        {"status": "fulfilled", "value": 20},
        {
            "status": "rejected",
            "id": "p.all.1.3",
            "error": "job 3 failed",
            "code": "again",
            "details": {"index": 3},
        },
        {"status": "fulfilled", "value": 40},
    ]
    # A failure does not wake a settled fan early, and makes way for the
    # next member as a success does: a window of two.
    sends = {seq: s.at for s in sent(log) for seq in s.seqs}
    assert sends == {1: 0.0, 2: 0.0, 3: 1.0, 4: 3.0, 5: 3.0}
    assert [t for _, t in world.bodies] == [0.0, 5.0]


# -- result batching -------------------------------------------------------------


async def test_results_are_settled_in_batches_of_one_write_each(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    jobs = [Job(index=i, seconds=1) for i in range(600)]
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], worker_concurrency=300
    ) as engine:
        record_wakes(engine, log, monkeypatch)
        await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
        result = await engine.result("p")
        assert trio.current_time() == 2.0
        await engine.drain()
        turns = engine.statistics().turns
    assert result == {"results": [i * 10 for i in range(600)]}
    assert turns == 2

    # Each batch the consumer received was settled by ONE store write of
    # SettleCheckpoint ops (nothing else in it), at most 256 of them, and
    # its results were acked only after that write.
    writes = settle_writes(log)
    sizes = [len(w.ops) for w in writes]
    assert max(sizes) == 256
    assert sum(sizes) == 600
    assert all(w.ok for w in writes)
    assert sorted(seq for w in writes for seq in w.settles) == list(range(1, 601))
    receives = [e for e in log if isinstance(e, Took) and e.what == "receive"]
    assert [len(r.seqs) for r in receives] == sizes
    for receive, write in zip(receives, writes, strict=True):
        assert sorted(receive.seqs) == sorted(write.settles)
        start = log.index(receive)
        between = log[start + 1 : log.index(write) + 1]
        assert [e for e in between if isinstance(e, Applied)] == [write]
        [ack] = [e for e in log[start:] if isinstance(e, Took) and e.what == "ack"][:1]
        assert log.index(ack) > log.index(write)
        assert sorted(ack.seqs) == sorted(write.settles)
    acks = [seq for e in log if isinstance(e, Took) and e.what == "ack" for seq in e.seqs]
    assert sorted(acks) == list(range(1, 601))  # each once
    assert not [e for e in log if isinstance(e, Took) and e.what == "reject"]
    # The parent was woken once by the consumer (after the last batch), not
    # once per batch and not once per result.
    woke = [i for i, e in enumerate(log) if isinstance(e, Woke)]
    assert len(woke) == 2  # engine.start, then the barrier
    assert woke[1] > log.index(writes[-1])


async def test_a_batch_of_failures_wakes_a_fail_fast_parent_once_per_batch(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[Entry] = []
    jobs = [Job(index=i, seconds=1, fail=f"e{i}") for i in range(40)]
    async with open_test_engine(
        app,
        store=RecordingStore(log),
        broker=RecordingBroker(log),
        serve=["g"],
        worker_concurrency=40,
    ) as engine:
        record_wakes(engine, log, monkeypatch)
        await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
        result = await engine.result("p")
        assert trio.current_time() == 1.0
        await engine.drain()
    # All 40 had failed by the time the parent froze the fan: none was
    # cancelled by it, and all are reported, in input order.
    assert [f["index"] for f in result["failures"]] == list(range(40))
    assert [f["code"] for f in result["failures"]] == [f"e{i}" for i in range(40)]
    writes = settle_writes(log)
    assert sum(len(w.ops) for w in writes) == 40
    # Every result of a batch wants the parent woken; it is woken once per batch.
    marks = [e for e in log if isinstance(e, Woke) or e in writes]
    assert isinstance(marks[0], Woke)  # engine.start
    for write, after in zip(writes, [*writes[1:], None], strict=True):
        start = marks.index(write) + 1
        stop = marks.index(after) if after is not None else len(marks)
        assert marks[start:stop] == [Woke("p")]


async def test_a_failed_batch_write_settles_one_by_one_and_requeues_only_the_failure(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log: list[Entry] = []
    failed: list[str] = []

    def fail(ops: Sequence[Op]) -> bool:
        seqs = [op.seq for op in ops if isinstance(op, SettleCheckpoint)]
        if len(seqs) != len(ops):
            return False
        if len(seqs) > 1 and "batch" not in failed:
            failed.append("batch")
            return True
        if seqs == [6] and "single" not in failed:
            failed.append("single")
            return True
        return False

    store = RecordingStore(log, fail)
    broker = RecordingBroker(log)
    jobs = [Job(index=i, seconds=1) for i in range(8)]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        record_wakes(engine, log, monkeypatch)
        with engine.subscribe() as rx:
            await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
            result = await engine.result("p")
            assert trio.current_time() == 1.0
            await engine.drain()
            events = run_events(rx, "p")
    assert result == {"results": [i * 10 for i in range(8)]}
    assert failed == ["batch", "single"]

    consumer = [e for e in log if isinstance(e, Took) or e in settle_writes(log) + _failed(log)]
    first = consumer[0]
    assert isinstance(first, Took)
    order = first.seqs  # results come back in the order the worker's tasks ended
    assert sorted(order) == list(range(1, 9))
    rest = tuple(seq for seq in order if seq != 6)
    assert [_describe(e) for e in consumer] == [
        ("receive", order, (1,) * 8),
        ("apply failed", order),
        # One by one, in the batch's order: only seq 6's write fails again...
        *[("apply", (seq,)) if seq != 6 else ("apply failed", (6,)) for seq in order],
        # ... so only its result goes back to the queue, the others are acked.
        ("reject", (6,), (1,), True),
        ("ack", rest, (1,) * 7),
        # It comes back, settles, and is acked once.
        ("receive", (6,), (2,)),
        ("apply", (6,)),
        ("ack", (6,), (2,)),
    ]
    # Seven settled results did not wake the parent (one member was still
    # pending); the redelivered one did. The failed batch write may have been
    # applied all the same, so its runs were woken once more (a spare turn).
    woke = [i for i, e in enumerate(log) if isinstance(e, Woke)]
    assert len(woke) == 3
    assert woke[-1] > max(i for i, e in enumerate(log) if isinstance(e, Took))
    assert [e.seq for e in events if e.kind == "step.completed"] == [*rest, 6]
    cps = await store.get_checkpoints("p")
    assert [(cp.seq, cp.status, cp.output) for cp in cps] == [
        (1 + i, "completed", str(i * 10)) for i in range(8)
    ]


def _failed(log: Sequence[Entry]) -> list[Applied]:
    return [e for e in log if isinstance(e, Applied) and not e.ok]


def _describe(entry: Entry) -> tuple[Any, ...]:
    if isinstance(entry, Applied):
        return ("apply" if entry.ok else "apply failed", entry.settles)
    assert isinstance(entry, Took)
    if entry.what == "reject":
        return (entry.what, entry.seqs, entry.deliveries, entry.requeue)
    return (entry.what, entry.seqs, entry.deliveries)


# -- lost steps -------------------------------------------------------------------


async def test_a_lost_step_is_dispatched_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    async with open_test_engine(
        app, store=store, broker=broker, serve=["g"], remote_redispatch=(30.0, 2)
    ) as engine:
        with engine.subscribe() as rx:
            # The worker swallows the first delivery: that execution never ends.
            await engine.start(single, Job(index=3, swallow=1), run_id="p")
            assert await engine.result("p") == 30
            assert trio.current_time() == 30.0
            events = run_events(rx, "p")
    assert [(s.at, [(t.seq, t.attempt) for t in s.tasks]) for s in sent(log)] == [
        (0.0, [(1, 1)]),
        (30.0, [(1, 2)]),
    ]
    assert world.executions == [(3, 0.0), (3, 30.0)]
    [cp] = await store.get_checkpoints("p")
    assert (cp.status, cp.attempts, cp.output) == ("completed", 2, "30")
    assert cp.errors == (
        td.ErrorInfo(message="no result within 30.0 s; dispatched again", code="redispatched"),
    )
    assert [(e.kind, e.at - WALL_START, e.data.get("attempt")) for e in events if e.seq == 1] == [
        ("step.started", 0.0, 1),
        ("step.started", 30.0, 2),
        ("step.redispatched", 30.0, 2),
        ("step.completed", 30.0, 2),
    ]
    assert [t for _, t in world.bodies] == [0.0, 30.0, 30.0]


async def test_a_step_lost_past_the_maximum_fails_with_code_lost(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    # No worker serves the group: no result ever comes back.
    async with open_test_engine(
        app, store=store, broker=broker, remote_redispatch=(30.0, 2)
    ) as engine:
        with engine.subscribe() as rx:
            await engine.start(single, Job(index=3), run_id="p")
            with pytest.raises(td.RunFailed) as info:
                await engine.result("p")
            assert trio.current_time() == 90.0
            await engine.drain()
            events = run_events(rx, "p")
    assert info.value.code == "lost"
    [exc] = world.remote_errors
    assert isinstance(exc, RemoteStepError)
    assert (exc.step, exc.code, exc.attempts) == ("work", "lost", 3)
    assert exc.message == "no result after 3 dispatches of step 'work'"
    assert [(s.at, [(t.seq, t.attempt) for t in s.tasks]) for s in sent(log)] == [
        (0.0, [(1, 1)]),
        (30.0, [(1, 2)]),
        (60.0, [(1, 3)]),
    ]
    [cp] = await store.get_checkpoints("p")
    assert (cp.status, cp.attempts, cp.finished_at) == ("failed", 3, WALL_START + 90.0)
    assert cp.error == td.ErrorInfo(message=exc.message, code="lost")
    assert [e.code for e in cp.errors] == ["redispatched", "redispatched"]
    assert times(events, "step.redispatched") == [30.0, 60.0]
    assert [e.data["attempt"] for e in events if e.kind == "step.redispatched"] == [2, 3]
    assert times(events, "run.failed") == [90.0]
    assert [t for _, t in world.bodies] == [0.0, 30.0, 60.0, 90.0]
    run = await store.get_run("p")
    assert run is not None
    assert run.error is not None
    assert (run.status, run.error.code) == ("failed", "lost")


async def test_a_lost_fan_member_is_dispatched_again_alone(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    broker = RecordingBroker(log)
    jobs = [Job(index=0, seconds=1), Job(index=1, swallow=1), Job(index=2, seconds=2)]
    async with open_test_engine(
        app, store=RecordingStore(log), broker=broker, serve=["g"], remote_redispatch=(30.0, 2)
    ) as engine:
        await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
        assert await engine.result("p") == {"results": [0, 10, 20]}
        assert trio.current_time() == 30.0
        cps = await engine.store.get_checkpoints("p")
    assert [(s.at, [(t.seq, t.attempt) for t in s.tasks]) for s in sent(log)] == [
        (0.0, [(1, 1), (2, 1), (3, 1)]),
        (30.0, [(2, 2)]),
    ]
    assert [(cp.seq, cp.attempts, [e.code for e in cp.errors]) for cp in cps] == [
        (1, 1, []),
        (2, 2, ["redispatched"]),
        (3, 1, []),
    ]


# -- bad input --------------------------------------------------------------------


@pytest.mark.parametrize("which", ["local", "zero", "settled_zero", "bool", "negative"])
async def test_a_bad_fan_raises_usage_error_and_writes_nothing(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory, which: Misuse
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    broker = RecordingBroker(log)
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(misuse, which, False, run_id="failed")
        with pytest.raises(td.RunFailed) as info:
            await engine.result("failed")
        assert ("local step" if which == "local" else "concurrency") in info.value.message
        assert await store.get_checkpoints("failed") == []

        await engine.start(misuse, which, True, run_id="caught")
        result = await engine.result("caught")
        await engine.drain()
        # The bad call reserved no seq: the step after it took seq 1.
        [cp] = await store.get_checkpoints("caught")
    assert result["value"] == 70
    assert (cp.seq, cp.name, cp.parallel_group) == (1, "work", None)
    assert [s.seqs for s in sent(log)] == [[1]]
    assert all(t.run_id == "caught" for s in sent(log) for t in s.tasks)


async def test_misuse_messages_name_the_problem(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    async with open_test_engine(app, broker=MemoryBroker(), serve=["g"]) as engine:
        local: Misuse = "local"
        zero: Misuse = "zero"
        await engine.start(misuse, local, True, run_id="a")
        await engine.start(misuse, zero, True, run_id="b")
        a, b = await engine.result("a"), await engine.result("b")
    assert "'prepare' is a local step" in a["error"]
    assert "concurrency must be a positive integer, not 0" in b["error"]


async def test_a_failed_chunk_write_still_sends_the_members_already_durable(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    failed: list[int] = []

    def fail(ops: Sequence[Op]) -> bool:
        # The second chunk of the first turn's writes fails, once.
        puts = [op.checkpoint.seq for op in ops if isinstance(op, PutCheckpoint)]
        if puts[:1] == [201] and not failed:
            failed.append(len(puts))
            return True
        return False

    store = RecordingStore(log, fail)
    broker = RecordingBroker(log)
    jobs = [Job(index=i) for i in range(450)]
    async with open_test_engine(app, store=store, broker=broker, serve=["g"]) as engine:
        await engine.start(fan, jobs, None, FAIL_FAST, 0.0, run_id="p")
        with trio.fail_after(600):
            result = await engine.result("p")
        # The turn ran again a second after its failed write: no wait for
        # its lease to lapse.
        assert trio.current_time() == 1.0
        await engine.drain()
    assert failed == [200]
    assert result == {"results": [i * 10 for i in range(450)]}
    # The first chunk was durable when the second failed: its tasks went out
    # (else they would stay pending forever); the rest went out once the
    # run's next turn recorded them.
    assert [s.seqs for s in sent(log)] == [list(range(1, 201)), list(range(201, 451))]
    assert all(world.calls[i] == 1 for i in range(450))


async def test_a_retryable_member_is_sent_again_at_its_backoff_inside_the_fan(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    jobs = [Job(index=0, seconds=1), Job(index=1, seconds=1, flaky=2), Job(index=2, seconds=1)]
    async with open_test_engine(
        app, store=store, broker=RecordingBroker(log), serve=["g"]
    ) as engine:
        await engine.start(retried_fan, jobs, run_id="p")
        assert await engine.result("p") == [0, 10, 20]
        # Attempt 1 fails at t=1 (next due 1 + 2), attempt 2 at t=4 (due
        # 4 + 4), attempt 3 succeeds at t=9.
        assert trio.current_time() == 9.0
        await engine.drain()
    assert [(s.at, [(t.seq, t.attempt) for t in s.tasks]) for s in sent(log)] == [
        (0.0, [(1, 1), (2, 1), (3, 1)]),
        (3.0, [(2, 2)]),
        (8.0, [(2, 3)]),
    ]
    cps = await store.get_checkpoints("p")
    assert [(cp.status, cp.attempts) for cp in cps] == [
        ("completed", 1),
        ("completed", 3),
        ("completed", 1),
    ]
    assert [e.message for e in cps[1].errors] == ["job 1 flaked (1)", "job 1 flaked (2)"]
    # A rescheduled attempt wakes the parent so that its turn sets the wake
    # time (t=1, t=4); the due time sends it (t=3, t=8); the last result
    # ends the fan (t=9).
    assert [t for _, t in world.bodies] == [0.0, 1.0, 3.0, 4.0, 8.0, 9.0]


async def test_a_late_success_of_a_cancelled_member_is_kept_so_retry_does_not_run_it_again(
    autojump_clock: trio.testing.MockClock, open_test_engine: EngineFactory
) -> None:
    log: list[Entry] = []
    store = RecordingStore(log)
    jobs = [
        Job(index=0, seconds=10),
        Job(index=1, seconds=1, fail="boom"),
        Job(index=2, seconds=10),
        Job(index=3, seconds=10, fail="late"),
    ]
    async with open_test_engine(
        app, store=store, broker=RecordingBroker(log), serve=["g"]
    ) as engine:
        with engine.subscribe() as rx:
            await engine.start(strict_fan, jobs, run_id="p")
            with pytest.raises(td.RunFailed) as failure:
                await engine.result("p")
            assert failure.value.code == "gather_failed"
            # The run failed at t=1; the members it cancelled end at t=10.
            assert trio.current_time() == 1.0
            await engine.drain()
            assert trio.current_time() == 10.0
            events = run_events(rx, "p")
        cps = {cp.seq: cp for cp in await store.get_checkpoints("p")}
        # The successes are kept; the late failure changes nothing.
        assert [(cps[seq].status, cps[seq].output) for seq in (1, 3)] == [
            ("completed", "0"),
            ("completed", "20"),
        ]
        assert all(cps[seq].error is None for seq in (1, 3))
        assert cps[2].error is not None
        assert cps[2].error.code == "boom"
        assert cps[4].error is not None
        assert cps[4].error.code == "fan_cancelled"
        assert (await engine.get("p")).status == "failed"
        # Kept without waking the failed run, and reported as completed steps.
        assert [t for _, t in world.bodies] == [0.0, 1.0]
        completed = [(e.seq, e.at - WALL_START) for e in events if e.kind == "step.completed"]
        assert sorted(completed) == [(1, 10.0), (3, 10.0)]

        world.fixed = True
        await engine.retry("p")
        assert await engine.result("p") == [0, 10, 20, 30]
    # Only the failed member and the one whose result was a failure ran again.
    assert world.calls == Counter({0: 1, 1: 2, 2: 1, 3: 2})
