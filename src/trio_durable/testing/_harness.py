"""The simulation harness: a whole fleet in one process, faults from a seed.

`simulate` runs several engines and workers on one shared `MemoryStore` and
one `MemoryBroker` under `trio.testing.MockClock(autojump_threshold=0)`, with
Trio's scheduling made to follow the seed (`_scheduling`; on a trio that
cannot, it warns and runs with Trio's own order). A workload drives runs through a
`Simulation`; meanwhile faults drawn from the seed hit the fleet. Afterwards
the invariants are checked and a report comes back with a hash of the event
trace: the same seed gives the same hash, so a failing seed replays exactly.

The fleet may run with a payload codec, message signing and a blob store,
as a production fleet does: then nothing may reach the store readable
(`_sealed`), no forged message may get through (`_forgery`), and every
blob a row refers to must be there (`_memory_blobs`). A workload may add
workers of a build and stop them, and set workflows' current builds: no
run's step or decision may then run on a build it is not allowed on
(`_build_checks`).
"""

from __future__ import annotations

import hashlib
import json
import random
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import trio
import trio.testing

from .._base._exceptions import StoreError, UsageError
from .._base._keyring import Keyring
from .._base._records import TERMINAL_STATUSES, Run
from .._brokers._memory import BrokerFaults, MemoryBroker
from .._front._app import App
from .._front._engine import Engine, crash
from .._front._open_worker import open_worker
from .._front._worker import crash as crash_worker
from .._payloads._blobs import DEFAULT_BLOB_GRACE, DEFAULT_BLOB_THRESHOLD
from .._payloads._codec import PayloadCodec
from .._process._open_engine import open_engine
from .._stores._base import Store
from .._stores._blob_store import BlobOptions
from .._stores._codec import check_codec, with_codec
from .._stores._memory import MemoryStore
from ._build_checks import BuildWatch, build_violations
from ._faults import Faults, FaultyStore
from ._forgery import ForgingBroker, forgery_violations
from ._memory_blobs import MemoryBlobStore, blob_violations
from ._scheduling import deterministic_scheduling
from ._sealed import SealedWrites
from ._simulation import WALL_START, Simulation, SimulationReport, Workload


@attrs.define(frozen=True, kw_only=True)
class _Setup:
    """How the fleet of one execution is made."""

    engines: int
    workers: int
    faults: Faults
    duration: float
    codec: PayloadCodec | None
    signing: Keyring | None
    blob_threshold: int | None


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
    codec: PayloadCodec | None = None,
    signing: Keyring | None = None,
    blob_threshold: int | None = None,
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
      codec: Every engine keeps payloads encoded with it (``open_engine``'s
        ``codec=``); then no payload may reach the store in the clear.
      signing: Every engine and worker signs and checks its messages with
        this ring (``signing=``); then forgeries (`Faults.forge`) are
        published, and none may get through.
      blob_threshold: Keep payloads longer than this many characters in a
        blob store in memory, made for each execution (``blobs=``); then
        every blob a row refers to must be there.

    Returns:
      The report; ``report.ok`` is whether every invariant held.

    Raises:
      UsageError: ``codec``, ``signing`` or ``blob_threshold`` is not what
        ``open_engine`` takes.

    Warns:
      UnseededSchedulingWarning: The installed trio cannot make its
        scheduling follow the seed; the simulation runs all the same.
    """
    if faults is None:
        faults = Faults.everything()
    check_codec(codec)
    if signing is not None and not isinstance(signing, Keyring):
        raise UsageError(f"signing= takes a td.Keyring or None, not {signing!r}")
    if blob_threshold is not None:
        BlobOptions.of(None, blob_threshold, DEFAULT_BLOB_GRACE)
    setup = _Setup(
        engines=engines,
        workers=workers,
        faults=faults,
        duration=duration,
        codec=codec,
        signing=signing,
        blob_threshold=blob_threshold,
    )
    if reference is None and faults != Faults.none():
        reference = simulate(
            app,
            workload,
            seed=seed,
            engines=1,
            workers=1,
            faults=Faults.none(),
            duration=duration,
            codec=codec,
            signing=signing,
            blob_threshold=blob_threshold,
        )
    with deterministic_scheduling(seed):
        return trio.run(
            _simulation,
            app,
            workload,
            seed,
            setup,
            reference,
            keep_trace,
            clock=trio.testing.MockClock(autojump_threshold=0),
        )


def _wall() -> float:
    return WALL_START + trio.current_time()


class _Fleet:
    """The engines and workers of one execution, coming and going as the
    faults say, and what they leave for the report."""

    def __init__(self, app: App, seed: int, setup: _Setup) -> None:
        self.app = app
        self.setup = setup
        faults = setup.faults
        rng = self.rng = random.Random(seed)
        # Workers serve the remote steps' groups and the remote workflows'.
        self.groups = sorted(
            {*app.groups, *(wf.decision_group for wf in app.workflows if wf.remote)}
        )
        self.blobs = MemoryBlobStore() if setup.blob_threshold is not None else None
        self.sealed = None if setup.codec is None else SealedWrites(setup.codec, self.blobs)
        self.store = FaultyStore(
            MemoryStore(),
            random.Random(rng.getrandbits(64)),
            faults,
            None if self.sealed is None else self.sealed.inspect,
        )
        self.memory_broker = MemoryBroker(
            BrokerFaults(
                duplicate=faults.duplicate,
                delay=faults.delay,
                reorder=faults.reorder,
                seed=rng.getrandbits(32),
            )
        )
        self.trace: list[str] = []
        self.builds = BuildWatch(self.trace)
        self.broker = ForgingBroker(
            self.memory_broker,
            setup.signing,
            faults.forge,
            random.Random(rng.getrandbits(64)),
            self.builds,
        )
        self.sim = Simulation(random.Random(rng.getrandbits(64)))
        self.sim._hosting = self
        self.injected: dict[str, int] = {}
        self.engine_scopes: dict[int, trio.CancelScope] = {}
        self.worker_scopes: dict[int, trio.CancelScope] = {}
        self.live_engines: dict[int, Engine] = {}
        self.live_workers: dict[int, Any] = {}
        # Workers the workload added (`Simulation.add_workers`): their
        # builds and groups by index, and those it stopped for good.
        self.added: dict[int, tuple[str, list[str]]] = {}
        self.retired: set[int] = set()
        self._hosts: trio.Nursery | None = None
        self.stopping = trio.Event()
        # What engines and workers raised (each error once).
        self.errors: list[str] = []

    def view(self) -> Store:
        """The store as the engines read it (blobs resolved, payloads
        decoded), without faults: what checks and outcomes read."""
        blobs = BlobOptions.of(
            self.blobs, self.setup.blob_threshold or DEFAULT_BLOB_THRESHOLD, DEFAULT_BLOB_GRACE
        )
        return with_codec(blobs.wrap(self.store.inner, _wall), self.setup.codec)

    def _options(self) -> dict[str, Any]:
        """What engines and workers share: signing and the blob store."""
        options: dict[str, Any] = {"signing": self.setup.signing}
        if self.blobs is not None:
            options["blobs"] = self.blobs
            options["blob_threshold"] = self.setup.blob_threshold
        return options

    @contextmanager
    def _reporting(self, who: str) -> Iterator[None]:
        """An engine, a worker or the workload that raises is reported, not
        fatal: the simulation goes on (an engine or worker comes back as
        after a crash), and the report keeps the seed."""
        try:
            yield
        except Exception as exc:
            for leaf in _leaves(exc):
                where = traceback.extract_tb(leaf.__traceback__)[-1:]
                at = f" (at {where[0].filename}:{where[0].lineno})" if where else ""
                error = f"{who} raised {type(leaf).__name__}: {leaf}{at}"
                if error not in self.errors:
                    self.errors.append(error)

    async def host_engine(self, index: int) -> None:
        rng, sim, trace = self.rng, self.sim, self.trace
        while not self.stopping.is_set():
            with self._reporting(f"engine-{index}"), trio.CancelScope() as scope:
                self.engine_scopes[index] = scope
                async with open_engine(
                    self.app,
                    store=self.store,
                    broker=self.broker,
                    engine_id=f"engine-{index}",
                    seed=rng.getrandbits(64),
                    wall_clock=_wall,
                    lease_ttl=30.0,
                    remote_redispatch=(120.0, 100),
                    blocked_recheck=5.0,
                    codec=self.setup.codec,
                    **self._options(),
                ) as engine:
                    self.live_engines[index] = engine
                    sim._engine_up(engine)
                    with engine.subscribe(buffer=float("inf")) as events:
                        async for event in events:
                            trace.append(
                                f"{event.at - WALL_START:.6f} {index} {event.kind} {event.run_id}"
                                f" {event.seq} {event.name}"
                            )
            if index in self.live_engines:
                sim._engine_down(self.live_engines.pop(index))
            if self.stopping.is_set():
                return
            await trio.sleep(rng.uniform(5.0, 60.0))

    async def host_worker(self, index: int) -> None:
        rng = self.rng
        while not self.stopping.is_set() and index not in self.retired:
            with self._reporting(f"worker-{index}"), trio.CancelScope() as scope:
                self.worker_scopes[index] = scope
                async with open_worker(
                    self.app,
                    broker=self.broker,
                    groups=self.added[index][1] if index in self.added else self.groups,
                    concurrency=8,
                    instance_id=f"worker-{index}",
                    wall_clock=_wall,
                    seed=rng.getrandbits(64),
                    build_id=self.added[index][0] if index in self.added else None,
                    **self._options(),
                ) as worker:
                    self.builds.worker_builds[worker.instance_id] = worker.build_id
                    self.live_workers[index] = worker
                    await trio.sleep_forever()
            self.live_workers.pop(index, None)
            if self.stopping.is_set() or index in self.retired:
                return
            await trio.sleep(rng.uniform(5.0, 60.0))

    def add_worker(self, build: str, groups: Sequence[str] | None) -> str:
        """`WorkerHosting.add_worker`: a worker of ``build``, hosted as the
        fleet's own are."""
        if self._hosts is None or not self.groups:
            raise UsageError("workers can be added while the workload runs, to an app with groups")
        served = self.groups if groups is None else sorted(groups)
        if not served or not set(served) <= set(self.groups):
            raise UsageError(f"a worker may serve some of {self.groups}, not {groups}")
        index = self.setup.workers + len(self.added)
        self.added[index] = (build, served)
        self._hosts.start_soon(self.host_worker, index, name=f"sim worker {index}")
        self.trace.append(f"{trio.current_time():.6f} worker-{index} of build {build} added")
        return f"worker-{index}"

    def stop_worker(self, instance_id: str) -> None:
        """`WorkerHosting.stop_worker`: cancelled, it withdraws its
        announcement as it leaves, and does not come back."""
        index = int(instance_id.removeprefix("worker-"))
        if index not in self.added:
            raise UsageError(f"{instance_id} is not a worker the workload added")
        self.retired.add(index)
        if index in self.worker_scopes:
            self.worker_scopes[index].cancel()
        self.trace.append(f"{trio.current_time():.6f} {instance_id} stopped")

    def count(self, kind: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1
        self.trace.append(f"{trio.current_time():.6f} fault {kind}")

    def _fault_times(self, count: int) -> list[float]:
        return sorted(self.rng.uniform(0, self.setup.duration) for _ in range(count))

    async def _amid(self, activity: Callable[[], trio.Event]) -> None:
        """Wait for the next piece of work (at most a minute), then for a
        random number of the scheduler's steps: a crash then lands in the
        middle of what follows it (most of a simulation is idle time, and a
        crash in it cuts nothing short)."""
        with trio.move_on_after(60.0):
            await activity().wait()
        for _ in range(self.rng.randrange(40)):
            await trio.lowlevel.checkpoint()

    async def crash_engines(self) -> None:
        for at in self._fault_times(self.setup.faults.engine_crashes):
            await trio.sleep_until(at)
            await self._amid(lambda: self.store.wrote)
            alive = sorted(self.live_engines)
            if not alive:
                continue
            index = self.rng.choice(alive)
            # Down from this moment: the fleet must not count it live (nor
            # drain it) while its block is still unwinding (seed 3921).
            engine = self.live_engines.pop(index)
            self.sim._engine_down(engine)
            crash(engine)
            self.engine_scopes[index].cancel()
            self.count("engine.crash")

    async def crash_workers(self) -> None:
        for at in self._fault_times(self.setup.faults.worker_crashes):
            await trio.sleep_until(at)
            await self._amid(lambda: self.broker.task_sent)
            alive = sorted(self.live_workers)
            busy = [i for i in alive if self.live_workers[i].statistics().in_flight]
            alive = busy or alive
            if not alive:
                continue
            index = self.rng.choice(alive)
            crash_worker(self.live_workers.pop(index))
            self.worker_scopes[index].cancel()
            self.count("worker.crash")

    async def jump_clock(self) -> None:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        for at in self._fault_times(self.setup.faults.clock_jumps):
            await trio.sleep_until(at)
            clock.jump(self.rng.uniform(30.0, 600.0))
            self.count("clock.jump")

    async def run(self, workload: Workload) -> list[str]:
        """Run the workload on the fleet, let it finish, close it; return
        what went wrong on the way."""
        setup, sim, store = self.setup, self.sim, self.store
        violations: list[str] = []
        async with trio.open_nursery() as nursery:
            self._hosts = nursery
            for index in range(setup.engines):
                nursery.start_soon(self.host_engine, index, name=f"sim engine {index}")
            for index in range(setup.workers if self.groups else 0):
                nursery.start_soon(self.host_worker, index, name=f"sim worker {index}")
            async with trio.open_nursery() as chaos:
                chaos.start_soon(self.crash_engines)
                chaos.start_soon(self.crash_workers)
                chaos.start_soon(self.jump_clock)
                with self._reporting("the workload"):
                    await workload(sim)
                # Let the runs end: faults stop after `duration`.
                with trio.move_on_after(max(setup.duration * 4, 86_400.0)):
                    await _until_settled(store, sim)
                chaos.cancel_scope.cancel()
            store.armed = False
            # Bring every engine back and let the fleet finish what is left.
            await _until_all_up(self.live_engines, setup.engines)
            with trio.move_on_after(86_400.0):
                await _until_settled(store, sim)
            for engine in list(self.live_engines.values()):
                await engine.drain()
            for engine in list(self.live_engines.values()):
                await engine.drain()
            ops = store.statistics().ops
            await trio.testing.wait_all_tasks_blocked()
            if store.statistics().ops != ops:
                violations.append("the store changed after drain()")
            self.stopping.set()
            self._hosts = None
            for scope in [*self.engine_scopes.values(), *self.worker_scopes.values()]:
                scope.cancel()
        leftovers = [
            task.name
            for nursery_ in trio.lowlevel.current_task().child_nurseries
            for task in nursery_.child_tasks
        ]
        if leftovers:
            violations.append(f"tasks alive after the fleet closed: {leftovers}")
        return violations

    async def at_rest(self) -> list[str]:
        """The invariants of what the fleet leaves behind: secrets, forgeries
        and blobs."""
        violations = list(self.errors)
        if self.sealed is not None:
            violations.extend(self.sealed.violations)
        if self.setup.signing is not None:
            violations.extend(self.broker.violations)
            try:
                violations.extend(await forgery_violations(self.view()))
            except StoreError as exc:
                violations.append(f"the forgery check raised {type(exc).__name__}: {exc}")
        if self.blobs is not None:
            violations.extend(await blob_violations(self.blobs, self.store.inner))
        return violations

    def faults(self) -> dict[str, int]:
        """How many faults of each kind were injected."""
        injected = dict(self.injected)
        for kind in self.store.injected:
            injected[kind] = injected.get(kind, 0) + 1
        # Broker faults are counted by the broker, not traced.
        broker = self.memory_broker
        for kind, times in (
            ("broker.duplicate", broker.duplicated),
            ("broker.delay", broker.delayed),
            ("broker.reorder", broker.reordered),
            ("broker.forge", self.broker.forged),
        ):
            if times:
                injected[kind] = times
        return dict(sorted(injected.items()))


async def _simulation(
    app: App,
    workload: Workload,
    seed: int,
    setup: _Setup,
    reference: SimulationReport | None,
    keep_trace: bool,
) -> SimulationReport:
    fleet = _Fleet(app, seed, setup)
    sim = fleet.sim
    violations = await fleet.run(workload)
    view = fleet.view()
    outputs: dict[str, tuple[str, Any]] = {}
    statuses: dict[str, int] = {}
    # Statuses from the rows as stored (no payload layer reads them), each
    # outcome through the layers: a row they cannot read is a violation.
    for run in await fleet.store.inner.list_runs(limit=1_000_000):
        statuses[run.status] = statuses.get(run.status, 0) + 1
        if run.parent_id is None:
            try:
                read = await view.get_run(run.id)
            except StoreError as exc:
                violations.append(f"run {run.id} cannot be read: {type(exc).__name__}: {exc}")
            else:
                outputs[run.id] = _outcome(run if read is None else read)
        allowed = run.id in sim.may_stay_suspended or run.parent_id in sim.may_stay_suspended
        if run.status not in TERMINAL_STATUSES and not allowed:
            violations.append(f"run {run.id} did not end: {run.status}")
    for check in sim.checks:
        with fleet._reporting("a check of the workload's"):
            violations.extend(await check(view))
    violations.extend(await build_violations(view, fleet.builds, sim.deployments, app, WALL_START))
    violations.extend(await fleet.at_rest())
    store = fleet.store
    for (run_id, seq), settles in sorted(store.settles.items(), key=lambda kv: str(kv[0])):
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
    digest = hashlib.sha256("\n".join(fleet.trace).encode()).hexdigest()[:16]
    return SimulationReport(
        seed=seed,
        statuses=dict(sorted(statuses.items())),
        outputs=outputs,
        faults=fleet.faults(),
        simulated_time=trio.current_time(),
        trace_hash=digest,
        violations=tuple(violations),
        ledger=dict(sorted(sim.ledger.items())),
        trace=tuple(fleet.trace) if keep_trace else (),
    )


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds (an exception alone: itself)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


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
