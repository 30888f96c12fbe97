"""End-to-end conformance with the workflows remote: an engine that holds no
workflow body, and two workers that decide every turn.

`check_a_mix_of_workflows_decided_on_workers_settles_exactly_once` runs
the mix of `check_a_mix_of_remote_workflows_settles_exactly_once` (single
steps, a retried step, a step that fails for good, a fan in waves, steps
through a flow-control queue, one of each) plus what only remote workflows
do: a local step run on a worker during a decision, a remote child, a local
child (a workflow the engine registers), a fan over remote-workflow
children, a durable timer, and a failure routed to a remote on-error
handler. The engine's app declares only names; the steps, their retry
policies and the flow-control queue are registered on the workers alone.
Every run ends with its result, every checkpoint holds one result, the
queue is never over its concurrency, and nothing is written once the
engine drained and both workers are idle.
"""

from __future__ import annotations

import itertools
import math
import secrets
from collections import Counter
from typing import Any, Final

import attrs
import trio

import trio_durable as td

from ..._brokers._base import RESULTS
from . import _broker_engine as mix
from ._broker_engine import (
    QUEUE_CONCURRENCY,
    QUEUED_SECONDS,
    WORKER_CONCURRENCY,
    Job,
    Record,
    declined_failure,
    failure,
    faults_of,
    final_settles,
    fixed_wall,
    peak_in_flight,
)
from ._broker_factory import EVENTUALLY, BrokerFactory, BrokerMaker, as_factory, settle

FAN_SIZE: Final = 60
FAN_CONCURRENCY: Final = 20
CHILD_FAN: Final = 6
SLEEP: Final = 30.0
DECIDERS: Final = "deciders"

_SESSION: Final = secrets.token_hex(3)
_serial = itertools.count()

# -- the workers' app: every body, step and queue --------------------------------------

workers = td.App("broker-engine-workers")
workers.queue("slots", concurrency=QUEUE_CONCURRENCY)
local_calls: Counter[str] = Counter()


# The engine suite's steps, registered on the workers alone; they record
# into that suite's `Record` (reset by each check).
square = workers.step(name="square", group="math")(mix.square.fn)
double = workers.step(name="double", group="math")(mix.double.fn)
flaky = workers.step(name="flaky", group="math", retry=mix.flaky.retry)(mix.flaky.fn)
declined = workers.step(name="declined", group="math", retry=mix.declined.retry)(mix.declined.fn)
exclusive = workers.step(name="exclusive", group="math", queue="slots")(mix.exclusive.fn)


@workers.step()
async def label(x: int) -> str:
    """A local step: it runs on a worker, during a decision."""
    local_calls[f"label-{x}"] += 1
    return f"label-{x}"


@workers.workflow(group=DECIDERS)
async def single(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@workers.workflow(group=DECIDERS)
async def fan(ctx: td.Context, n: int, concurrency: int) -> list[int]:
    return await ctx.all(double, list(range(n)), concurrency=concurrency)


@workers.workflow(group=DECIDERS)
async def retried(ctx: td.Context, key: str) -> str:
    return await ctx.step(flaky, key)


@workers.workflow(group=DECIDERS)
async def caught(ctx: td.Context, x: int) -> dict[str, Any]:
    try:
        await ctx.step(declined, x)
    except td.RemoteStepError as exc:
        return failure(exc)
    raise AssertionError("the step should have failed")


@workers.workflow(group=DECIDERS)
async def queued(ctx: td.Context, job: Job) -> str:
    return await ctx.step(exclusive, job)


@workers.workflow(group=DECIDERS)
async def mixed(ctx: td.Context, x: int) -> list[Any]:
    a = await ctx.step(square, x)
    b = await ctx.step(flaky, f"mixed-{x}")
    try:
        await ctx.step(declined, a)
    except td.RemoteStepError as exc:
        c = failure(exc)
    return [a, b, c, await ctx.all(double, [a, x], concurrency=1)]


@workers.workflow(group=DECIDERS)
async def squared_label(ctx: td.Context, x: int) -> str:
    labelled = await ctx.step(label, x)
    squared = await ctx.step(square, x)
    return f"{labelled}:{squared}"


@workers.workflow(group=DECIDERS)
async def family(ctx: td.Context, x: int, pause: float) -> dict[str, Any]:
    """A local step, a timer, a remote child, a local child (the engine's),
    and a fan over remote-workflow children."""
    labelled = await ctx.step(label, x)
    await ctx.sleep(pause)
    child = await ctx.child(squared_label, x)
    local = await ctx.child("engine_local", x)
    members = await ctx.all(squared_label, list(range(CHILD_FAN)))
    return {"label": labelled, "child": child, "local": local, "fan": members}


@workers.workflow(group=DECIDERS)
async def refund(ctx: td.Context, failed: dict[str, Any]) -> dict[str, Any]:
    """The remote on-error handler of `charged`."""
    return {"refunded": failed["run_id"], "code": failed["error"]["code"]}


@workers.workflow(group=DECIDERS, on_error=[td.OnError("card_declined", workflow="refund")])
async def charged(ctx: td.Context, x: int) -> int:
    return await ctx.step(declined, x)


# -- the engine's app: names only, and one local workflow --------------------------------

service = td.App("broker-engine-service")
for _name in (
    "single",
    "fan",
    "retried",
    "caught",
    "queued",
    "mixed",
    "squared_label",
    "family",
    "refund",
    "charged",
):
    service.remote_workflow(_name, group=DECIDERS)


@service.workflow()
async def engine_local(ctx: td.Context, x: int) -> int:
    """A local workflow, the child of a remote one."""
    return x + 1000


def family_result(x: int) -> dict[str, Any]:
    return {
        "label": f"label-{x}",
        "child": f"label-{x}:{x * x}",
        "local": x + 1000,
        "fan": [f"label-{i}:{i * i}" for i in range(CHILD_FAN)],
    }


async def quiesce(broker: td.Broker, engine: td.Engine, *workers_: td.Worker) -> None:
    """Wait until the engine drained while both workers are idle and, on a
    broker that can tell, their queues hold nothing (a duplicate task may
    wait there, delayed)."""
    queues = sorted({queue for worker in workers_ for queue in worker.queues})
    with trio.fail_after(EVENTUALLY):
        while True:
            await engine.drain()
            busy = [w for w in workers_ if w.busy]
            if busy:
                await busy[0].wait_idle()
                continue
            quiet = broker.quiet(queues)
            if quiet is None or quiet.is_set():
                return
            try:
                await quiet.wait()
            finally:
                quiet.set()


async def check_a_mix_of_workflows_decided_on_workers_settles_exactly_once(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """The engine suite's mix with its workflows remote, and the mixing of
    remote workflows: every run ends with its result, every checkpoint
    holds one result (each remote step settled once, each local step run
    once per decision that recorded it), the flow-control queue (known only
    to the workers) stays within its concurrency, and nothing is written
    once the engine drained.

    Raises:
      RuntimeError: ``factory`` says the broker is on Trio's clock, and this
        run's clock is not an autojump `trio.testing.MockClock`.
    """
    factory = as_factory(factory)
    clock = trio.lowlevel.current_clock()
    if factory.trio_clock and not (
        isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold == 0
    ):
        raise RuntimeError(
            "a broker on Trio's clock (trio_clock=True) is checked under"
            f" trio.testing.MockClock(autojump_threshold=0); this run's clock is {clock!r}"
        )
    mix.record = Record()
    local_calls.clear()
    try:
        await _mix(factory)
    finally:
        mix.record = Record()
        local_calls.clear()


async def _mix(factory: BrokerFactory) -> None:
    on_trio_clock = factory.trio_clock
    namespace = f"r{_SESSION}-{next(_serial)}"
    routes = [f"math@{namespace}", f"{DECIDERS}@{namespace}"]
    seconds = QUEUED_SECONDS if on_trio_clock else 0.0
    pause = SLEEP if on_trio_clock else 0.5

    def rid(name: str) -> str:
        return f"{namespace}.{name}"

    expected: dict[str, Any] = {}
    store = td.MemoryStore()
    async with factory() as broker:
        faults = faults_of(broker)
        seed = faults.seed if faults is not None else 0
        async with (
            td.open_engine(
                service,
                store=store,
                broker=broker,
                engine_id="engine",
                seed=seed,
                wall_clock=fixed_wall,
            ) as engine,
            td.open_worker(
                workers,
                broker=broker,
                groups=routes,
                concurrency=WORKER_CONCURRENCY,
                instance_id=f"{namespace}.one",
                wall_clock=fixed_wall,
                seed=seed,
            ) as one,
            td.open_worker(
                workers,
                broker=broker,
                groups=routes,
                concurrency=WORKER_CONCURRENCY,
                instance_id=f"{namespace}.two",
                wall_clock=fixed_wall,
                seed=seed + 1,
            ) as two,
        ):
            with engine.subscribe(buffer=math.inf) as receive:

                async def start(name: str, *args: Any, result: Any, run: str = "") -> None:
                    run_id = rid(run or name)
                    await engine.start(name, *args, run_id=run_id, namespace=namespace)
                    expected[run_id] = result

                await start(
                    "fan", FAN_SIZE, FAN_CONCURRENCY, result=[2 * i for i in range(FAN_SIZE)]
                )
                for x in range(1, 4):
                    await start("single", x, result=x * x, run=f"single-{x}")
                for k in range(2):
                    await start("retried", f"k{k}", result=f"ok:k{k}", run=f"retried-{k}")
                await start("caught", 7, result=declined_failure(7))
                for i in range(4):
                    await start(
                        "queued", Job(f"q{i}", seconds), result=f"done:q{i}", run=f"queued-{i}"
                    )
                await start(
                    "mixed",
                    3,
                    result=[9, "ok:mixed-3", declined_failure(9), [18, 6]],
                )
                for x in (2, 5):
                    await start("family", x, pause, result=family_result(x), run=f"family-{x}")
                await start(
                    "charged",
                    4,
                    result={"refunded": rid("charged"), "code": "card_declined"},
                )

                with trio.fail_after(EVENTUALLY * 20):
                    outputs = {run_id: await engine.result(run_id) for run_id in expected}
                assert outputs == expected
                await quiesce(broker, engine, one, two)
                events: list[td.Event] = []
                while True:
                    try:
                        events.append(receive.receive_nowait())
                    except trio.WouldBlock:
                        break
            assert engine.statistics().events_dropped == 0

            before = attrs.evolve(store.statistics())
            if on_trio_clock:
                await trio.sleep(3600)
            else:
                await settle(factory)
            assert store.statistics() == before
        assert store.statistics() == before

        # -- every checkpoint holds one result ------------------------------------------
        runs = await store.list_runs()
        by_id = {run.id: run for run in runs}
        assert all(run.status == "completed" for run in runs), [
            (run.id, run.status, run.error) for run in runs if run.status != "completed"
        ]
        assert by_id[rid("charged")].tags == ("onError:card_declined",)
        checkpoints: dict[tuple[str, int], td.Checkpoint] = {}
        for run in runs:
            assert (run.lease_owner, run.wake_at) == (None, None)
            for cp in await store.get_checkpoints(run.id):
                checkpoints[(run.id, cp.seq)] = cp
        assert [key for key, cp in checkpoints.items() if cp.status == "pending"] == []
        remote = {key: cp for key, cp in checkpoints.items() if cp.kind == "remote"}
        settled = final_settles(events)
        assert settled == Counter(dict.fromkeys(remote, 1))
        # Every run of a remote workflow was decided on the workers.
        for run in runs:
            records = {record.kind: record for record in await store.get_records(run.id)}
            decision = records.get("decision")
            if run.workflow == "engine_local":
                assert decision is None
            else:
                assert decision is not None, run.id
                assert decision.status == "completed", run.id
        # A local step ran on a worker once per checkpoint (no duplicate
        # decision recorded it twice; redelivery may run it again, unseen).
        labels = [cp for cp in checkpoints.values() if cp.kind == "local"]
        assert len(labels) == 2 + 2 * (1 + CHILD_FAN)
        assert all(cp.status == "completed" and cp.attempts == 1 for cp in labels)
        duplicates = faults is not None and faults.duplicate > 0
        if not duplicates:
            assert sum(local_calls.values()) == len(labels)
        for cp in remote.values():
            if cp.name == "flaky":
                assert cp.status == "completed"
                assert cp.attempts == 2 or (duplicates and cp.attempts == 1)
            elif cp.name == "declined":
                assert (cp.status, cp.attempts) == ("failed", 1)
            else:
                assert (cp.status, cp.attempts, cp.error) == ("completed", 1, None)

        assert peak_in_flight(events, "exclusive") <= QUEUE_CONCURRENCY
        if not duplicates:
            assert mix.record.queued_peak <= QUEUE_CONCURRENCY
        seen = Counter(
            event.data["worker"]
            for event in events
            if event.kind in ("step.completed", "step.failed")
        )
        assert set(seen) <= {f"{namespace}.one", f"{namespace}.two"}
        if isinstance(broker, td.MemoryBroker):
            assert broker.depth(RESULTS) == 0
            assert all(broker.depth(route) == 0 for route in routes)
