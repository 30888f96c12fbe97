"""What a workload drives a simulated fleet with (`Simulation`), and what a
simulation reports (`SimulationReport`).

Every call of a `Simulation` goes to a live engine picked from the seed and
is tried again on another one when the engine crashed under it or the store
failed on purpose, as a real client would. Calls that are not idempotent by
nature (a fork by id, a retry in place, a stream read) are made so here.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any, Final, Protocol, final

import attrs
import trio

from .._base._exceptions import (
    EngineClosedError,
    InvalidRunStateError,
    RunConflictError,
    StoreError,
    TrioDurableError,
)
from .._base._records import TERMINAL_STATUSES, Run
from .._features.deployments._deployments import Deployment
from .._front._app import Workflow
from .._front._engine import Engine
from .._stores._base import Store

WALL_START: Final = 1_700_000_000.0
"""The durable time at virtual time 0 of every simulation."""

_ATTEMPTS: Final = 200
_RETRIED: Final = (EngineClosedError, StoreError, trio.ClosedResourceError)


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


class WorkerHosting(Protocol):
    """How a workload adds workers of a build to the fleet and stops them
    (the harness hosts them, crashes them and brings them back as it does
    the fleet's own)."""

    def add_worker(self, build: str, groups: Sequence[str] | None) -> str:
        """Start a worker of ``build`` serving ``groups`` (None: all the
        fleet's workers serve); return its instance id."""
        ...

    def stop_worker(self, instance_id: str) -> None:
        """Stop a worker `add_worker` started, for good: it withdraws its
        announcement as a worker shut down does, and does not come back."""
        ...


class Simulation:
    """What a workload drives the fleet with.

    Every call goes to a live engine picked from the seed and is retried on
    another one when the engine crashed under it or the store failed on
    purpose, as a real client would.

    Attributes:
      rng: The workload's own seeded random source.
      ledger: Effects steps recorded, by key (count of executions).
      notes: Ordered logs steps appended to, by name.
      deployments: Each deployment `set_current_build` set, by workflow,
        with the virtual time the call began.
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
        # What the invariant of builds allows each run (`_build_checks`).
        self.deployments: dict[str, list[tuple[float, Deployment]]] = {}
        self._hosting: WorkerHosting | None = None

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
        returns the violations it found. The store it gets reads payloads
        as the engines do (decoded, with the simulation's codec)."""
        self.checks.append(check)

    async def call(self, fn: Callable[[Engine], Awaitable[Any]]) -> Any:
        """Call ``fn`` with a live engine, again on another one when the
        engine crashed under it or the store failed on purpose: ``fn`` must
        be idempotent (an entity call with a ``call_id``, an update with an
        ``update_id``, a query, a `create_schedule`)."""
        return await self._call(fn)

    def _engine_up(self, engine: Engine) -> None:
        self._engines[engine.engine_id] = engine
        self._changed.set()
        self._changed = trio.Event()

    def _engine_down(self, engine: Engine) -> None:
        self._engines.pop(engine.engine_id, None)

    async def _engine(self) -> Engine:
        while not self._engines:
            await self._changed.wait()
        return self._engines[self.rng.choice(sorted(self._engines))]

    async def _call(self, fn: Callable[[Engine], Awaitable[Any]]) -> Any:
        for _ in range(_ATTEMPTS):
            engine = await self._engine()
            try:
                return await fn(engine)
            except _RETRIED:
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

    async def retry(self, run_id: str, *, from_seq: int | None = None) -> None:
        """Wait until a run ends, then retry it: if it failed (or is dead),
        or, with ``from_seq``, in place from that seq whatever its end.

        Done once: a try that the store applied, then reported failed,
        changed the run, and no try follows it.
        """
        ended = await self.wait(run_id)
        if from_seq is None and ended.status not in ("failed", "dead"):
            return

        async def retry(engine: Engine) -> None:
            current = await engine.get(run_id)
            if (current.status, current.updated_at) != (ended.status, ended.updated_at):
                return  # an earlier try went through
            await engine.retry(run_id, from_seq=from_seq)

        await self._call(retry)

    async def fork(self, run_id: str, *, from_seq: int, new_run_id: str) -> str:
        """Fork a run from ``from_seq`` as ``new_run_id`` (idempotent by it:
        a try that the store applied, then reported failed, made the fork)."""

        async def fork(engine: Engine) -> None:
            with suppress(RunConflictError):
                await engine.fork(run_id, from_seq=from_seq, new_run_id=new_run_id)

        await self._call(fork)
        if new_run_id not in self.started:
            self.started.append(new_run_id)
        return new_run_id

    async def stream(self, run_id: str) -> list[tuple[int, Any]]:
        """Read a run's stream until the run ends: every ``(offset, value)``
        given, in order. A read cut off (its engine crashed, the store
        failed) goes on from one past the last offset given, on another
        engine, as a reader that lost its connection does."""
        given: list[tuple[int, Any]] = []
        for _ in range(_ATTEMPTS):
            engine = await self._engine()
            start = given[-1][0] + 1 if given else 0
            try:
                async for item in engine.stream(run_id, from_offset=start):
                    given.append(item)
                return given
            except _RETRIED:
                await trio.sleep(1.0)
        raise TrioDurableError(f"no engine read the stream in {_ATTEMPTS} attempts")

    async def set_current_build(
        self, workflow: str, build: str, *, ramp: float | None = None
    ) -> None:
        """Set ``workflow``'s current build (or ramp ``build`` to ``ramp``
        percent of its new runs), as `Engine.set_current_build` does; from
        the moment this is called, its runs may go to the builds it names."""
        since = trio.current_time()
        deployment: Deployment = await self._call(
            lambda e: e.set_current_build(workflow, build, ramp=ramp)
        )
        self.deployments.setdefault(workflow, []).append((since, deployment))

    async def add_workers(
        self, build: str, count: int = 1, *, groups: Sequence[str] | None = None
    ) -> list[str]:
        """Start ``count`` workers of ``build`` serving ``groups`` (by
        default every group the fleet's workers serve); return their
        instance ids. Faults crash them as they do the fleet's own, and
        they come back after a while, until `stop_workers`."""
        if self._hosting is None:
            raise TrioDurableError("this simulation hosts no workers of its own")
        added = [self._hosting.add_worker(build, groups) for _ in range(count)]
        await trio.lowlevel.checkpoint()
        return added

    async def stop_workers(self, instance_ids: Sequence[str]) -> None:
        """Stop workers `add_workers` started, for good, as a rollout
        switches an old build off."""
        if self._hosting is None:
            raise TrioDurableError("this simulation hosts no workers of its own")
        for instance_id in instance_ids:
            self._hosting.stop_worker(instance_id)
        await trio.lowlevel.checkpoint()

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
