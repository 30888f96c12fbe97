"""An envelope of a newer wire version (what a newer engine or worker
sends) is rejected at the boundary with a message naming both versions,
counted and logged: a worker never runs such a task, an engine never
settles such a result, and the same message at this engine's version goes
through."""

from __future__ import annotations

import json
import logging

import attrs
import pytest
import trio.testing

import trio_durable as td
from prometheus_samples import sample
from trio_durable._brokers._base import Outgoing
from trio_durable._wire._messages import WIRE_VERSION, Result, Task, WireError

ROUTE = "versions"

app = td.App("versions")
ran: list[int] = []


@app.step(group=ROUTE)
async def double(x: int) -> int:
    ran.append(x)
    return 2 * x


@app.workflow()
async def doubled(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, x)


def _with_version(body: bytes, version: object) -> bytes:
    fields = json.loads(body)
    fields["v"] = version
    return json.dumps(fields).encode()


def _rejected(metrics: str, kind: str) -> float:
    return sample(metrics, "trio_durable_messages_rejected_total", kind=kind) or 0.0


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


def test_this_engine_reads_wire_versions_one_and_two_and_writes_one() -> None:
    # The messages below say "newer than this engine's 2". Version 2 is
    # written only for a decision an engine of version 1 cannot carry out
    # (tests/test_remote_workflow_operations.py).
    assert WIRE_VERSION == 2
    task = Task(run_id="r", seq=1, attempt=1, step="s", workflow="w", route="g", input="[]")
    result = Result(run_id="r", seq=1, attempt=1, step="s", workflow="w", status="completed")
    assert json.loads(task.encode())["v"] == 1
    assert json.loads(result.encode())["v"] == 1
    assert Result.decode(_with_version(result.encode(), 2)).version == 2
    assert Task.decode(_with_version(task.encode(), 2)).version == 2
    # A query travels in version 2 only.
    query = attrs.evolve(task, kind="query", version=2)
    assert Task.decode(query.encode()) == query
    with pytest.raises(WireError, match="a query travels in envelope version 2"):
        Task.decode(_with_version(query.encode(), 1))


@pytest.mark.parametrize("cls", [Task, Result])
def test_a_newer_envelope_is_refused_naming_both_versions(cls: type[Task] | type[Result]) -> None:
    role = cls.__name__.lower()
    message = (
        Task(run_id="r", seq=1, attempt=1, step="s", workflow="w", route="g", input="[]")
        if cls is Task
        else Result(run_id="r", seq=1, attempt=1, step="s", workflow="w", status="completed")
    )
    for version in (3, 4, 2**31 - 1):
        with pytest.raises(WireError) as caught:
            cls.decode(_with_version(message.encode(), version))
        assert str(caught.value) == (
            f"not a {role}: {role} envelope version {version} is newer than this engine's 2:"
            " upgrade this process to read it"
        )
    # Not a version a newer engine sends: no claim that it is newer.
    odd: list[tuple[object, str | None]] = [
        (0, "0"),
        (2.0, "2.0"),
        ("2", "'2'"),
        (3.0, "3.0"),
        (True, "true"),
        (2**80, None),
    ]
    for odd_version, shown in odd:
        with pytest.raises(WireError, match="unknown wire version") as refused:
            cls.decode(_with_version(message.encode(), odd_version))
        assert "newer" not in str(refused.value)
        if shown is not None:
            assert str(refused.value).endswith(f"unknown wire version {shown}")


async def test_a_newer_result_is_rejected_by_the_settle_path_and_a_newer_task_by_a_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ran.clear()
    broker = td.MemoryBroker()
    async with td.open_engine(app, broker=broker, seed=3) as engine:
        run = await engine.start(doubled, 21, run_id="skew")
        # No worker yet: take the task off its queue, and answer it as a
        # newer worker would.
        async with broker.open_consumer(ROUTE, prefetch=1) as consumer:
            (delivery,) = await consumer.receive(1)
            await consumer.ack([delivery])
        task = Task.decode(delivery.body)
        answer = Result(
            run_id=task.run_id,
            seq=task.seq,
            attempt=task.attempt,
            step=task.step,
            workflow=task.workflow,
            status="completed",
            output="99",
            execution=task.execution,
        )
        await broker.dispatch(
            [Outgoing(queue=engine.results_queue, body=_with_version(answer.encode(), 3))]
        )
        # The result consumer runs on the Trio thread: once every task is
        # blocked, it has taken the message.
        await trio.testing.wait_all_tasks_blocked()
        assert broker.depth(engine.results_queue) == 0
        assert engine.statistics().rejected == 1
        assert _rejected(engine.metrics(), "result") == 1
        assert (await engine.get(run.id)).status == "suspended"  # waits for its step
        (logged,) = _errors(caplog)
        assert "no valid result" in logged
        assert "result envelope version 3 is newer than this engine's 2" in logged
        caplog.clear()

        # The task as a newer engine would send it, to a worker.
        await broker.dispatch([Outgoing(queue=ROUTE, body=_with_version(delivery.body, 3))])
        async with td.open_worker(app, broker=broker, groups=[ROUTE]) as worker:
            await trio.testing.wait_all_tasks_blocked()
            assert broker.depth(ROUTE) == 0
            assert worker.statistics().rejected == 1
            assert _rejected(worker.metrics(), "task") == 1
            assert ran == []
            (logged,) = _errors(caplog)
            assert "no valid task" in logged
            assert "task envelope version 3 is newer than this engine's 2" in logged

            # The same task at this engine's version runs, and its result
            # settles the step: the others were refused for their version
            # alone.
            await broker.dispatch([Outgoing(queue=ROUTE, body=delivery.body)])
            assert await engine.result(run.id) == 42
            assert ran == [21]
            assert worker.statistics().rejected == 1
        assert engine.statistics().rejected == 1
