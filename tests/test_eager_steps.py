"""Eager steps: the worker deciding a remote workflow's turn runs a remote
step of a group it serves at once, in the decision (docs/remote-workflows.md,
"Steps run where the body is decided"). On the memory broker and store,
under the autojump clock."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable._base._clock import Clock
from trio_durable._base._records import Run
from trio_durable._front._remote_turns import worker_features
from trio_durable._kernel._decide import decide
from trio_durable._kernel._decider import EagerSteps
from trio_durable._wire._decision_wire import Decision, Eager, request_input
from trio_durable._wire._messages import Result, Task

calls: Counter[str] = Counter()
failures: dict[str, int] = {}

fleet = td.App("fleet")
fleet.queue("narrow", concurrency=1)


@fleet.step(group="work")
async def inc(x: int) -> int:
    calls["inc"] += 1
    return x + 1


@fleet.step(group="work", queue="narrow")
async def queued(x: int) -> int:
    calls["queued"] += 1
    return x + 1


@fleet.step(group="work", retry=td.Retry(attempts=3, backoff=2.0, jitter=0.0))
async def flaky(x: int) -> int:
    calls["flaky"] += 1
    if failures.get("flaky", 0) > 0:
        failures["flaky"] -= 1
        raise RuntimeError("not yet")
    return x + 1


@fleet.step(group="work")
async def refuses(x: int) -> int:
    calls["refuses"] += 1
    raise td.FatalError("never")


@fleet.step(group="work", timeout=2.0)
async def bounded(x: int) -> int:
    calls["bounded"] += 1
    return x + 1


@fleet.workflow(group="deciders")
async def three(ctx: td.Context, x: int) -> int:
    x = await ctx.step(inc, x)
    x = await ctx.step(inc, x)
    return await ctx.step(inc, x)


@fleet.workflow(group="deciders")
async def through_queue(ctx: td.Context, x: int) -> int:
    return await ctx.step(queued, x)


@fleet.workflow(group="deciders")
async def keyed(ctx: td.Context, x: int) -> int:
    return await ctx.step(inc, x, queue="narrow", dedup_key="k")


@fleet.workflow(group="deciders")
async def retried(ctx: td.Context, x: int) -> int:
    return await ctx.step(flaky, x)


@fleet.workflow(group="deciders")
async def caught(ctx: td.Context, x: int) -> str:
    try:
        await ctx.step(refuses, x)
    except td.RemoteStepError as exc:
        return f"refused: {exc.code}"
    return "ran"


@fleet.workflow(group="deciders")
async def timed(ctx: td.Context, x: int) -> int:
    x = await ctx.step(bounded, x)
    return await ctx.step(inc, x)


service = td.App("service")
for name in ("three", "through_queue", "keyed", "retried", "caught", "timed"):
    service.remote_workflow(name, group="deciders")


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    failures.clear()


@asynccontextmanager
async def one_worker(**engine: Any) -> AsyncIterator[tuple[td.Engine, td.Worker]]:
    """An engine and one worker that decides and serves the steps' group."""
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker, **engine) as opened,
        td.open_worker(fleet, broker=broker, groups=["deciders", "work"]) as worker,
    ):
        yield opened, worker


def received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    """The events delivered so far."""
    found = []
    while True:
        try:
            found.append(events.receive_nowait())
        except trio.WouldBlock:
            return found


async def decision_of(engine: td.Engine, run_id: str) -> td.stores.RunRecord:
    [record] = [r for r in await engine.store.get_records(run_id) if r.kind == "decision"]
    return record


async def test_a_worker_that_serves_the_steps_group_runs_them_in_one_decision(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with one_worker() as (engine, worker):
        with engine.subscribe() as events:
            handle = await engine.start("three", 1, run_id="r")
            assert await handle.result() == 4
            await engine.drain()
            seen = [(e.kind, e.seq, e.data) for e in received(events) if e.kind.startswith("step.")]
        # One decision task: the body ran to its end on the worker.
        assert (await decision_of(engine, "r")).attempts == 1
        checkpoints = await engine.store.get_checkpoints("r")
        assert [(cp.seq, cp.kind, cp.status, cp.attempts, cp.output) for cp in checkpoints] == [
            (1, "remote", "completed", 1, "2"),
            (2, "remote", "completed", 1, "3"),
            (3, "remote", "completed", 1, "4"),
        ]
        assert all(cp.group == "work" and len(cp.executions) == 1 for cp in checkpoints)
        assert calls["inc"] == 3
        # Each step's events, as if its result had settled it, naming the
        # worker that ran it.
        assert [(kind, seq) for kind, seq, _ in seen] == [
            ("step.started", 1),
            ("step.completed", 1),
            ("step.started", 2),
            ("step.completed", 2),
            ("step.started", 3),
            ("step.completed", 3),
        ]
        assert {data.get("worker") for kind, _, data in seen if kind == "step.completed"} == {
            worker.instance_id
        }
        assert all(data["eager"] for kind, _, data in seen if kind == "step.started")


async def test_a_worker_that_does_not_serve_the_steps_group_sends_them_to_their_group(
    autojump_clock: trio.testing.MockClock,
) -> None:
    broker = td.MemoryBroker()
    async with (
        td.open_engine(service, broker=broker) as engine,
        td.open_worker(fleet, broker=broker, groups=["deciders"]),
        td.open_worker(fleet, broker=broker, groups=["work"]) as stepper,
    ):
        with engine.subscribe() as events:
            assert await (await engine.start("three", 1, run_id="r")).result() == 4
            await engine.drain()
            seen = received(events)
        # A decision before each step and one at the end.
        assert (await decision_of(engine, "r")).attempts == 4
        completed = [e.data["worker"] for e in seen if e.kind == "step.completed"]
        assert completed == [stepper.instance_id] * 3


@pytest.mark.parametrize("workflow", ["through_queue", "keyed"])
async def test_a_step_through_a_flow_control_queue_goes_to_the_engine(
    autojump_clock: trio.testing.MockClock, workflow: str
) -> None:
    async with one_worker() as (engine, _):
        assert await (await engine.start(workflow, 1, run_id="r")).result() == 2
        # Its slot (and its key) are the engine's: the body stopped there.
        assert (await decision_of(engine, "r")).attempts == 2


async def test_a_retryable_failure_leaves_the_next_attempt_to_the_engine(
    autojump_clock: trio.testing.MockClock,
) -> None:
    failures["flaky"] = 1
    async with one_worker() as (engine, _):
        with engine.subscribe() as events:
            handle = await engine.start("retried", 1, run_id="r")
            assert await handle.result() == 2
            await engine.drain()
            failed = [e.data for e in received(events) if e.kind == "step.failed"]
        [cp] = await engine.store.get_checkpoints("r")
        # Attempt 1 ran in the decision; the engine sent attempt 2 once the
        # step's backoff passed.
        assert (cp.status, cp.attempts, cp.output) == ("completed", 2, "2")
        assert [(e.message, e.code) for e in cp.errors] == [("not yet", None)]
        assert len(cp.executions) == 2
        assert cp.finished_at is not None
        assert cp.started_at is not None
        assert calls["flaky"] == 2
        [data] = failed
        assert (data["attempt"], data["final"], data["error"]) == (1, False, "not yet")


async def test_a_step_that_fails_for_good_fails_in_the_body_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with one_worker() as (engine, _):
        assert await (await engine.start("caught", 1, run_id="r")).result() == "refused: None"
        [cp] = await engine.store.get_checkpoints("r")
        assert (cp.status, cp.attempts) == ("failed", 1)
        assert cp.error is not None
        assert cp.error.message == "never"
        assert calls["refuses"] == 1
        assert (await decision_of(engine, "r")).attempts == 1


async def test_with_remote_redispatch_only_steps_that_end_in_time_run_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The decision task counts as lost after 10 s: a step runs in it only
    # if its timeout ends it within 5 s. ``bounded`` (2 s) does; ``inc``,
    # which has no timeout, goes to the engine.
    async with one_worker(remote_redispatch=(10.0, 3)) as (engine, _):
        assert await (await engine.start("timed", 1, run_id="r")).result() == 3
        assert (await decision_of(engine, "r")).attempts == 2
        assert calls == Counter({"bounded": 1, "inc": 1})


async def test_a_breakpoint_keeps_its_step_from_running_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with one_worker() as (engine, _):
        breakpoint = await engine.set_breakpoint(workflow="three", step="inc")
        handle = await engine.start("three", 1, run_id="r")
        with trio.fail_after(60):
            while not await engine.paused_steps("r"):  # noqa: ASYNC110 -- a turn pauses it
                await trio.sleep(1)
        assert calls["inc"] == 0
        await engine.clear_breakpoint(breakpoint.id)
        await engine.continue_run("r")
        assert await handle.result() == 4
        assert calls["inc"] == 3


def _task(**fields: Any) -> Task:
    run = Run(id="r", workflow="three", version=fleet.get_workflow("three").version, input="[1]")
    return Task(
        run_id="r",
        seq=999_999_999,
        attempt=1,
        step="three",
        workflow="three",
        route="deciders",
        input=request_input(run, [], {}, **fields),
        kind="decision",
    )


async def _decide(task: Task, executed: list[Task]) -> Decision:
    async def execute(step_task: Task) -> Result:
        executed.append(step_task)
        return Result(
            run_id=step_task.run_id,
            seq=step_task.seq,
            attempt=step_task.attempt,
            step=step_task.step,
            workflow=step_task.workflow,
            status="completed",
            output=json.dumps(json.loads(step_task.input)[0] + 1),
            execution=step_task.execution,
        )

    return await decide(
        fleet,
        task,
        clock=Clock(lambda: 1_700_000_000.0),
        rng=random.Random(0),
        worker_id="w",
        traceback_limit=10,
        features=worker_features(),
        eager=EagerSteps(
            routes=frozenset({"deciders", "work"}), capabilities=frozenset(), execute=execute
        ),
    )


async def test_a_task_from_an_engine_that_takes_no_step_run_so_gets_a_command() -> None:
    # An engine of the release before sends no ``eager``: the worker stops
    # at the step, as that engine expects.
    executed: list[Task] = []
    decision = await _decide(_task(), executed)
    assert executed == []
    assert decision.next is not None
    assert decision.next.op == "step"
    assert decision.wire_version == 1
    # An engine that takes them lets the worker run all three.
    decision = await _decide(_task(eager=Eager(budget=None)), executed)
    assert [t.seq for t in executed] == [1, 2, 3]
    assert decision.output == "4"
    assert [(cp.kind, cp.status) for cp in decision.local] == [("remote", "completed")] * 3
    assert decision.worker == "w"
    # Only an engine of this release reads such a decision.
    assert decision.wire_version == 2
    assert Decision.decode(decision.encode(), "r") == decision
