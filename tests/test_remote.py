"""Remote steps: dispatch, workers, settling results, retries and routing.

Every engine here runs on the memory store and a `MemoryBroker` the test
owns, so the test can watch what crosses the broker: `watch_broker` wraps the broker's `dispatch`
and records each message with the store's view of its checkpoint at the
moment it was sent.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import WALL_START, EngineFactory, fixed_wall
from trio_durable import (
    BrokerFaults,
    BrokerUnavailable,
    MemoryBroker,
    RemoteStepError,
    Worker,
    open_worker,
)
from trio_durable._brokers._base import RESULTS, Outgoing
from trio_durable._wire._messages import Result, Task

app = td.App("remote")

calls: list[tuple[str, int, float]] = []
"""(step, value, trio time) for every call of a remote step, on any worker."""

entries: Counter[str] = Counter()
"""Body entries per run id: one per turn that replayed the body."""


class Gate:
    """Set when a step call begins, so a test acts while it runs."""

    def __init__(self) -> None:
        self.entered = trio.Event()


gate = Gate()


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    global gate
    calls.clear()
    entries.clear()
    gate = Gate()
    yield
    calls.clear()
    entries.clear()


@attrs.define(frozen=True)
class Job:
    """What one call of `act` does: sleep ``seconds``, then fail with the
    FatalError code ``fail`` or return ``value ** 2``."""

    value: int
    seconds: float = 0.0
    fail: str | None = None


class Permanent(Exception):
    """An ordinary exception that declares itself not retryable."""

    retryable = False
    code = "no_account"
    details: ClassVar[dict[str, int]] = {"account": 7}


@app.step(group="math", retry=td.Retry(attempts=3, backoff=1.0, jitter=0))
async def act(job: Job) -> int:
    calls.append(("act", job.value, trio.current_time()))
    gate.entered.set()
    await trio.sleep(job.seconds)
    if job.fail is not None:
        raise td.FatalError(f"job {job.value} failed", code=job.fail, details={"value": job.value})
    return job.value**2


@app.step(group="math", retry=td.Retry(attempts=4, backoff=2.0, jitter=0))
async def flaky(fails: int) -> str:
    """Fails its first ``fails`` calls (one second each), then succeeds."""
    calls.append(("flaky", fails, trio.current_time()))
    n = sum(1 for name, _, _ in calls if name == "flaky")
    await trio.sleep(1)
    if n <= fails:
        raise ValueError(f"flaky call {n}")
    return f"ok after {n}"


@app.step(group="math", retry=td.Retry(attempts=5, backoff=1.0, jitter=0))
async def refuse(kind: str) -> int:
    calls.append(("refuse", 0, trio.current_time()))
    if kind == "fatal":
        raise td.FatalError("card declined", code="card_declined", details={"last4": "4242"})
    raise Permanent("no such account")


@app.step(group="math", timeout=2, retry=td.Retry(attempts=2, backoff=1.0, jitter=0))
async def stuck(x: int) -> int:
    calls.append(("stuck", x, trio.current_time()))
    await trio.sleep(5)
    return x


@app.workflow()
async def one(ctx: td.Context, job: Job) -> int:
    entries[ctx.run_id] += 1
    return await ctx.step(act, job)


@app.workflow()
async def two(ctx: td.Context, x: int) -> int:
    entries[ctx.run_id] += 1
    a = await ctx.step(act, Job(x))
    return await ctx.step(act, Job(a))


@app.workflow()
async def retried(ctx: td.Context, fails: int) -> str:
    return await ctx.step(flaky, fails)


@app.workflow()
async def caught(ctx: td.Context, name: str, arg: Any) -> dict[str, Any]:
    steps: dict[str, td.Step[..., Any]] = {"flaky": flaky, "refuse": refuse, "stuck": stuck}
    step = steps[name]
    try:
        await ctx.step(step, arg)
    except RemoteStepError as exc:
        return {
            "step": exc.step,
            "message": exc.message,
            "code": exc.code,
            "details": exc.details,
            "attempts": exc.attempts,
        }
    raise AssertionError("the step should have failed")


@app.workflow()
async def refused(ctx: td.Context, kind: str) -> int:
    return await ctx.step(refuse, kind)


@app.workflow()
async def napping(ctx: td.Context) -> str:
    entries[ctx.run_id] += 1
    await ctx.sleep(100)
    return "woke"


@app.workflow()
async def fan(ctx: td.Context, jobs: list[Job], concurrency: int | None) -> list[int]:
    entries[ctx.run_id] += 1
    return await ctx.all(act, jobs, concurrency=concurrency)


@app.workflow()
async def fan_fast(
    ctx: td.Context, jobs: list[Job], concurrency: int | None = None
) -> list[tuple[int, str | None]]:
    entries[ctx.run_id] += 1
    try:
        await ctx.all(act, jobs, concurrency=concurrency, mode="fail_fast")
    except td.GatherError as exc:
        # Stay suspended (not completed) while late results arrive: the
        # frozen checkpoints keep them from changing the fan's outcome.
        await ctx.sleep(100)
        return [(f.index, f.code) for f in exc.failures]
    raise AssertionError("the fan should have failed")


# A deploy that changed `one` under a run in flight: seq 1 is now a local step.
changed = td.App("remote")


@changed.step(name="act")
async def changed_act(job: Job) -> int:
    raise AssertionError("never runs")


@changed.step()
async def local_first(x: int) -> int:
    return x


@changed.workflow(name="one")
async def changed_one(ctx: td.Context, job: Job) -> int:
    entries["changed " + ctx.run_id] += 1
    return await ctx.step(local_first, job.value)


# -- helpers ------------------------------------------------------------------


@attrs.define(frozen=True, kw_only=True)
class Sent:
    """One message as it was dispatched."""

    at: float
    queue: str
    body: bytes
    checkpoint: td.Checkpoint | None = None
    """For a task: its checkpoint as stored when the task was sent."""
    turns_alive: tuple[str, ...] = ()
    """Names of the turn tasks alive when it was sent."""

    def task(self) -> Task:
        return Task.decode(self.body)

    def result(self) -> Result:
        return Result.decode(self.body)


def turn_tasks() -> tuple[str, ...]:
    """Names of the engine's turn tasks alive now."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    found: list[str] = []
    stack = [root]
    while stack:
        task = stack.pop()
        if task.name.startswith("trio_durable turn "):
            found.append(task.name)
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return tuple(sorted(found))


def watch_broker(
    monkeypatch: pytest.MonkeyPatch, broker: MemoryBroker, store: td.Store
) -> list[Sent]:
    """Record every message dispatched through ``broker``, in order."""
    sent: list[Sent] = []
    real = broker.dispatch

    async def dispatch(messages: Sequence[Outgoing]) -> None:
        for message in messages:
            checkpoint = None
            if not message.queue.startswith(RESULTS):
                task = Task.decode(message.body)
                [checkpoint] = await store.get_checkpoints(task.run_id, task.seq, task.seq)
            sent.append(
                Sent(
                    at=trio.current_time(),
                    queue=message.queue,
                    body=message.body,
                    checkpoint=checkpoint,
                    turns_alive=turn_tasks(),
                )
            )
        await real(messages)

    monkeypatch.setattr(broker, "dispatch", dispatch)
    return sent


def tasks_of(sent: list[Sent]) -> list[Sent]:
    return [s for s in sent if not s.queue.startswith(RESULTS)]


def results_of(sent: list[Sent]) -> list[Result]:
    return [s.result() for s in sent if s.queue.startswith(RESULTS)]


def received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    out: list[td.Event] = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out


async def checkpoint(store: td.Store, run_id: str, seq: int) -> td.Checkpoint:
    [cp] = await store.get_checkpoints(run_id, seq, seq)
    return cp


async def snapshot(store: td.Store) -> list[tuple[td.Run, list[td.Checkpoint]]]:
    """Every run row with its checkpoint rows."""
    return [(run, await store.get_checkpoints(run.id)) for run in await store.list_runs()]


@asynccontextmanager
async def worker(broker: MemoryBroker, *groups: str, instance_id: str) -> AsyncIterator[Worker]:
    async with open_worker(
        app,
        broker=broker,
        groups=list(groups),
        instance_id=instance_id,
        wall_clock=fixed_wall,
        seed=1,
    ) as w:
        yield w


# -- running on workers -------------------------------------------------------


@pytest.mark.parametrize("where", ["embedded", "separate"])
async def test_remote_step_runs_on_a_worker_and_holds_no_task_meanwhile(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    serve = ["math"] if where == "embedded" else []
    async with (
        open_test_engine(app, store=store, broker=broker, serve=serve, engine_id="e1") as engine,
        worker(broker, "math", instance_id="w1") if where == "separate" else _nothing(),
    ):
        run = await engine.start(one, Job(3, seconds=10), run_id="r")
        await gate.entered.wait()
        await trio.testing.wait_all_tasks_blocked()
        # The step is running on the worker: the run is suspended and no turn
        # of it (or of anything) is alive.
        assert trio.current_time() == 0
        assert turn_tasks() == ()
        assert engine.statistics().runs_active == 0
        assert (await store.get_run("r")).status == "suspended"  # type: ignore[union-attr]
        assert await engine.result(run.id) == 9
        assert trio.current_time() == 10

    [task] = tasks_of(sent)
    # The checkpoint was durable, pending, before its task went out.
    assert task.queue == "math"
    assert task.checkpoint is not None
    assert task.checkpoint.status == "pending"
    assert task.checkpoint.kind == "remote"
    assert task.checkpoint.group == "math"
    assert task.checkpoint.attempts == 1
    assert task.checkpoint.started_at == WALL_START
    # The write that recorded it holds the execution id the task carries.
    [execution] = task.checkpoint.executions
    assert len(execution) == 32
    # It was sent from the turn that recorded it, after that turn's write.
    assert task.turns_alive == ("trio_durable turn r",)
    assert task.task() == Task(
        run_id="r",
        seq=1,
        attempt=1,
        step="act",
        workflow="one",
        route="math",
        input='[{"value":3,"seconds":10.0,"fail":null}]',
        timeout=None,
        dispatched_at=WALL_START,
        reply_to=f"{RESULTS}.{store.scope}",
        execution=execution,
    )
    [result] = results_of(sent)
    assert result == Result(
        run_id="r",
        seq=1,
        attempt=1,
        step="act",
        workflow="one",
        status="completed",
        output="9",
        started_at=WALL_START,
        finished_at=WALL_START + 10,
        worker="e1.worker" if where == "embedded" else "w1",
        output_blob=False,
        execution=execution,
    )
    cp = await checkpoint(store, "r", 1)
    assert (cp.status, cp.output, cp.attempts, cp.finished_at, cp.executions) == (
        "completed",
        "9",
        1,
        WALL_START + 10,
        (execution,),
    )
    assert calls == [("act", 3, 0.0)]
    assert entries["r"] == 2


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


async def test_worker_publishes_failures_with_code_details_and_retryable(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        await trio.sleep(2)
        run = await engine.start(caught, "refuse", "fatal", run_id="fatal")
        await engine.result(run.id)
        run = await engine.start(caught, "refuse", "permanent", run_id="permanent")
        await engine.result(run.id)
    fatal, permanent = results_of(sent)
    assert fatal.status == "failed"
    assert fatal.output is None
    assert fatal.error == "card declined"
    assert fatal.code == "card_declined"
    assert fatal.details == {"last4": "4242"}
    assert fatal.retryable is False
    assert fatal.started_at == WALL_START + 2
    assert fatal.finished_at == WALL_START + 2
    assert (permanent.error, permanent.code, permanent.details, permanent.retryable) == (
        "no such account",
        "no_account",
        {"account": 7},
        False,
    )


async def test_worker_acks_a_task_only_after_its_result_is_published(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    failures_left = 3
    seen: list[tuple[str, int, int, int]] = []
    real = broker.dispatch

    async def dispatch(messages: Sequence[Outgoing]) -> None:
        nonlocal failures_left
        if any(m.queue.startswith(RESULTS) for m in messages):
            state = (broker.acked, broker.depth("math"), w.statistics().in_flight)
            if failures_left:
                failures_left -= 1
                seen.append(("refused", *state))
                raise BrokerUnavailable("results exchange is down")
            await real(messages)
            seen.append(("published", broker.acked, broker.depth("math"), w.statistics().in_flight))
            return
        await real(messages)

    monkeypatch.setattr(broker, "dispatch", dispatch)
    async with (
        open_test_engine(app, store=store, broker=broker) as engine,
        worker(broker, "math", instance_id="w1") as w,
    ):
        run = await engine.start(one, Job(5, seconds=10), run_id="r")
        assert await engine.result(run.id) == 25
        assert trio.current_time() > 10  # the publisher backed off
        await engine.drain()
        # The task and the result are acked now, each once.
        assert broker.acked == 2
        assert w.statistics().in_flight == 0
    # While publishing failed, the task stayed taken and unacked (not back on
    # the queue, not acked); it was acked only after the publish went through.
    assert seen == [
        ("refused", 0, 0, 1),
        ("refused", 0, 0, 1),
        ("refused", 0, 0, 1),
        ("published", 0, 0, 1),
    ]
    assert calls == [("act", 5, 0.0)]
    cp = await checkpoint(store, "r", 1)
    assert (cp.status, cp.output, cp.attempts) == ("completed", "25", 1)


async def test_a_worker_that_dies_mid_step_leaves_its_task_to_another(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker) as engine:
        with engine.subscribe() as events:
            run = await engine.start(one, Job(3, seconds=10), run_id="r")
            with trio.move_on_after(4):
                async with worker(broker, "math", instance_id="w1") as w1:
                    await trio.sleep_forever()
            assert trio.current_time() == 4
            assert w1.statistics().completed == 0
            # What w1 took and never acked is back on the queue.
            assert broker.depth("math") == 1
            async with worker(broker, "math", instance_id="w2") as w2:
                assert await engine.result(run.id) == 9
                assert trio.current_time() == 14
                await engine.drain()
            kinds = [(e.kind, e.data.get("worker")) for e in received(events)]
    # The effect ran twice; the run completed once with one settled result.
    assert calls == [("act", 3, 0.0), ("act", 3, 4.0)]
    assert w2.statistics().completed == 1
    assert [r.worker for r in results_of(sent)] == ["w2"]
    assert len(tasks_of(sent)) == 1
    assert kinds.count(("step.completed", "w2")) == 1
    assert [k for k, _ in kinds].count("step.completed") == 1
    assert [k for k, _ in kinds].count("run.completed") == 1
    cp = await checkpoint(store, "r", 1)
    assert (cp.status, cp.output, cp.attempts, cp.finished_at) == (
        "completed",
        "9",
        1,
        WALL_START + 14,
    )
    assert entries["r"] == 2


# -- duplicates, late and stray results ----------------------------------------


async def test_duplicated_messages_settle_once_and_resume_once(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker(BrokerFaults(duplicate=1.0))
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        with engine.subscribe() as events:
            run = await engine.start(one, Job(4, seconds=3), run_id="r")
            assert await engine.result(run.id) == 16
            assert trio.current_time() == 3
            await engine.drain()
            kinds = [e.kind for e in received(events)]
            stale = engine.statistics().rejected_stale
    # Every message went out twice: the task ran twice, each result arrived
    # twice, and one of the four settled the checkpoint. The other three
    # were stale: rejected for good, not acked.
    assert broker.dispatched == 3
    assert calls == [("act", 4, 0.0), ("act", 4, 0.0)]
    assert len(results_of(sent)) == 2
    assert broker.acked == 2 + 1
    assert stale == 3
    assert kinds.count("step.completed") == 1
    assert kinds.count("run.suspended") == 1
    assert kinds.count("run.completed") == 1
    assert entries["r"] == 2


async def test_a_result_delivered_twice_by_hand_settles_once(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with (
        open_test_engine(app, store=store, broker=broker) as engine,
        broker.open_consumer("math", prefetch=10) as tasks,
    ):
        with engine.subscribe() as events:
            await engine.start(two, 3, run_id="r")
            [first] = await tasks.receive(10)
            task = Task.decode(first.body)
            assert (task.run_id, task.seq) == ("r", 1)
            answer = Result(
                run_id="r",
                seq=1,
                attempt=1,
                step="act",
                workflow="two",
                status="completed",
                output="9",
            )
            await broker.dispatch([Outgoing(queue=engine.results_queue, body=answer.encode())])
            await engine.drain()
            assert entries["r"] == 2
            after_first = await snapshot(store)
            # The same result again (and a contradicting late one): changes
            # nothing, wakes nothing, sends nothing.
            late = attrs.evolve(answer, output="100")
            await broker.dispatch([Outgoing(queue=engine.results_queue, body=answer.encode())])
            await broker.dispatch([Outgoing(queue=engine.results_queue, body=late.encode())])
            await engine.drain()
            assert await snapshot(store) == after_first
            assert entries["r"] == 2
            assert broker.depth(engine.results_queue) == 0
            [second] = await tasks.receive(10)
            assert Task.decode(second.body).seq == 2
            assert Task.decode(second.body).input == '[{"value":9,"seconds":0.0,"fail":null}]'
            # A duplicate inside one batch resumes the run once too.
            answer2 = attrs.evolve(answer, seq=2, output="81")
            await broker.dispatch([Outgoing(queue=engine.results_queue, body=answer2.encode())] * 2)
            assert await engine.result("r") == 81
            await engine.drain()
            await tasks.ack([first, second])
            kinds = [e.kind for e in received(events)]
    assert entries["r"] == 3
    assert kinds.count("step.completed") == 2
    assert kinds.count("run.suspended") == 2
    assert kinds.count("run.completed") == 1
    assert broker.depth("math") == 0
    assert calls == []


async def test_results_for_a_cancelled_run_are_dropped(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(one, Job(3, seconds=10), run_id="r")
        await gate.entered.wait()
        await engine.cancel(run.id)
        with pytest.raises(td.RunCancelled):
            await engine.result(run.id)
        assert trio.current_time() == 0
        before = await snapshot(store)
        with engine.subscribe() as events:
            await engine.drain()
            assert trio.current_time() == 10
            late = received(events)
        after = await snapshot(store)
    # The worker finished the step and its result came back, but changed
    # nothing: the checkpoint is still pending, the run still cancelled.
    [result] = results_of(sent)
    assert (result.status, result.output, result.finished_at) == ("completed", "9", WALL_START + 10)
    assert after == before
    assert (await checkpoint(store, "r", 1)).status == "pending"
    assert (await store.get_run("r")).status == "cancelled"  # type: ignore[union-attr]
    assert late == []
    # The first turn, and the cancel's replay that delivered td.Cancelled.
    assert entries["r"] == 2


async def test_a_result_for_a_completed_run_is_dropped(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(one, Job(3), run_id="r")
        assert await engine.result(run.id) == 9
        await engine.drain()
        before = await snapshot(store)
        stray = Result(
            run_id="r", seq=1, attempt=1, step="act", workflow="one", status="failed", error="x"
        )
        await broker.dispatch([Outgoing(queue=engine.results_queue, body=stray.encode())])
        await engine.drain()
        assert await snapshot(store) == before
        assert broker.depth(engine.results_queue) == 0


async def test_a_late_success_for_a_failed_run_is_salvaged_without_resuming(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    # A deploy changed the workflow while its remote step ran: the run fails
    # on replay (non_determinism), and the step's success, arriving later, is
    # kept on its checkpoint, so a retry after the fix does not run it again.
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with worker(broker, "math", instance_id="w1") as w:
        async with open_test_engine(
            app, store=store, broker=broker, engine_id="old", remote_redispatch=(5.0, 3)
        ) as engine:
            await engine.start(one, Job(3, seconds=10), run_id="r")
            await engine.drain()
            assert (await store.get_run("r")).wake_at == WALL_START + 5  # type: ignore[union-attr]
        async with open_test_engine(changed, store=store, broker=broker, engine_id="new") as engine:
            with engine.subscribe() as events:
                with pytest.raises(td.RunFailed) as info:
                    await engine.result("r")
                assert trio.current_time() == 5
                assert info.value.code == "non_determinism"
                assert (await checkpoint(store, "r", 1)).status == "pending"
                await w.wait_idle()
                await engine.drain()
                assert trio.current_time() == 10
                late = [e.kind for e in received(events)]
        cp = await checkpoint(store, "r", 1)
        assert (cp.status, cp.output, cp.finished_at) == ("completed", "9", WALL_START + 10)
        stored = await store.get_run("r")
        assert stored is not None
        assert stored.status == "failed"
        assert stored.error is not None
        assert stored.error.code == "non_determinism"
        # Salvaged without a replay: the new body ran once, when it failed.
        assert entries["changed r"] == 1
        assert "run.suspended" not in late
        assert "run.completed" not in late
        async with open_test_engine(app, store=store, broker=broker, engine_id="fixed") as engine:
            await engine.retry("r")
            assert await engine.result("r") == 9
    assert calls == [("act", 3, 0.0)]


async def test_a_late_success_in_a_failed_fail_fast_fan_is_kept_and_changes_no_outcome(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    jobs = [Job(1, seconds=10), Job(2, seconds=1, fail="boom"), Job(3, seconds=20)]
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(fan_fast, jobs, run_id="r")
        await trio.sleep(1)
        await trio.testing.wait_all_tasks_blocked()
        # The failure at t=1 froze the fan: the other members are failed.
        frozen = await store.get_checkpoints("r", 1, 3)
        assert [(cp.status, cp.error.code if cp.error else None) for cp in frozen] == [
            ("failed", "fan_cancelled"),
            ("failed", "boom"),
            ("failed", "fan_cancelled"),
        ]
        assert entries["r"] == 2
        assert await engine.result(run.id) == [(1, "boom")]
        assert trio.current_time() == 101
    # Both successes came back (at 10 and 20): each is kept on its frozen
    # member (so a retry would not run it again), without waking the run,
    # whose fan outcome stays the one failure.
    assert [(r.seq, r.status, r.finished_at) for r in results_of(sent)] == [
        (2, "failed", WALL_START + 1),
        (1, "completed", WALL_START + 10),
        (3, "completed", WALL_START + 20),
    ]
    kept = await store.get_checkpoints("r", 1, 3)
    assert kept[1] == frozen[1]
    for cp, was, output, at in ((kept[0], frozen[0], "1", 10), (kept[2], frozen[2], "9", 20)):
        assert cp == attrs.evolve(
            was, status="completed", output=output, error=None, finished_at=WALL_START + at
        )
    assert entries["r"] == 3


async def test_unstarted_members_of_a_failed_fail_fast_fan_are_never_sent(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    jobs = [Job(1, seconds=1, fail="boom"), Job(2, seconds=10), Job(3), Job(4)]
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(fan_fast, jobs, 2, run_id="r")
        assert await engine.result(run.id) == [(0, "boom")]
        assert trio.current_time() == 101
    # Only the first wave went out; the late success of member 1 (at 10)
    # changed nothing of the outcome, and was kept on its checkpoint.
    assert [s.task().seq for s in tasks_of(sent)] == [1, 2]
    assert [(r.seq, r.status) for r in results_of(sent)] == [(1, "failed"), (2, "completed")]
    members = await store.get_checkpoints("r", 1, 4)
    assert [(cp.status, cp.error.code if cp.error else None) for cp in members] == [
        ("failed", "boom"),
        ("completed", None),
        ("failed", "fan_cancelled"),
        ("failed", "fan_cancelled"),
    ]
    assert [cp.started_at for cp in members[2:]] == [None, None]
    assert sorted(calls) == [("act", 1, 0.0), ("act", 2, 0.0)]


async def test_stray_results_are_stale_unreadable_ones_rejected_and_nothing_changes(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with open_test_engine(app, store=store, broker=broker) as engine:
        # One run waiting for its step (no worker serves "math").
        await engine.start(one, Job(3), run_id="r")
        await engine.drain()
        before = await snapshot(store)
        acked = broker.acked
        base = Result(run_id="r", seq=1, attempt=1, step="act", workflow="one", status="completed")
        bodies = [
            attrs.evolve(base, run_id="nobody", output="1").encode(),
            attrs.evolve(base, seq=99, output="1").encode(),
            b"\xff not json",
            b'{"v": 1, "run_id": "r", "seq": 1, "status": "done"}',
            b'{"v": 3, "run_id": "r", "seq": 1, "attempt": 1, "step": "act", "status": "completed"}',
            b"[1, 2]",
        ]
        with caplog.at_level(logging.ERROR, logger="trio_durable"):
            await broker.dispatch(
                [Outgoing(queue=engine.results_queue, body=body) for body in bodies]
            )
            await engine.drain()
        # The stray ones are stale (no step waits for them), the unreadable
        # ones do not decode: all are rejected without requeue (the memory
        # broker has no dead-letter queue: dropped), none acked.
        assert broker.acked == acked
        assert broker.depth(engine.results_queue) == 0
        assert await snapshot(store) == before
        assert entries["r"] == 1
        assert engine.statistics().rejected == 4
        assert engine.statistics().rejected_stale == 2
    dropped = [r for r in caplog.records if "no valid result" in r.getMessage()]
    assert len(dropped) == 4


async def test_a_stray_result_for_a_timer_changes_nothing(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with open_test_engine(app, store=store, broker=broker) as engine:
        await engine.start(napping, run_id="nap")
        await engine.drain()
        before = await snapshot(store)
        # What a result from another deployment sharing this broker, for a
        # run that happens to have the same id, would look like.
        stray = Result(
            run_id="nap",
            seq=1,
            attempt=1,
            step="act",
            workflow="one",
            status="completed",
            output="1",
        )
        await broker.dispatch([Outgoing(queue=engine.results_queue, body=stray.encode())])
        await engine.drain()
        assert await snapshot(store) == before
        assert await engine.result("nap") == "woke"
        assert trio.current_time() == 100


# -- retries ------------------------------------------------------------------


async def test_retries_follow_the_steps_policy_with_exact_backoff(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(retried, 3, run_id="r")
        assert await engine.result(run.id) == "ok after 4"
        # Attempt k fails at t_fail; attempt k+1 goes out at t_fail + 2 * 2**(k-1).
        assert trio.current_time() == 18
        [entry] = (await engine.history("r")).entries
    tasks = tasks_of(sent)
    assert [(s.at, s.task().attempt) for s in tasks] == [(0, 1), (3, 2), (8, 3), (17, 4)]
    # Each retry's checkpoint was pending with the attempt it carries.
    assert [s.checkpoint.attempts for s in tasks if s.checkpoint] == [1, 2, 3, 4]
    assert [s.checkpoint.status for s in tasks if s.checkpoint] == ["pending"] * 4
    assert [(r.attempt, r.status, r.retryable) for r in results_of(sent)] == [
        (1, "failed", True),
        (2, "failed", True),
        (3, "failed", True),
        (4, "completed", True),
    ]
    cp = await checkpoint(store, "r", 1)
    assert cp.status == "completed"
    assert cp.attempts == 4
    assert [e.message for e in cp.errors] == ["flaky call 1", "flaky call 2", "flaky call 3"]
    assert [t for name, _, t in calls if name == "flaky"] == [0, 3, 8, 17]
    # Each failed attempt keeps when the worker ran it (a second each); the
    # last attempt's times are the checkpoint's own: sent at 17, settled at 18.
    assert [(e.started_at, e.finished_at) for e in cp.errors] == [
        (WALL_START + t, WALL_START + t + 1) for t in (0, 3, 8)
    ]
    assert [(a.number, a.status, a.duration) for a in entry.attempt_log] == [
        (1, "failed", 1.0),
        (2, "failed", 1.0),
        (3, "failed", 1.0),
        (4, "completed", 1.0),
    ]
    assert entry.attempt_log[-1].started_at == WALL_START + 17


async def test_exhausted_retries_raise_remote_step_error_in_the_body(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(caught, "flaky", 10, run_id="r")
        assert await engine.result(run.id) == {
            "step": "flaky",
            "message": "flaky call 4",
            "code": None,
            "details": None,
            "attempts": 4,
        }
        assert trio.current_time() == 18
    assert [s.at for s in tasks_of(sent)] == [0, 3, 8, 17]
    cp = await checkpoint(store, "r", 1)
    assert (cp.status, cp.attempts, cp.finished_at) == ("failed", 4, WALL_START + 18)
    assert cp.error is not None
    assert cp.error.message == "flaky call 4"


@pytest.mark.parametrize(
    ("kind", "message", "code", "details"),
    [
        ("fatal", "card declined", "card_declined", {"last4": "4242"}),
        ("permanent", "no such account", "no_account", {"account": 7}),
    ],
)
async def test_a_failure_that_may_not_be_retried_reaches_the_body_at_once(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    message: str,
    code: str,
    details: Any,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(caught, "refuse", kind, run_id="caught")
        assert await engine.result(run.id) == {
            "step": "refuse",
            "message": message,
            "code": code,
            "details": details,
            "attempts": 1,
        }
        # Uncaught, it fails the run with the same code and details.
        uncaught = await engine.start(refused, kind, run_id="uncaught")
        with pytest.raises(td.RunFailed) as info:
            await engine.result(uncaught.id)
        assert trio.current_time() == 0
    assert (info.value.message, info.value.code, info.value.details) == (message, code, details)
    stored = await store.get_run("uncaught")
    assert stored is not None
    assert stored.error is not None
    assert (stored.error.message, stored.error.code, stored.error.details) == (
        message,
        code,
        details,
    )
    assert stored.error.type == "RemoteStepError"
    # One attempt each, though the step's policy allows five.
    assert [s.task().attempt for s in tasks_of(sent)] == [1, 1]
    assert len(calls) == 2
    for run_id in ("caught", "uncaught"):
        cp = await checkpoint(store, run_id, 1)
        assert (cp.status, cp.attempts) == ("failed", 1)
        assert cp.error is not None
        assert (cp.error.code, cp.error.details) == (code, details)


async def test_a_timed_out_attempt_is_retried_then_fails_with_code_timeout(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        run = await engine.start(caught, "stuck", 1, run_id="r")
        assert await engine.result(run.id) == {
            "step": "stuck",
            "message": "step 'stuck' timed out after 2 s",
            "code": "timeout",
            "details": None,
            "attempts": 2,
        }
        # 0-2 the first attempt, 1 s backoff, 3-5 the second.
        assert trio.current_time() == 5
    assert [(s.at, s.task().timeout) for s in tasks_of(sent)] == [(0, 2.0), (3, 2.0)]
    assert [(r.code, r.retryable, r.finished_at) for r in results_of(sent)] == [
        ("timeout", True, WALL_START + 2),
        ("timeout", True, WALL_START + 5),
    ]


async def test_a_lost_deadline_set_by_another_engine_does_not_break_one_without_redispatch(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The run was suspended by an engine with remote_redispatch, then taken
    # over by one restarted without it: at the lost deadline it replays, and
    # must go on waiting for the result instead of failing (or looping).
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with worker(broker, "math", instance_id="w1"):
        async with open_test_engine(
            app, store=store, broker=broker, engine_id="old", remote_redispatch=(5.0, 3)
        ) as engine:
            await engine.start(one, Job(3, seconds=10), run_id="r")
            await engine.drain()
        async with open_test_engine(app, store=store, broker=broker, engine_id="new") as engine:
            assert await engine.result("r") == 9
            assert trio.current_time() == 10
    assert len(tasks_of(sent)) == 1
    # Started, replayed at the lost deadline (t=5), resumed by the result.
    assert entries["r"] == 3
    cp = await checkpoint(store, "r", 1)
    assert (cp.status, cp.attempts, cp.errors) == ("completed", 1, ())


# -- routing ------------------------------------------------------------------


async def test_a_namespaced_run_routes_its_steps_to_the_tenants_fleet(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    sent = watch_broker(monkeypatch, broker, store)
    async with (
        open_test_engine(app, store=store, broker=broker) as engine,
        worker(broker, "math", instance_id="plain") as plain,
    ):
        run = await engine.start(one, Job(6, seconds=1), run_id="r", namespace="acme")
        await engine.drain()
        await trio.testing.wait_all_tasks_blocked()
        assert plain.statistics().received == 0
        assert broker.depth("math@acme") == 1
        cp = await checkpoint(store, "r", 1)
        assert (cp.status, cp.group) == ("pending", "math@acme")
        async with worker(broker, "math@acme", instance_id="tenant") as tenant:
            assert await engine.result(run.id) == 36
            assert tenant.statistics().completed == 1
        # A run in the default namespace still goes to the plain fleet.
        other = await engine.start(one, Job(2), run_id="d")
        assert await engine.result(other.id) == 4
        assert plain.statistics().completed == 1
    assert [(s.queue, s.task().route) for s in tasks_of(sent)] == [
        ("math@acme", "math@acme"),
        ("math", "math"),
    ]
    assert [r.worker for r in results_of(sent)] == ["tenant", "plain"]


# -- bad input ----------------------------------------------------------------


@pytest.mark.parametrize("group", ["has space", "a@b", "", ".hidden", "-x", "g/h", "x" * 101])
def test_a_group_must_be_broker_safe(group: str) -> None:
    with pytest.raises(td.RegistrationError, match="broker-safe"):
        td.App("bad").step(group=group)


def test_requires_needs_a_group() -> None:
    with pytest.raises(td.RegistrationError, match="remote steps"):
        td.App("bad").step(requires=["gpu"])


@pytest.mark.parametrize("routes", [["nope"], ["math", "nope@acme"], ["math@bad ns"], "math"])
async def test_serving_an_unknown_or_malformed_group_is_a_usage_error(
    open_test_engine: EngineFactory, routes: Any
) -> None:
    broker = MemoryBroker()
    with pytest.raises(td.UsageError):
        async with open_test_engine(app, broker=broker, serve=routes):
            raise AssertionError("opened")
    with pytest.raises(td.UsageError):
        async with open_worker(app, broker=broker, groups=routes):
            raise AssertionError("opened")


async def test_a_worker_needs_a_group() -> None:
    with pytest.raises(td.UsageError):
        async with open_worker(app, broker=MemoryBroker(), groups=[]):
            raise AssertionError("opened")


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, True])
async def test_concurrency_must_be_a_positive_integer(
    open_test_engine: EngineFactory, concurrency: Any
) -> None:
    broker = MemoryBroker()
    with pytest.raises(td.UsageError, match="concurrency"):
        async with open_worker(app, broker=broker, groups=["math"], concurrency=concurrency):
            raise AssertionError("opened")
    with pytest.raises(td.UsageError, match="concurrency"):
        async with open_test_engine(
            app, broker=broker, serve=["math"], worker_concurrency=concurrency
        ):
            raise AssertionError("opened")
    assert await broker.worker_descriptors() == []


# -- drain --------------------------------------------------------------------


async def test_drain_waits_for_the_embedded_worker_and_then_nothing_happens(
    autojump_clock: trio.testing.MockClock,
    open_test_engine: EngineFactory,
) -> None:
    store = td.MemoryStore()
    broker = MemoryBroker()
    async with open_test_engine(app, store=store, broker=broker, serve=["math"]) as engine:
        jobs = [Job(i, seconds=1) for i in range(10)]
        run = await engine.start(fan, jobs, 4, run_id="r")
        await engine.drain()
        # A window of four over members of one second each: 4, 4, then 2
        # at a time, all joined; the parent turned to start and to end.
        assert trio.current_time() == 3
        assert (await store.get_run(run.id)).status == "completed"  # type: ignore[union-attr]
        assert await engine.result(run.id) == [i * i for i in range(10)]
        assert entries["r"] == 2
        assert [t for _, _, t in calls] == [0] * 4 + [1] * 4 + [2] * 2
        writes = attrs.evolve(store.statistics())
        assert broker.depth("math") == 0
        assert broker.depth(engine.results_queue) == 0
        assert engine.statistics().runs_active == 0
        assert engine._rt.worker is not None
        assert not engine._rt.worker.busy
        await trio.sleep(3600)
        assert (store.statistics().batches, store.statistics().ops) == (
            writes.batches,
            writes.ops,
        )
        assert broker.depth("math") == 0
        assert broker.depth(engine.results_queue) == 0


async def test_engines_of_different_stores_never_take_each_others_results(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Two fleets in one process on one broker: each store's engines have a
    # results queue of their own, so no result is taken (and dropped) by an
    # engine that does not know its run.
    broker = MemoryBroker()
    async with (
        td.open_engine(
            app, store=td.MemoryStore(), broker=broker, serve=["math"], engine_id="a", seed=1
        ) as a,
        td.open_engine(
            app, store=td.MemoryStore(), broker=broker, serve=["math"], engine_id="b", seed=2
        ) as b,
    ):
        assert a.results_queue != b.results_queue
        for engine in (a, b):
            for i in range(10):
                await engine.start(one, Job(value=i, seconds=1.0), run_id=f"r-{i}")
        for engine in (a, b):
            for i in range(10):
                assert await engine.result(f"r-{i}") == i * i
