"""Execution ids (`trio_durable._kernel._executions`): on the wire, under the
signature, minted from the engine's seeded source, and the rules a result
settles by (the scenarios of results replayed over brokers are in
tests/replayed_results.py)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import trio_durable as td
from trio_durable._kernel._executions import RERUN
from trio_durable._wire._messages import Result, Task, WireError
from trio_durable._wire._signing import SignatureRejected, open_signed, sign
from trio_durable.brokers import Consumer, MemoryBroker, Outgoing

app = td.App("executions")

GATE: dict[str, trio.Event] = {}
FAILS: set[str] = set()


@app.step(group="pay", retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0))
async def charge(order: str) -> str:
    if order in GATE:
        await GATE[order].wait()
    if order in FAILS:
        FAILS.discard(order)
        raise RuntimeError("try again")
    return f"charged {order}"


@app.workflow()
async def ship(ctx: td.Context, order: str) -> str:
    return "shipped " + await ctx.step(charge, order)


EXECUTION = "0123456789abcdef0123456789abcdef"

TASK = Task(
    run_id="r",
    seq=1,
    attempt=2,
    step="charge",
    workflow="ship",
    route="pay",
    input='["o"]',
    execution=EXECUTION,
)
RESULT = Result(
    run_id="r",
    seq=1,
    attempt=2,
    step="charge",
    workflow="ship",
    status="completed",
    output='"charged o"',
    execution=EXECUTION,
)


# -- the wire -----------------------------------------------------------------------


def test_tasks_and_results_carry_their_execution_id() -> None:
    assert Task.decode(TASK.encode()) == TASK
    assert Result.decode(RESULT.encode()) == RESULT
    assert json.loads(TASK.encode())["execution"] == EXECUTION
    assert json.loads(RESULT.encode())["execution"] == EXECUTION


def test_a_message_without_one_is_as_before() -> None:
    """A process older than execution ids reads what a newer one sends
    (it ignores the field), and the newer reads its messages as having
    none: the field is left out when absent, so the bytes are as they
    were."""
    old_task = attrs.evolve(TASK, execution=None)
    assert b"execution" not in old_task.encode()
    assert Task.decode(old_task.encode()).execution is None
    assert Result.decode(attrs.evolve(RESULT, execution=None).encode()).execution is None
    fields = json.loads(RESULT.encode())
    fields["execution"] = None
    assert Result.decode(json.dumps(fields).encode()).execution is None


@pytest.mark.parametrize(
    "value",
    [
        123,
        True,
        "",
        EXECUTION.upper(),
        EXECUTION[:-1],
        EXECUTION + "0",
        "g" * 32,
        " " + EXECUTION[1:],
        [EXECUTION],
        {"id": EXECUTION},
    ],
)
def test_a_malformed_execution_id_does_not_decode(value: Any) -> None:
    for message, decode in ((TASK, Task.decode), (RESULT, Result.decode)):
        fields = json.loads(message.encode())
        fields["execution"] = value
        with pytest.raises(WireError, match="execution must be 32 lower-case hex digits"):
            decode(json.dumps(fields).encode())


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (f'"execution":"{EXECUTION}"'.encode(), b'"execution":"' + b"f" * 32 + b'"'),
        (b'"run_id":"r"', b'"run_id":"s"'),
        (b'"seq":1', b'"seq":2'),
        (b'"attempt":2', b'"attempt":1'),
    ],
)
def test_the_signature_covers_the_execution_the_run_the_seq_and_the_attempt(
    old: bytes, new: bytes
) -> None:
    ring = td.Keyring.single(b"a key of the fleet, 32 bytes....")
    signed = sign(ring, "result", RESULT.encode())
    assert Result.decode(open_signed(ring, "result", signed)) == RESULT
    assert signed.count(old) == 1
    with pytest.raises(SignatureRejected, match="forged"):
        open_signed(ring, "result", signed.replace(old, new))


# -- minting ------------------------------------------------------------------------


async def _executions_of(seed: int, order: str) -> tuple[str, ...]:
    """The execution ids of ``order``'s charge, which fails once."""
    FAILS.add(order)
    broker = MemoryBroker()
    async with td.open_engine(app, broker=broker, seed=seed, serve=["pay"]) as engine:
        assert await engine.result((await engine.start(ship, order, run_id=order)).id)
        [cp] = await engine.store.get_checkpoints(order)
    return cp.executions


async def test_each_dispatch_mints_an_execution_id_from_the_seeded_source(
    autojump_clock: trio.testing.MockClock,
) -> None:
    first = await _executions_of(7, "o-1")
    # Its first attempt and its retry, each an execution of its own.
    assert len(first) == len(set(first)) == 2
    assert all(len(execution) == 32 for execution in first)
    # The same seed mints the same ids (the simulation replays a seed);
    # another seed others.
    assert await _executions_of(7, "o-1") == first
    assert not set(await _executions_of(8, "o-1")) & set(first)


# -- which result settles a step ----------------------------------------------------


async def _answer(broker: MemoryBroker, engine: td.Engine, task: Task, **fields: Any) -> None:
    """Send ``engine`` a result of ``task`` (as a worker that echoes its
    execution id would, unless ``fields`` say otherwise)."""
    result = Result(
        run_id=task.run_id,
        seq=task.seq,
        attempt=task.attempt,
        step=task.step,
        workflow=task.workflow,
        status="completed",
        output='"charged by hand"',
        execution=task.execution,
    )
    result = attrs.evolve(result, **fields)
    await broker.dispatch([Outgoing(queue=engine.results_queue, body=result.encode())])
    await engine.drain()


async def _task(tasks: Consumer) -> Task:
    [delivery] = await tasks.receive(1)
    await tasks.ack([delivery])
    return Task.decode(delivery.body)


async def test_a_result_without_an_execution_id_settles_by_its_attempt_until_a_retry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The rolling-upgrade rule: a result of a worker older than execution
    ids (none in it) settles a step at its attempt; after `Engine.retry`
    ran the step's seq again (`Checkpoint.rerun`), never."""
    broker = MemoryBroker()
    async with (
        td.open_engine(app, broker=broker, seed=1) as engine,
        broker.open_consumer("pay", prefetch=10) as tasks,
    ):
        await engine.start(ship, "o", run_id="r")
        task = await _task(tasks)
        assert task.execution is not None
        # Another attempt's is stale; its own settles the step.
        await _answer(broker, engine, task, execution=None, attempt=2)
        assert engine.statistics().rejected_stale == 1
        await _answer(broker, engine, task, execution=None, status="failed", error="x")
        assert engine.statistics().rejected_stale == 1
        # (That failure was retryable: attempt 2 goes out after its backoff.)
        again = await _task(tasks)
        assert (again.attempt, again.execution != task.execution) == (2, True)
        await _answer(broker, engine, again, execution=None)
        assert await engine.result("r") == "shipped charged by hand"

        await engine.retry("r", from_seq=1)
        rerun = await _task(tasks)
        [cp] = await engine.store.get_checkpoints("r")
        assert (cp.status, cp.attempts, cp.rerun) == ("pending", 1, True)
        # The retry recorded that the remote step at seq 1 runs again.
        [record] = await engine.store.get_records("r")
        assert (record.kind, record.output) == (RERUN, "1")
        await _answer(broker, engine, rerun, execution=None, output='"stale"')
        assert engine.statistics().rejected_stale == 2
        assert (await engine.get("r")).status == "suspended"
        await _answer(broker, engine, rerun, output='"charged again"')
        assert await engine.result("r") == "shipped charged again"


async def test_a_late_success_of_an_earlier_execution_of_the_step_settles_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Within one step's executions (a redispatch here), a success of an
    earlier one settles the step (it did run), while its late failure is
    stale."""
    broker = MemoryBroker()
    async with (
        td.open_engine(app, broker=broker, seed=2, remote_redispatch=(10.0, 3)) as engine,
        broker.open_consumer("pay", prefetch=10) as tasks,
    ):
        await engine.start(ship, "o", run_id="r")
        first = await _task(tasks)
        second = await _task(tasks)
        assert (first.attempt, second.attempt) == (1, 2)
        await _answer(broker, engine, first, status="failed", error="late")
        assert engine.statistics().rejected_stale == 1
        await _answer(broker, engine, first, output='"first"')
        assert await engine.result("r") == "shipped first"
        await _answer(broker, engine, second, output='"second"')
        assert engine.statistics().rejected_stale == 2
        [cp] = await engine.store.get_checkpoints("r")
        assert (cp.output, cp.executions) == ('"first"', (first.execution, second.execution))
