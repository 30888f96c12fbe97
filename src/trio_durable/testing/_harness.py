"""The simulation harness: a whole fleet in one process, faults from a seed.

`simulate` runs several engines and workers on one shared `MemoryStore` and
one `MemoryBroker` under `trio.testing.MockClock(autojump_threshold=0)`, with
Trio's scheduling made to follow the seed. A workload drives runs through a
`Simulation`; meanwhile faults drawn from the seed hit the fleet. Afterwards
the invariants are checked and a report comes back with a hash of the event
trace: the same seed gives the same hash, so a failing seed replays exactly.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, Final, final

import attrs
import trio
import trio.testing

from .._app import App, Workflow
from .._brokers._memory import BrokerFaults, MemoryBroker
from .._engine import Engine, crash
from .._exceptions import EngineClosedError, InvalidRunStateError, StoreError, TrioDurableError
from .._open_engine import open_engine
from .._open_worker import open_worker
from .._records import TERMINAL_STATUSES, Run
from .._stores._base import Store
from .._stores._memory import MemoryStore
from .._worker import crash as crash_worker
from ._faults import Faults, FaultyStore

WALL_START: Final = 1_700_000_000.0
_ATTEMPTS: Final = 200


@final
@attrs.define(frozen=True, kw_only=True)
class SimulationReport:
    """What a simulation did and found.

    Attributes:
      seed: The seed.
      statuses: How many runs ended in each status (non-terminal included).
      outputs: Each run's status and output (or error code), by run id.
      faults: How many faults of each kind were injected.
      simulated_time: Virtual seconds the simulation covered.
      trace_hash: A hash of the event trace (same seed, same hash).
      violations: Invariants that did not hold (empty when all is well).
      ledger: How often each effect recorded by a step ran, by key.
      trace: The event trace, if asked for.
    """

    seed: int
    statuses: dict[str, int]
    outputs: dict[str, tuple[str, Any]]
    faults: dict[str, int]
    simulated_time: float
    trace_hash: str
    violations: tuple[str, ...]
    ledger: dict[str, int] = attrs.field(factory=dict)
    trace: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether every invariant held."""
        return not self.violations


Check = Callable[[Store], Awaitable[list[str]]]


class Simulation:
    """What a workload drives the fleet with.

    Every call goes to a live engine picked from the seed and is retried on
    another one when the engine crashed under it or the store failed on
    purpose, as a real client would.

    Attributes:
      rng: The workload's own seeded random source.
      ledger: Effects steps recorded, by key (count of executions).
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ledger: dict[str, int] = {}
        self._engines: dict[str, Engine] = {}
        self._changed = trio.Event()
        self.started: list[str] = []
        self.may_stay_suspended: set[str] = set()
        self.may_differ: set[str] = set()
        self.may_skip_effects: set[str] = set()
        self.notes: dict[str, list[str]] = {}
        self.checks: list[Check] = []

    def record(self, key: str) -> int:
        """Record one execution of an effect; return how many ran so far."""
        self.ledger[key] = self.ledger.get(key, 0) + 1
        return self.ledger[key]

    def note(self, log: str, entry: str) -> None:
        """Append ``entry`` to the ordered log ``log``: what steps saw, in
        the order it happened (every execution, re-executions included)."""
        self.notes.setdefault(log, []).append(entry)

    def check(self, check: Check) -> None:
        """Add an invariant of the workload's own: ``check(store)`` is
        awaited once the fleet has drained (the store no longer fails), and
        returns the violations it found."""
        self.checks.append(check)

    async def call(self, fn: Callable[[Engine], Awaitable[Any]]) -> Any:
        """Call ``fn`` with a live engine, again on another one when the
        engine crashed under it or the store failed on purpose: ``fn`` must
        be idempotent (an entity call with a ``call_id``, say)."""
        return await self._call(fn)

    def _engine_up(self, engine: Engine) -> None:
        self._engines[engine.engine_id] = engine
        self._changed.set()
        self._changed = trio.Event()

    def _engine_down(self, engine: Engine) -> None:
        self._engines.pop(engine.engine_id, None)

    async def _call(self, fn: Callable[[Engine], Awaitable[Any]]) -> Any:
        for _ in range(_ATTEMPTS):
            while not self._engines:
                await self._changed.wait()
            engine = self._engines[self.rng.choice(sorted(self._engines))]
            try:
                return await fn(engine)
            except (EngineClosedError, StoreError, trio.ClosedResourceError):
                await trio.sleep(1.0)
        raise TrioDurableError(f"no engine took the call in {_ATTEMPTS} attempts")

    async def start(self, workflow: Workflow[..., Any] | str, *args: Any, run_id: str) -> str:
        """Start a run (idempotent by ``run_id``)."""
        await self._call(lambda e: e.start(workflow, *args, run_id=run_id))
        if run_id not in self.started:
            self.started.append(run_id)
        return run_id

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send a signal (a run that ended meanwhile took an earlier try of
        it: the store failed on purpose after applying it)."""
        with suppress(InvalidRunStateError):
            await self._call(lambda e: e.signal(run_id, name, payload))

    async def cancel(self, run_id: str, *, compensate: bool = False) -> None:
        """Cancel a run, if it has not ended; its outcome may then differ from
        the reference execution's."""
        self.may_differ.add(run_id)

        async def cancel(engine: Engine) -> None:
            run = await engine.get(run_id)
            if run.status not in TERMINAL_STATUSES:
                await engine.cancel(run_id, compensate=compensate)

        with suppress(TrioDurableError):
            await self._call(cancel)

    async def wait(self, run_id: str) -> Run:
        """Wait until a run ends."""
        while True:
            run: Run = await self._call(lambda e: e.get(run_id))
            if run.status in TERMINAL_STATUSES:
                return run
            await trio.sleep(5.0)

    async def retry(self, run_id: str) -> None:
        """Wait until a run ends, then retry it if it failed."""
        run = await self.wait(run_id)
        if run.status in ("failed", "dead"):

            async def retry(engine: Engine) -> None:
                current = await engine.get(run_id)
                if current.status in ("failed", "dead"):
                    await engine.retry(run_id)

            await self._call(retry)

    def may_skip(self, *keys: str) -> None:
        """Declare ledger effects that may never run under faults: those of a
        run the workload cancels, which faults can delay until the
        cancellation lands before its first step."""
        self.may_skip_effects.update(keys)

    def stays_suspended(self, run_id: str) -> None:
        """Declare that a run may end the simulation suspended (it waits on a
        signal the workload never sends)."""
        self.may_stay_suspended.add(run_id)

    async def sleep(self, seconds: float) -> None:
        """Let virtual time pass."""
        await trio.sleep(seconds)


Workload = Callable[[Simulation], Awaitable[None]]


@contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Make Trio's scheduling order follow ``seed`` (a private switch of
    Trio's, pinned by the trio version the project requires)."""
    from trio._core import _run

    previous = _run._ALLOW_DETERMINISTIC_SCHEDULING
    state = _run._r.getstate()
    _run._ALLOW_DETERMINISTIC_SCHEDULING = True  # type: ignore[misc]
    _run._r.seed(seed)
    try:
        yield
    finally:
        _run._ALLOW_DETERMINISTIC_SCHEDULING = previous  # type: ignore[misc]
        _run._r.setstate(state)


def simulate(
    app: App,
    workload: Workload,
    *,
    seed: int,
    engines: int = 2,
    workers: int = 2,
    faults: Faults | None = None,
    duration: float = 3600.0,
    reference: SimulationReport | None = None,
    keep_trace: bool = False,
) -> SimulationReport:
    """Run ``workload`` on a simulated fleet and check the invariants.

    Args:
      app: The workflows and steps.
      workload: An ``async def (sim: Simulation)`` that starts and drives
        runs.
      seed: Every choice (faults, engine picks, scheduling, ids) follows it.
      engines: How many engines share the store.
      workers: How many workers serve the app's groups.
      faults: What to inject (`Faults.everything()` by default).
      duration: Virtual seconds during which faults are injected; the runs
        may take longer to end.
      reference: The report of a fault-free execution of the same workload;
        computed with one engine and one worker if not given.
      keep_trace: Keep the full event trace in the report.

    Returns:
      The report; ``report.ok`` is whether every invariant held.
    """
    if faults is None:
        faults = Faults.everything()
    if reference is None and faults != Faults.none():
        reference = simulate(
            app, workload, seed=seed, engines=1, workers=1, faults=Faults.none(), duration=duration
        )
    with deterministic_scheduling(seed):
        return trio.run(
            _simulation,
            app,
            workload,
            seed,
            engines,
            workers,
            faults,
            duration,
            reference,
            keep_trace,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )


async def _simulation(
    app: App,
    workload: Workload,
    seed: int,
    engine_count: int,
    worker_count: int,
    faults: Faults,
    duration: float,
    reference: SimulationReport | None,
    keep_trace: bool,
) -> SimulationReport:
    rng = random.Random(seed)
    # Workers serve the remote steps' groups and the remote workflows'.
    groups = sorted({*app.groups, *(wf.decision_group for wf in app.workflows if wf.remote)})
    store = FaultyStore(MemoryStore(), random.Random(rng.getrandbits(64)), faults)
    broker = MemoryBroker(
        BrokerFaults(
            duplicate=faults.duplicate,
            delay=faults.delay,
            reorder=faults.reorder,
            seed=rng.getrandbits(32),
        )
    )
    sim = Simulation(random.Random(rng.getrandbits(64)))
    trace: list[str] = []
    injected: dict[str, int] = {}
    violations: list[str] = []

    def wall() -> float:
        return WALL_START + trio.current_time()

    engine_scopes: dict[int, trio.CancelScope] = {}
    worker_scopes: dict[int, trio.CancelScope] = {}
    live_engines: dict[int, Engine] = {}
    live_workers: dict[int, Any] = {}
    stopping = trio.Event()

    async def host_engine(index: int) -> None:
        generation = 0
        while not stopping.is_set():
            generation += 1
            with trio.CancelScope() as scope:
                engine_scopes[index] = scope
                async with open_engine(
                    app,
                    store=store,
                    broker=broker,
                    engine_id=f"engine-{index}",
                    seed=rng.getrandbits(64),
                    wall_clock=wall,
                    lease_ttl=30.0,
                    remote_redispatch=(120.0, 100),
                    blocked_recheck=5.0,
                ) as engine:
                    live_engines[index] = engine
                    sim._engine_up(engine)
                    with engine.subscribe(buffer=float("inf")) as events:
                        async for event in events:
                            trace.append(
                                f"{event.at - WALL_START:.6f} {index} {event.kind} {event.run_id}"
                                f" {event.seq} {event.name}"
                            )
            live_engines.pop(index, None)
            if stopping.is_set():
                return
            await trio.sleep(rng.uniform(5.0, 60.0))

    async def host_worker(index: int) -> None:
        while not stopping.is_set():
            with trio.CancelScope() as scope:
                worker_scopes[index] = scope
                async with open_worker(
                    app,
                    broker=broker,
                    groups=groups,
                    concurrency=8,
                    instance_id=f"worker-{index}",
                    wall_clock=wall,
                    seed=rng.getrandbits(64),
                ) as worker:
                    live_workers[index] = worker
                    await trio.sleep_forever()
            live_workers.pop(index, None)
            if stopping.is_set():
                return
            await trio.sleep(rng.uniform(5.0, 60.0))

    def count(kind: str) -> None:
        injected[kind] = injected.get(kind, 0) + 1
        trace.append(f"{trio.current_time():.6f} fault {kind}")

    async def crash_engines() -> None:
        for at in sorted(rng.uniform(0, duration) for _ in range(faults.engine_crashes)):
            await trio.sleep_until(at)
            alive = sorted(live_engines)
            if len(alive) < 1:
                continue
            index = rng.choice(alive)
            # Down from this moment: the fleet must not count it live (nor
            # drain it) while its block is still unwinding (seed 3921).
            engine = live_engines.pop(index)
            sim._engine_down(engine)
            crash(engine)
            engine_scopes[index].cancel()
            count("engine.crash")

    async def crash_workers() -> None:
        for at in sorted(rng.uniform(0, duration) for _ in range(faults.worker_crashes)):
            await trio.sleep_until(at)
            alive = sorted(live_workers)
            if not alive:
                continue
            index = rng.choice(alive)
            crash_worker(live_workers.pop(index))
            worker_scopes[index].cancel()
            count("worker.crash")

    async def jump_clock() -> None:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        for at in sorted(rng.uniform(0, duration) for _ in range(faults.clock_jumps)):
            await trio.sleep_until(at)
            clock.jump(rng.uniform(30.0, 600.0))
            count("clock.jump")

    async with trio.open_nursery() as nursery:
        for index in range(engine_count):
            nursery.start_soon(host_engine, index, name=f"sim engine {index}")
        for index in range(worker_count if groups else 0):
            nursery.start_soon(host_worker, index, name=f"sim worker {index}")
        async with trio.open_nursery() as chaos:
            chaos.start_soon(crash_engines)
            chaos.start_soon(crash_workers)
            chaos.start_soon(jump_clock)
            await workload(sim)
            # Let the runs end: faults stop after `duration`.
            with trio.move_on_after(max(duration * 4, 86_400.0)):
                await _until_settled(store, sim)
            chaos.cancel_scope.cancel()
        store.armed = False
        # Bring every engine back and let the fleet finish what is left.
        await _until_all_up(live_engines, engine_count)
        with trio.move_on_after(86_400.0):
            await _until_settled(store, sim)
        for engine in list(live_engines.values()):
            await engine.drain()
        for engine in list(live_engines.values()):
            await engine.drain()
        ops = store.statistics().ops
        await trio.testing.wait_all_tasks_blocked()
        if store.statistics().ops != ops:
            violations.append("the store changed after drain()")
        stopping.set()
        for scope in [*engine_scopes.values(), *worker_scopes.values()]:
            scope.cancel()
    leftovers = [
        task.name
        for nursery_ in trio.lowlevel.current_task().child_nurseries
        for task in nursery_.child_tasks
    ]
    if leftovers:
        violations.append(f"tasks alive after the fleet closed: {leftovers}")

    outputs: dict[str, tuple[str, Any]] = {}
    statuses: dict[str, int] = {}
    for run in await store.list_runs(limit=1_000_000):
        statuses[run.status] = statuses.get(run.status, 0) + 1
        if run.parent_id is None:
            outputs[run.id] = _outcome(run)
        allowed = run.id in sim.may_stay_suspended or run.parent_id in sim.may_stay_suspended
        if run.status not in TERMINAL_STATUSES and not allowed:
            violations.append(f"run {run.id} did not end: {run.status}")
    for check in sim.checks:
        violations.extend(await check(store.inner))
    for (run_id, seq), settles in sorted(store.settles.items()):
        if settles > 1 + store.resets.get((run_id, seq), 0):
            violations.append(f"checkpoint {run_id}@{seq} settled {settles} times")
    if reference is not None:
        for run_id, outcome in sorted(outputs.items()):
            if run_id in sim.may_differ or run_id not in reference.outputs:
                continue
            if reference.outputs[run_id] != outcome:
                violations.append(
                    f"run {run_id} ended {outcome},"
                    f" the fault-free execution {reference.outputs[run_id]}"
                )
        # Every effect the fault-free execution had ran here too (maybe more
        # than once: steps run at least once).
        for key in sorted(set(reference.ledger) - set(sim.ledger) - sim.may_skip_effects):
            violations.append(f"the effect {key!r} never ran")
    for kind in store.injected:
        injected[kind] = injected.get(kind, 0) + 1
    # Broker faults are counted by the broker, not traced.
    for kind, times in (
        ("broker.duplicate", broker.duplicated),
        ("broker.delay", broker.delayed),
        ("broker.reorder", broker.reordered),
    ):
        if times:
            injected[kind] = times
    digest = hashlib.sha256("\n".join(trace).encode()).hexdigest()[:16]
    return SimulationReport(
        seed=seed,
        statuses=dict(sorted(statuses.items())),
        outputs=outputs,
        faults=dict(sorted(injected.items())),
        simulated_time=trio.current_time(),
        trace_hash=digest,
        violations=tuple(violations),
        ledger=dict(sorted(sim.ledger.items())),
        trace=tuple(trace) if keep_trace else (),
    )


def _outcome(run: Run) -> tuple[str, Any]:
    if run.status == "completed":
        return ("completed", json.loads(run.output) if run.output else None)
    return (run.status, run.error.code if run.error else None)


async def _until_settled(store: FaultyStore, sim: Simulation) -> None:
    while True:
        runs = await store.inner.list_runs(limit=1_000_000)
        open_runs = [
            r
            for r in runs
            if r.status not in TERMINAL_STATUSES
            and r.id not in sim.may_stay_suspended
            and (r.parent_id is None or r.parent_id not in sim.may_stay_suspended)
        ]
        if not open_runs:
            return
        await trio.sleep(10.0)


async def _until_all_up(live: dict[int, Engine], count: int) -> None:
    # Crashed engines come back after their downtime (at most a minute).
    while len(live) < count:  # noqa: ASYNC110 (polls a dict the hosts fill)
        await trio.sleep(1.0)
