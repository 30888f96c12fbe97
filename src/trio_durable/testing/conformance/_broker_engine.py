"""End-to-end conformance: an engine and workers over a broker.

`check_a_mix_of_remote_workflows_settles_exactly_once` runs a mix of
workflows over remote steps on a `MemoryStore`, with the engine's embedded
worker and a separate `open_worker` consuming the same routes of one broker
that ``factory`` opens, and checks what must hold whatever the broker does to
delivery: every run ends with exactly the result it has without faults,
every checkpoint is settled once (none is left pending, with the attempts
the step needed), a flow-control queue never has more steps out than its
concurrency, and once the engine drained (and the separate worker is idle)
nothing more is written to the store.

The factory is a `BrokerFactory` of the broker suite (or a plain opener).
For a broker on Trio's clock (`BrokerFactory.trio_clock`, run under
``trio.testing.MockClock(autojump_threshold=0)``) the check also asserts
exact times. Each call's namespace (so its task queues) and run ids are
unique, so a shared server needs no cleanup.
"""

from __future__ import annotations

import itertools
import json
import math
import secrets
from collections import Counter
from contextlib import AbstractAsyncContextManager
from typing import Any, Final

import attrs
import trio
import trio.testing

import trio_durable as td

from ..._brokers._base import RESULTS, Broker
from ..._stores._ops import AdmitToQueue, PutCheckpoint
from ._broker_factory import EVENTUALLY, BrokerFactory, BrokerMaker, as_factory, settle

BACKOFF: Final = 0.25
"""The retried step's backoff (seconds) before its second attempt."""

FAN_SIZE: Final = 200
FAN_CONCURRENCY: Final = 20
QUEUE_CONCURRENCY: Final = 2
QUEUED_RUNS: Final = 6
QUEUED_SECONDS: Final = 10.0
"""How long a queued step runs on a broker on Trio's clock (0 on others:
the check takes no real time beyond what the broker needs)."""

WORKER_CONCURRENCY: Final = 8
"""Of each worker: a fan wave (20) is more than one worker takes at once."""

WALL_START: Final = 1_700_000_000.0
"""Durable time at Trio time 0, so durable times are exact."""

_SESSION: Final = secrets.token_hex(3)
"""Distinguishes this process's namespaces from earlier ones on a real server."""

_serial = itertools.count()


def fixed_wall() -> float:
    """A wall clock that moves with Trio's clock."""
    return WALL_START + trio.current_time()


app = td.App("broker-engine")
slots = app.queue("slots", concurrency=QUEUE_CONCURRENCY)


# -- what the steps record ------------------------------------------------------------


@attrs.define
class Record:
    """What the steps saw, across both workers (of one check at a time)."""

    flaky_calls: Counter[str] = attrs.field(factory=Counter)
    flaky_times: dict[str, list[float]] = attrs.field(factory=dict)
    queued_running: list[str] = attrs.field(factory=list)
    queued_peak: int = 0
    queued_starts: list[float] = attrs.field(factory=list)


record = Record()


@attrs.frozen
class Job:
    """A queued step's input: its key and how long it runs."""

    key: str
    seconds: float


@app.step(group="math")
async def square(x: int) -> int:
    return x * x


@app.step(group="math")
async def double(x: int) -> int:
    return 2 * x


@app.step(group="math", retry=td.Retry(attempts=3, backoff=BACKOFF, jitter=0))
async def flaky(key: str) -> str:
    """Fails its first call for ``key`` (a retryable error), then succeeds."""
    record.flaky_calls[key] += 1
    record.flaky_times.setdefault(key, []).append(trio.current_time())
    if record.flaky_calls[key] == 1:
        raise ValueError(f"first call for {key} fails")
    return f"ok:{key}"


@app.step(group="math", retry=td.Retry(attempts=3, backoff=BACKOFF, jitter=0))
async def declined(x: int) -> int:
    raise td.FatalError(f"declined {x}", code="card_declined", details={"x": x})


@app.step(group="math", queue="slots")
async def exclusive(job: Job) -> str:
    record.queued_running.append(job.key)
    record.queued_starts.append(trio.current_time())
    record.queued_peak = max(record.queued_peak, len(record.queued_running))
    try:
        await trio.sleep(job.seconds)
    finally:
        record.queued_running.remove(job.key)
    return f"done:{job.key}"


@app.workflow()
async def single(ctx: td.Context, x: int) -> int:
    return await ctx.step(square, x)


@app.workflow()
async def fan(ctx: td.Context, n: int, concurrency: int) -> list[int]:
    return await ctx.all(double, list(range(n)), concurrency=concurrency)


@app.workflow()
async def retried(ctx: td.Context, key: str) -> str:
    return await ctx.step(flaky, key)


def failure(exc: td.RemoteStepError) -> dict[str, Any]:
    return {
        "step": exc.step,
        "message": exc.message,
        "code": exc.code,
        "details": exc.details,
        "attempts": exc.attempts,
    }


@app.workflow()
async def caught(ctx: td.Context, x: int) -> dict[str, Any]:
    try:
        await ctx.step(declined, x)
    except td.RemoteStepError as exc:
        return failure(exc)
    raise AssertionError("the step should have failed")


@app.workflow()
async def queued(ctx: td.Context, job: Job) -> str:
    return await ctx.step(exclusive, job)


@app.workflow()
async def mixed(ctx: td.Context, x: int) -> list[Any]:
    """One of each, in sequence: a replay passes every kind of checkpoint."""
    a = await ctx.step(square, x)
    b = await ctx.step(flaky, f"mixed-{x}")
    try:
        await ctx.step(declined, a)
    except td.RemoteStepError as exc:
        c = failure(exc)
    return [a, b, c, await ctx.all(double, [a, x], concurrency=1)]


def declined_failure(x: int) -> dict[str, Any]:
    return {
        "step": "declined",
        "message": f"declined {x}",
        "code": "card_declined",
        "details": {"x": x},
        "attempts": 1,
    }


# -- helpers ----------------------------------------------------------------------------


def faults_of(broker: Broker) -> td.BrokerFaults | None:
    """The injected faults of a memory broker (None for other brokers)."""
    return broker.faults if isinstance(broker, td.MemoryBroker) else None


def open_engine(
    broker: Broker, store: td.MemoryStore, route: str, seed: int
) -> AbstractAsyncContextManager[td.Engine]:
    return td.open_engine(
        app,
        store=store,
        broker=broker,
        serve=[route],
        worker_concurrency=WORKER_CONCURRENCY,
        engine_id="engine",
        seed=seed,
        wall_clock=fixed_wall,
    )


async def quiesce(engine: td.Engine, worker: td.Worker) -> None:
    """Wait until the engine drained while the separate worker is idle (its
    results, and so the writes they cause, are not the engine's to wait for)."""
    with trio.fail_after(EVENTUALLY):
        while True:
            await engine.drain()
            if not worker.busy:
                return
            await worker.wait_idle()


def final_settles(events: list[td.Event]) -> Counter[tuple[str, int]]:
    """How often each checkpoint was settled for good (a rescheduled attempt
    is a step.failed event with final=False)."""
    settled: Counter[tuple[str, int]] = Counter()
    for event in events:
        if event.kind == "step.completed" or (
            event.kind == "step.failed" and event.data.get("final")
        ):
            assert event.seq is not None
            settled[(event.run_id, event.seq)] += 1
    return settled


def peak_in_flight(events: list[td.Event], step: str) -> int:
    """The most checkpoints of ``step`` sent and not yet settled at once."""
    out: set[tuple[str, int]] = set()
    peak = 0
    for event in events:
        if event.name != step or event.seq is None:
            continue
        key = (event.run_id, event.seq)
        if event.kind == "step.started":
            out.add(key)
            peak = max(peak, len(out))
        elif event.kind in ("step.completed", "step.failed"):
            out.discard(key)
    return peak


def _require_autojump(factory: BrokerFactory) -> None:
    clock = trio.lowlevel.current_clock()
    if factory.trio_clock and not (
        isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold == 0
    ):
        raise RuntimeError(
            "a broker on Trio's clock (trio_clock=True) is checked under"
            " trio.testing.MockClock(autojump_threshold=0); this run's clock is"
            f" {clock!r}"
        )


# -- the suite --------------------------------------------------------------------------


async def check_a_mix_of_remote_workflows_settles_exactly_once(
    factory: BrokerFactory | BrokerMaker,
) -> None:
    """Single steps, a step retried after a failure, a step that fails for
    good, a fan of 200 in waves of 20, steps through a flow-control queue,
    and a workflow that does one of each, in a tenant's namespace on an
    engine with its embedded worker and a separate worker: every run ends
    with its result, every checkpoint is settled exactly once, the
    flow-control queue is never over its concurrency and gives every slot
    back, and nothing is written once the engine drained.

    Raises:
      RuntimeError: ``factory`` says the broker is on Trio's clock, and this
        run's clock is not an autojump `trio.testing.MockClock`.
    """
    global record
    factory = as_factory(factory)
    _require_autojump(factory)
    record = Record()
    try:
        await _mix(factory)
    finally:
        record = Record()


async def _mix(factory: BrokerFactory) -> None:
    on_trio_clock = factory.trio_clock
    namespace = f"c{_SESSION}-{next(_serial)}"
    route = f"math@{namespace}"
    seconds = QUEUED_SECONDS if on_trio_clock else 0.0

    def rid(name: str) -> str:
        return f"{namespace}.{name}"

    expected: dict[str, Any] = {}
    store = td.MemoryStore()
    # Times are asserted from here: a check run after others (as
    # `check_broker_engine` runs them, under one clock) starts later than 0.
    began = trio.current_time()

    def since_began(at: float) -> float:
        # Rounded to a microsecond: the differences of two large virtual
        # times keep a float's last bits.
        return round(at - began, 6)

    async with factory() as broker:
        faults = faults_of(broker)
        seed = faults.seed if faults is not None else 0
        async with (
            open_engine(broker, store, route, seed) as engine,
            td.open_worker(
                app,
                broker=broker,
                groups=[route],
                concurrency=WORKER_CONCURRENCY,
                instance_id=f"{namespace}.external",
                wall_clock=fixed_wall,
                seed=seed,
            ) as external,
        ):
            with engine.subscribe(buffer=math.inf) as receive:

                async def start(wf: Any, name: str, *args: Any, result: Any) -> None:
                    await engine.start(wf, *args, run_id=rid(name), namespace=namespace)
                    expected[rid(name)] = result

                await start(
                    fan, "fan", FAN_SIZE, FAN_CONCURRENCY, result=[2 * i for i in range(FAN_SIZE)]
                )
                for x in range(1, 6):
                    await start(single, f"single-{x}", x, result=x * x)
                for k in range(3):
                    await start(retried, f"retried-{k}", f"k{k}", result=f"ok:k{k}")
                for x in (7, 8):
                    await start(caught, f"caught-{x}", x, result=declined_failure(x))
                for i in range(QUEUED_RUNS):
                    await start(queued, f"queued-{i}", Job(f"q{i}", seconds), result=f"done:q{i}")
                for x in (3, 4):
                    await start(
                        mixed,
                        f"mixed-{x}",
                        x,
                        result=[
                            x * x,
                            f"ok:mixed-{x}",
                            declined_failure(x * x),
                            [2 * x * x, 2 * x],
                        ],
                    )

                with trio.fail_after(EVENTUALLY * 10):
                    outputs = {run_id: await engine.result(run_id) for run_id in expected}
                finished_at = trio.current_time()
                assert outputs == expected

                await quiesce(engine, external)
                events: list[td.Event] = []
                while True:
                    try:
                        events.append(receive.receive_nowait())
                    except trio.WouldBlock:
                        break
            assert engine.statistics().events_dropped == 0

            # Once drained, nothing is written: no duplicate, late result or
            # timer is left to settle (on Trio's clock, an hour passes).
            before = attrs.evolve(store.statistics())
            if on_trio_clock:
                await trio.sleep(3600)
            else:
                await settle(factory)
            assert store.statistics() == before
            external_stats = external.statistics()
        # Closing the engine and the worker writes nothing either.
        assert store.statistics() == before

        # -- every checkpoint, once --------------------------------------------------
        settled = final_settles(events)
        checkpoints: dict[tuple[str, int], td.Checkpoint] = {}
        for run_id in expected:
            run = await store.get_run(run_id)
            assert run is not None
            assert (run.status, run.lease_owner, run.wake_at) == ("completed", None, None)
            for cp in await store.get_checkpoints(run_id):
                checkpoints[(run_id, cp.seq)] = cp
        assert [key for key, cp in checkpoints.items() if cp.status == "pending"] == []
        assert all(cp.kind == "remote" and cp.group == route for cp in checkpoints.values())
        assert settled == Counter(dict.fromkeys(checkpoints, 1))
        assert len(checkpoints) == FAN_SIZE + 5 + 3 + 2 + QUEUED_RUNS + 2 * 5

        duplicates = faults is not None and faults.duplicate > 0
        for cp in checkpoints.values():
            if cp.name == "flaky":
                assert cp.status == "completed"
                [key] = json.loads(cp.input or "null")
                assert [e.message for e in cp.errors] == [f"first call for {key} fails"][
                    : cp.attempts - 1
                ]
                # A duplicate of the first attempt may succeed before the
                # retry is due; without duplicates the retry did it.
                assert cp.attempts == 2 or (duplicates and cp.attempts == 1)
            elif cp.name == "declined":
                assert (cp.status, cp.attempts) == ("failed", 1)
                assert cp.error is not None
                assert cp.error.code == "card_declined"
                # The final attempt's failure is listed with the others.
                assert [e.code for e in cp.errors] == ["card_declined"]
            else:
                assert (cp.status, cp.attempts, cp.errors, cp.error) == ("completed", 1, (), None)
        fan_members = [cp for (run_id, _), cp in checkpoints.items() if run_id == rid("fan")]
        assert [cp.parallel_size for cp in fan_members] == [FAN_SIZE] * FAN_SIZE

        # -- the flow-control queue -------------------------------------------------------
        assert peak_in_flight(events, "exclusive") <= QUEUE_CONCURRENCY
        if not duplicates:
            # A duplicated task runs outside its slot (at-least-once delivery);
            # otherwise no more steps run than the queue admits.
            assert record.queued_peak <= QUEUE_CONCURRENCY
        # Every slot was given back: the queue admits its full concurrency.
        probes = [
            td.Checkpoint(run_id="probe", seq=i, name="exclusive", kind="remote")
            for i in range(1, QUEUE_CONCURRENCY + 2)
        ]
        admitted = await store.apply(
            [
                *(PutCheckpoint(cp) for cp in probes),
                *(
                    AdmitToQueue(slots.name, "probe", cp.seq, 0, slots.concurrency, 0.0)
                    for cp in probes
                ),
            ]
        )
        assert admitted[len(probes) :] == [True] * QUEUE_CONCURRENCY + [False]

        # -- both workers took part -------------------------------------------------
        workers = Counter(
            event.data["worker"]
            for event in events
            if event.kind in ("step.completed", "step.failed")
        )
        assert set(workers) <= {"engine.worker", f"{namespace}.external"}
        assert external_stats.in_flight == 0
        if on_trio_clock:
            assert workers["engine.worker"] > 0
            assert workers[f"{namespace}.external"] > 0
        if isinstance(broker, td.MemoryBroker):
            assert broker.depth(RESULTS) == 0
            assert broker.depth(route) == 0

        # -- exact times, on Trio's clock ------------------------------------------------
        if on_trio_clock:
            started = {
                (e.run_id, e.seq, e.data["attempt"]): e.at
                for e in events
                if e.kind == "step.started"
            }
            retries = [e for e in events if e.kind == "step.failed" and not e.data.get("final")]
            if not duplicates:
                assert len(retries) == 3 + 2
            for e in retries:
                assert e.seq is not None
                second = started.get((e.run_id, e.seq, 2))
                if second is not None:
                    # Sent again the moment its backoff is over.
                    assert abs(second - e.at - BACKOFF) <= 1e-6, (second, e.at)
                else:
                    assert duplicates
            if faults is None or faults.delay == 0:
                # Delivery takes no time: six ten-second steps, two at a time.
                assert since_began(finished_at) == QUEUED_RUNS / QUEUE_CONCURRENCY * QUEUED_SECONDS
                queued_starts = sorted(since_began(at) for at in record.queued_starts)
                assert sorted(set(queued_starts)) == [0.0, 10.0, 20.0]
                if not duplicates:
                    assert queued_starts == [0.0, 0.0, 10.0, 10.0, 20.0, 20.0]
                    assert record.queued_peak == QUEUE_CONCURRENCY
                    for key in ("k0", "k1", "k2", "mixed-3", "mixed-4"):
                        assert len(record.flaky_times[key]) == 2
                        first, second_call = record.flaky_times[key]
                        assert abs(second_call - first - BACKOFF) <= 1e-6
