"""The engine: starts runs, drives their turns, and owns every background
effect in one nursery.

A run executes in turns. A turn leases the run, reads its checkpoints,
replays the body (see `_context`) until it completes, fails, or reaches a
durable wait, and then writes everything it did in one atomic batch, which
also releases the lease. Effects that must follow a write (starting the
children it created, waking a parent, waking the run again for a signal that
was already buffered) happen only after that batch committed.

Wakes of one run coalesce: while a turn of it is in flight, further wakes
only ask for one more turn after it. The due-run poller picks up timers, runs
whose lease lapsed (their engine died) and runs started by engines that went
away, in shuffled batches.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Any, Concatenate, Final, final, overload

import attrs
import trio

from . import _serde
from ._app import A1, A2, A3, A4, A5, App, P, R, Workflow, workflow_of
from ._barrier import join_barrier
from ._brokers import open_broker
from ._brokers._base import (
    RESULTS,
    Broker,
    BrokerError,
    Outgoing,
    PayloadTooLarge,
    WorkerDescriptor,
)
from ._children import cancel_request, completion, output_type
from ._clock import Clock
from ._context import Context
from ._exceptions import (
    EngineClosedError,
    InvalidRunStateError,
    InvalidURLError,
    LeaseLostError,
    NonDeterminismError,
    RecordedTraceback,
    RunCancelled,
    RunConflictError,
    RunFailed,
    RunNotFoundError,
    StoreError,
    UsageError,
)
from ._failures import error_info
from ._fleet import Fleet, aggregate
from ._handle import RunHandle
from ._handoff import UnservedRoute, follow_handoff, hand_off, output_source, routes_in_doubt
from ._handoff import unserved_on_error_routes as _unserved
from ._observe import DEFAULT_EVENT_BUFFER, Event, EventHub, EventKind, Metrics
from ._options import DEFAULT_TIMER_BATCH_SIZE, EngineOptions, check_id
from ._payload import lowered, task_message
from ._poller import poll_due, reconcile_stalled
from ._records import (
    ACTIVE_STATUSES,
    DEFAULT_NAMESPACE,
    DEFAULT_TRACEBACK_LIMIT,
    TERMINAL_STATUSES,
    CheckpointStatus,
    ErrorInfo,
    Run,
    RunStatus,
    signal_token,
)
from ._remote import let_in_meanwhile
from ._replay import Suspend, TurnState
from ._routing import (
    RETIRED_PREFIX,
    active_handoff,
    pick_route,
)
from ._saga import compensate, plan_retry
from ._sent import SentTasks
from ._settle import consume_results
from ._stores import open_store
from ._stores._base import (
    ChangeFeed,
    Op,
    ReleaseRun,
    RemoveSignalWaiter,
    SettleCheckpoint,
    Store,
    UpdateRun,
    WaitSignal,
    WriteConflict,
)
from ._wire import Task
from ._worker import Worker, check_routes, open_worker, task_queue

logger = logging.getLogger("trio_durable")

WRITE_CHUNK: Final = 200
DISPATCH_CHUNK: Final = 1000
_RETRYABLE: Final[frozenset[RunStatus]] = frozenset({"failed", "dead"})
_PENDING: Final[tuple[CheckpointStatus, ...]] = ("pending",)
_CANCELLING: Final[frozenset[RunStatus]] = frozenset({"cancelling"})
_RUNNING: Final[frozenset[RunStatus]] = frozenset({"running"})
# What the write that ends a run expects it to be. A run taken over too often
# is dead whether or not it was told to cancel (expecting it running would
# loop its turns on a write conflict).
_END_EXPECTS: Final[dict[RunStatus, frozenset[RunStatus]]] = {
    "cancelled": _CANCELLING,
    "dead": frozenset({"running", "cancelling"}),
}
_UNKNOWN_VERSION_BACKOFF: Final = 60.0
_TURN_RETRIES: Final = 5
_TURN_RETRY_DELAY: Final = 1.0


@final
@attrs.define(kw_only=True)
class EngineStatistics:
    """Counters an engine keeps.

    Attributes:
      turns: Turns executed.
      runs_active: Runs with a turn in flight or queued now.
      events_dropped: Events lost because a subscriber fell behind.
      reconciled: Stalled runs (a lost wake-up) the reconcile pass woke.
      rejected: Result messages rejected because they did not decode into
        a valid, in-range result (see docs/brokers.md); each was dropped,
        or dead-lettered where the broker keeps a dead-letter queue.
    """

    turns: int = 0
    runs_active: int = 0
    events_dropped: int = 0
    reconciled: int = 0
    rejected: int = 0


@attrs.define(eq=False)
class _Ending:
    """Callers of `Engine.result` waiting for a run this engine may end."""

    event: trio.Event = attrs.field(factory=trio.Event)
    run: Run | None = None


@attrs.define(eq=False)
class _Slot:
    """One run's place in the engine while a turn of it is queued or running."""

    again: bool = False
    body_scope: trio.CancelScope | None = None
    # The first turn of a run this engine just created (and leased) starts
    # from what it wrote, instead of reading it back.
    initial: TurnState | None = None


class Engine:
    """Executes runs of an `App`'s workflows on a store.

    Made by `open_engine`; all its background work lives in the nursery that
    `open_engine` owns.

    Attributes:
      app: The application.
      store: The store.
      broker: The broker remote steps travel through.
      engine_id: This engine's id, the owner of the leases it takes.
      clock: Its `Clock`.
      rng: Its seeded random source (ids, jitter, shuffles).
    """

    def __init__(
        self,
        app: App,
        store: Store,
        nursery: trio.Nursery,
        *,
        engine_id: str,
        rng: random.Random,
        clock: Clock,
        timer_batch_size: int,
        lease_ttl: float,
        reconcile_interval: float,
        result_poll_interval: float,
        max_recoveries: int,
        broker: Broker,
        remote_redispatch: tuple[float, int] | None,
        blocked_recheck: float,
        traceback_limit: int = DEFAULT_TRACEBACK_LIMIT,
    ) -> None:
        self.app = app
        self.traceback_limit = traceback_limit
        self.store = store
        self.broker = broker
        self.remote_redispatch = remote_redispatch
        self.blocked_recheck = blocked_recheck
        self._descriptor_cache: dict[str, tuple[float, list[WorkerDescriptor]]] = {}
        self._settling = 0
        # The turn whose last write raised StoreError, by run: it may have been
        # applied, and `_repair` redoes what its effects would have done.
        self._failed_writes: dict[str, TurnState] = {}
        scope = getattr(store, "scope", None)
        # Engines sharing a store share a results queue; engines of other
        # stores on the same broker must never take each other's results.
        self.results_queue = RESULTS if not isinstance(scope, str) else f"{RESULTS}.{scope}"
        self._worker: Worker | None = None
        # The queues the embedded worker consumes: tasks sent there are
        # this engine's own to wait for (see `_sent`).
        self._served: frozenset[str] = frozenset()
        self._sent = SentTasks(self.results_queue)
        self._draining = 0
        self.engine_id = engine_id
        self.rng = rng
        self.clock = clock
        self._nursery = nursery
        self._timer_batch_size = timer_batch_size
        self._lease_ttl = lease_ttl
        self._reconcile_interval = reconcile_interval
        self._result_poll_interval = result_poll_interval
        self._max_recoveries = max_recoveries
        self._active: dict[str, _Slot] = {}
        self._idle = trio.Event()
        self._idle.set()
        self._poke = trio.Event()
        self._poller_pass = trio.Event()
        self._progress = trio.Event()
        self._poller_deadline = math.inf
        self._ended: dict[str, _Ending] = {}
        self._hub = EventHub()
        self._metrics = Metrics()
        self._stats = EngineStatistics()
        self._closed = False
        # Set with `_closed`: a drain waiting elsewhere wakes, since the
        # events it waits on may never fire once the nursery is cancelled.
        self._closing = trio.Event()
        self._crashed = False
        self._cut_off: list[str] = []

    # -- public API -----------------------------------------------------------

    @overload
    async def start(
        self,
        workflow: Workflow[[], R],
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1], R],
        a1: A1,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        *,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: Workflow[Concatenate[A1, A2, A3, A4, A5, P], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[R]: ...

    @overload
    async def start(
        self,
        workflow: str,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[Any]: ...

    async def start(
        self,
        workflow: Workflow[..., Any] | str,
        /,
        *args: Any,
        run_id: str | None = None,
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
    ) -> RunHandle[Any]:
        """Start a run of ``workflow`` with positional ``args``.

        Idempotent by ``run_id``: if a run with that id exists in
        ``namespace``, it is returned and nothing is written. Run ids are
        unique across the whole store, not per namespace: an id that a run
        of another namespace holds is refused.

        Calls are typed: a type checker checks ``args`` against the
        workflow's parameters (for up to four of them; past that the first
        five), and the handle's `RunHandle.result` returns the workflow's
        return type.

        Args:
          workflow: A registered workflow, or its name (then the version
            registered last).
          *args: The inputs, JSON-able values or attrs instances.
          run_id: The run's id; without it the engine derives one from its
            seeded random source.
          namespace: The tenant the run belongs to.
          tags: Labels stored on the run.

        Returns:
          A `RunHandle`: the run as stored, whose ``result()`` waits for its
          output.

        Raises:
          UnknownWorkflowError: The workflow is not registered.
          InvalidArgumentsError: ``args`` do not fit the workflow's
            parameters (their count, or an input's declared type).
          SerializationError: An input cannot be serialized.
          RunConflictError: ``run_id`` belongs to a run of another workflow,
            or to a run of another namespace (the error says nothing of
            that run).
          UsageError: ``run_id``, ``namespace`` or ``tags`` are malformed.
        """
        return RunHandle.of(await self._start(workflow, args, run_id, namespace, tags), self)

    async def _start(
        self,
        workflow: Workflow[..., Any] | str,
        args: tuple[Any, ...],
        run_id: str | None,
        namespace: str,
        tags: tuple[str, ...] | list[str],
    ) -> Run:
        self._check_open()
        wf = workflow_of(self.app, workflow)
        input_json = _serde.check_workflow_args(wf, args)
        generated = run_id is None
        if run_id is None:
            run_id = f"{wf.name}-{self.rng.getrandbits(64):016x}"
        check_id("run_id", run_id)
        check_id("namespace", namespace)
        tag_tuple = tuple(tags)
        if not all(isinstance(tag, str) for tag in tag_tuple):
            raise UsageError(f"tags must be strings, not {tags!r}")
        existing = await self.store.get_run(run_id)
        while generated and existing is not None:
            # A derived id must name a new run: with a fixed seed, an engine
            # restarted on the same store derives the same ids again.
            run_id = f"{wf.name}-{self.rng.getrandbits(64):016x}"
            existing = await self.store.get_run(run_id)
        if existing is not None:
            return self._same_workflow(existing, wf, namespace)
        now = self.clock.now()
        # The run is created leased to this engine, so its first turn needs no
        # write of its own; if this engine dies, the lease lapses and any
        # engine takes the run over.
        run = Run(
            id=run_id,
            workflow=wf.name,
            version=wf.version,
            namespace=namespace,
            status="running",
            input=input_json,
            tags=tag_tuple,
            lease_owner=self.engine_id,
            lease_expiry=now + self._lease_ttl,
            created_at=now,
            updated_at=now,
        )
        stored, created = await self.store.create_run(run)
        if not created:
            return self._same_workflow(stored, wf, namespace)
        self._emit_run("run.started", stored)
        self._wake(run_id, initial=TurnState(run=stored, checkpoints={}))
        return stored

    @staticmethod
    def _same_workflow(run: Run, wf: Workflow[..., Any], namespace: str) -> Run:
        if run.namespace != namespace:
            # Checked first, and told without a word of the other run: a
            # tenant learns that the id is taken, nothing more.
            raise RunConflictError(
                f"run id {run.id!r} is taken by a run outside namespace {namespace!r}"
            )
        if run.workflow != wf.name:
            raise RunConflictError(
                f"run id {run.id!r} belongs to a run of workflow {run.workflow!r}, not {wf.name!r}"
            )
        return run

    async def get(self, run_id: str, *, namespace: str | None = None) -> Run:
        """The run as stored now.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: ``namespace`` is malformed.
        """
        self._check_open()
        if namespace is not None:
            check_id("namespace", namespace)
        run = await self.store.get_run(run_id)
        if run is None:
            raise RunNotFoundError(f"no run {run_id!r}")
        if namespace is not None and run.namespace != namespace:
            # Worded as for a missing run: another tenant's run stays unseen.
            raise RunNotFoundError(f"no run {run_id!r} in namespace {namespace!r}")
        return run

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        """Wait until the run ends and return its output.

        The output is structured as the workflow's return annotation or,
        for a run handed to an on-error handler, as the handler's.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          RunFailed: The run failed or is dead (`RunCancelled` if cancelled);
            the error's message, code and details are the exception's.
        """
        while True:
            if isinstance(self.store, ChangeFeed):
                run = await self.get(run_id, namespace=namespace)
                if run.status in TERMINAL_STATUSES:
                    return await self._outcome(run)
                # Every writer shares this process: wait for the change itself.
                await self.store.run_end_event(run_id).wait()
                continue
            # Registered before the read: a run that this engine ends while
            # the read is in flight still sets it (registered after, the end
            # would go unseen until the next poll).
            ending = self._ended.setdefault(run_id, _Ending())
            try:
                run = await self.get(run_id, namespace=namespace)
            except BaseException:
                self._forget_ending(run_id, ending)
                raise
            if run.status in TERMINAL_STATUSES:
                self._forget_ending(run_id, ending)
                return await self._outcome(run)
            with trio.move_on_after(self._result_poll_interval):
                await ending.event.wait()
            if ending.run is not None:
                # Ended by this engine, which knows the row it wrote.
                return await self._outcome(ending.run)

    def _forget_ending(self, run_id: str, ending: _Ending) -> None:
        """Drop a registration nobody will set (the run ended elsewhere, or
        does not exist); its other waiters wake and read the row too."""
        if not ending.event.is_set() and self._ended.get(run_id) is ending:
            del self._ended[run_id]
            ending.event.set()

    async def _outcome(self, run: Run) -> Any:
        if run.status == "completed":
            # A run that handed off ended with its handler's output.
            source = await output_source(self, run) or (run.workflow, run.version)
            return _serde.loads(run.output, output_type(self.app, *source))
        error = run.error or ErrorInfo(message=run.status)
        cls = RunCancelled if run.status == "cancelled" else RunFailed
        failure = cls(
            run.id,
            error.message,
            error.code,
            error.details,
            step=error.step,
            traceback=error.traceback,
        )
        if error.traceback is None:
            raise failure
        raise failure from RecordedTraceback(error.traceback)

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, namespace: str | None = None
    ) -> None:
        """Send the signal ``name`` with ``payload`` to a run.

        If the run is waiting for it, the run resumes; otherwise the signal is
        buffered for its next wait of that name and never lost.

        Args:
          run_id: The run's id.
          name: The signal's name.
          payload: Its payload (a JSON-able value or an attrs instance).
          namespace: If given, a run of another namespace counts as missing
            (and nothing is buffered for it).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run already ended.
          SerializationError: The payload cannot be serialized.
        """
        self._check_open()
        if not isinstance(name, str) or not name:
            raise UsageError(f"signal name must be a non-empty string, not {name!r}")
        payload_json = _serde.dumps(payload)
        run = await self.get(run_id, namespace=namespace)
        if run.status in TERMINAL_STATUSES:
            raise InvalidRunStateError(f"run {run_id!r} is {run.status}; it takes no signals")
        waiter = await self.store.deliver_signal(
            signal_token(run_id, name), payload_json, self.clock.now()
        )
        if waiter is not None:
            self._wake(run_id)

    async def cancel(
        self, run_id: str, *, compensate: bool = False, namespace: str | None = None
    ) -> None:
        """Cancel a run, and the children it awaits.

        The run's turn in flight, if any, is interrupted; it is then marked
        ``cancelling`` and ends ``cancelled``.

        Args:
          run_id: The run's id.
          compensate: Run the undos of its completed steps first, in reverse
            order.
          namespace: If given, a run of another namespace counts as missing
            (and is left alone).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run already ended.
        """
        self._check_open()
        run = await self.get(run_id, namespace=namespace)
        if run.status in TERMINAL_STATUSES:
            raise InvalidRunStateError(f"run {run_id!r} is {run.status}; it cannot be cancelled")
        try:
            await self.store.apply([attrs.evolve(self.cancel_op(run_id, compensate), strict=True)])
        except WriteConflict as exc:
            raise InvalidRunStateError(
                f"run {run_id!r} ended before it could be cancelled"
            ) from exc
        self._interrupt(run_id)
        self._wake(run_id)

    def _interrupt(self, run_id: str) -> None:
        """Cut short the body of a run's turn in flight (it was just told to
        cancel), so it runs no further steps; its next turn ends it."""
        slot = self._active.get(run_id)
        if slot is not None and slot.body_scope is not None:
            slot.body_scope.cancel()

    def cancel_op(self, run_id: str, compensate: bool) -> UpdateRun:
        """The write that asks a run to cancel (skipped if it already ended)."""
        return cancel_request(run_id, compensate, self.clock.now())

    async def retry(self, run_id: str, *, namespace: str | None = None) -> Run:
        """Run a failed or dead run's body again from its checkpoints.

        Completed steps are not run again (but for steps whose undo already
        ran, which run again); failed steps, timed-out signal waits and
        compensations are reset; a failed awaited child (or fan member) is
        retried under its same id, so the parent picks up its new outcome.
        A retried child that was cancelled gets back its signal waits, and
        sends again the remote steps whose results the cancel dropped.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing
            (and is left alone).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run is not failed or dead; nothing changed.
        """
        self._check_open()
        run = await self.get(run_id, namespace=namespace)
        if run.status not in ("failed", "dead"):
            raise InvalidRunStateError(
                f"run {run_id!r} is {run.status}; only failed or dead runs can be retried"
            )
        ops: list[Op] = []
        wakes: list[str] = []
        await plan_retry(self, run, ops, wakes, _RETRYABLE)
        try:
            await self.store.apply(ops)
        except WriteConflict as exc:
            raise InvalidRunStateError(f"run {run_id!r} changed while being retried") from exc
        for wake in wakes:
            self._wake(wake)
        return await self.get(run_id)

    async def drain(self) -> None:
        """Wait until this engine has nothing left to do now.

        Returns at the first moment when all of these hold together:

        - no turn of a run is running or queued here (starting a child,
          rechecking a join barrier and resuming a run after a result are
          turns too);
        - the result consumer is settling no batch;
        - every task this engine sent to a queue its embedded worker
          consumes (``serve=``) has had its outcome learned: a result for it
          was settled here (or by another engine of this process), or its
          checkpoint or run was decided otherwise. Until then it counts
          wherever it is: on the broker, on a worker (the embedded one or
          another), or as a result on its way back, whatever the broker;
        - the embedded worker has no task in flight;
        - if the broker can tell (`Broker.quiet`; the memory broker can),
          neither the results queue nor the embedded worker's queues hold a
          message (a duplicate, a result a separate worker sent);
        - the store lists no run as due now (a timer that came due, a lapsed
          lease): drain then asks the poller for a pass and waits for it.

        Each of these is bookkeeping with an event; drain sleeps on no
        timer, so under a `trio.testing.MockClock` it returns at the exact
        virtual time the last of them ends, and afterwards this engine
        writes nothing until it is given work, a timer comes due or a
        result comes from outside.

        Drain does not wait for what only the world outside this engine
        ends: timers not yet due, signals, children running on another
        engine, steps sent to groups it does not serve (a separate worker
        runs them, or none does yet; a result of theirs that reached the
        engine is settled first), and steps parked as ``blocked`` or
        waiting for a flow-control slot (they wait on a timer). With
        engines in other processes sharing the store and the results queue,
        a result of a step it sent may be settled there; it learns that at
        its next reconcile pass (``reconcile_interval``), so drain returns
        late then, but it returns.

        Raises:
          EngineClosedError: The engine is closed, or closed while waiting.
        """
        self._check_open()
        self._draining += 1
        try:
            while True:
                if await self._wait_for_an_effect():
                    self._check_open()
                    continue
                due = await self.store.list_due_runs(self.clock.now(), 1)
                self._check_open()
                if self._has_effects():
                    continue
                if not due:
                    return
                # Something is due that the poller has not picked up yet.
                passed = self._poller_pass = trio.Event()
                self._poke.set()
                await passed.wait()
        finally:
            self._draining -= 1

    def _consumed_queues(self) -> tuple[str, ...]:
        return (self.results_queue, *(self._worker.queues if self._worker is not None else ()))

    def _has_effects(self) -> bool:
        """Whether something drain waits for is outstanding now."""
        if self._busy() or self._sent.count:
            return True
        if self._worker is not None and self._worker.busy:
            return True
        quiet = self.broker.quiet(self._consumed_queues())
        if quiet is None or quiet.is_set():
            return False
        quiet.set()  # nobody waits on it: let the broker forget it
        return True

    async def _wait_for_an_effect(self) -> bool:
        """Wait for one kind of outstanding effect to end (or the engine to
        close); False at once if none is outstanding. (Others may have
        started meanwhile: the caller looks again.)"""
        quiet: trio.Event | None = None
        if self._busy():
            wait = self._idle.wait
        elif self._sent.count:
            wait = self._sent.wait_none
        elif self._worker is not None and self._worker.busy:
            wait = self._worker.wait_idle
        else:
            quiet = self.broker.quiet(self._consumed_queues())
            if quiet is None or quiet.is_set():
                return False
            wait = quiet.wait
        try:
            async with trio.open_nursery() as race:

                async def first(wait: Callable[[], Awaitable[object]]) -> None:
                    await wait()
                    race.cancel_scope.cancel()

                race.start_soon(first, wait)
                race.start_soon(first, self._closing.wait)
        finally:
            if quiet is not None:
                quiet.set()  # spent: the broker may forget it
        return True

    async def _recheck_sent(self) -> None:
        """Read the store for the tasks still counted as sent (`_sent`): an
        engine in another process may have settled them, or ended their run,
        without this engine taking part."""
        for run_id in self._sent.runs():
            as_of = self._sent.attempts_of(run_id)
            if not as_of:
                continue
            run = await self.store.get_run(run_id)
            if run is None or run.status in TERMINAL_STATUSES:
                if self._sent.attempts_of(run_id) == as_of:
                    self._sent.run_ended(run_id)
                continue
            first, last = min(as_of), max(as_of)
            found = await self.store.get_checkpoints(run_id, first, last)
            self._sent.observed(run_id, found, range(first, last + 1), as_of=as_of)

    @contextmanager
    def subscribe(
        self, buffer: float = DEFAULT_EVENT_BUFFER
    ) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        """Receive this engine's events while the ``with`` block lasts.

        Args:
          buffer: How many events may wait unread; past that, new events are
            dropped for this subscriber (and counted in `statistics`).
        """
        with self._hub.subscribe(buffer) as receive:
            yield receive

    def metrics(self) -> str:
        """Counters in the Prometheus text exposition format (the embedded
        worker's, if any, included)."""
        if self._worker is not None:
            return self._metrics.render(self._worker._metrics)
        return self._metrics.render()

    def statistics(self) -> EngineStatistics:
        """A snapshot of this engine's counters."""
        self._stats.runs_active = len(self._active)
        self._stats.events_dropped = self._hub.dropped
        return attrs.evolve(self._stats)

    # -- scheduling -----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise EngineClosedError("the engine is closed")

    def _busy(self) -> bool:
        return bool(self._active) or self._settling > 0

    def _check_idle(self) -> None:
        if self._busy():
            if self._idle.is_set():
                self._idle = trio.Event()
        else:
            self._idle.set()

    async def _dispatch(self, tasks: list[Task]) -> None:
        """Send tasks whose pending checkpoints just committed. A task over
        the broker's ``max_payload`` is not sent: a failure of code
        ``payload_too_large`` goes to the results queue in its place, and
        settles its step like a worker's result would (see `_payload`)."""
        for start in range(0, len(tasks), DISPATCH_CHUNK):
            chunk = tasks[start : start + DISPATCH_CHUNK]
            limit = self.broker.max_payload
            outgoing, own = self._task_messages(chunk, limit)
            delay = 0.05
            for attempt in range(8):
                try:
                    await self.broker.dispatch(outgoing)
                    break
                except PayloadTooLarge as exc:
                    # The broker's limit fell below what it said (it reconnected
                    # to another server): fit the chunk to it and send again.
                    limit = lowered(limit, exc)
                    self._unsend(own)
                    outgoing, own = self._task_messages(chunk, limit)
                except BrokerError as exc:
                    if attempt == 7:
                        # The checkpoints stay pending; remote_redispatch (if
                        # enabled) sends them again when they count as lost.
                        logger.error("could not dispatch %d tasks: %s", len(chunk), exc)
                        self._unsend(own)
                        break
                    logger.warning("dispatch failed (%s); retrying", exc)
                    await trio.sleep(delay * self.rng.uniform(0.5, 1.5))
                    delay = min(delay * 2, 5.0)
            else:
                logger.error(
                    "could not dispatch %d tasks: the broker kept refusing their size", len(chunk)
                )
                self._unsend(own)

    def _task_messages(
        self, tasks: Sequence[Task], limit: int | None
    ) -> tuple[list[Outgoing], list[Task]]:
        """The messages that send ``tasks`` (each task, or the failure that
        stands in for one over ``limit`` bytes), and the tasks among them
        whose results this engine settles itself: those its own worker takes,
        and those whose stand-in goes to its results queue. These are counted
        as sent before the send, since a result may be settled before the
        send returns."""
        now = self.clock.now()
        messages: list[Outgoing] = []
        own: list[Task] = []
        for task in tasks:
            message = task_message(
                attrs.evolve(task, reply_to=self.results_queue),
                task_queue(task.route, self._requires(task.step)),
                limit,
                now,
            )
            if message is None:
                continue
            messages.append(message)
            if message.queue in self._served or message.queue == self.results_queue:
                self._sent.add(task.run_id, task.seq, task.attempt)
                own.append(task)
        return messages, own

    def _unsend(self, tasks: list[Task]) -> None:
        """Stop counting tasks whose send did not happen."""
        for task in tasks:
            self._sent.unsent(task.run_id, task.seq, task.attempt)

    def _requires(self, step_name: str) -> tuple[str, ...]:
        step = self.app.get_step(step_name)
        return () if step is None else step.requires

    async def capability_gap(self, route: str, requires: tuple[str, ...]) -> str | None:
        """Why no live worker of ``route`` can run a step that ``requires``
        these capabilities, or None if one can (or nothing is required)."""
        if not requires:
            return None
        now = trio.current_time()
        cached = self._descriptor_cache.get(route)
        if cached is None or now - cached[0] >= min(1.0, self.blocked_recheck / 2):
            try:
                descriptors = await self.broker.worker_descriptors(route)
            except BrokerError as exc:
                return f"cannot read worker announcements: {exc}"
            cached = self._descriptor_cache[route] = (now, descriptors)
        needed = set(requires)
        if any(needed <= set(d.capabilities) for d in cached[1]):
            return None
        return f"blocked: no live worker of group {route!r} offers {', '.join(sorted(needed))}"

    async def fleet(self) -> Fleet:
        """What live workers announce, aggregated per workflow, with their
        disagreements (a rollout in progress, or a misconfigured worker)."""
        return aggregate(await self.broker.worker_descriptors())

    async def _repair(self, run_id: str, turn: TurnState | None) -> None:
        """After a turn's write raised StoreError, do what its effects would
        have done if it was applied anyway (the database may commit a write
        whose answer is lost): send the tasks whose checkpoints are now
        recorded as sent, wake the children it created, and wake the parent a
        final write settled. Each of these is harmless if the write did not
        apply: a task is sent only if its checkpoint says so, and a wake only
        costs a turn."""
        if turn is None:
            return
        tasks: list[Task] = []
        for _, task in turn.dispatch:
            found = await self.store.get_checkpoints(run_id, task.seq, task.seq)
            cp = found[0] if found else None
            if (
                cp is not None
                and cp.status == "pending"
                and cp.attempts == task.attempt
                and cp.started_at is not None
            ):
                tasks.append(task)
        if tasks:
            await self._dispatch(tasks)
        for child in turn.wake_after:
            self._wake(child)
        run = await self.store.get_run(run_id)
        if (
            run is not None
            and run.done
            and run.parent_id is not None
            and run.parent_seq is not None
        ):
            found = await self.store.get_checkpoints(run.parent_id, run.parent_seq, run.parent_seq)
            settled = found[0] if found else None
            if settled is not None and settled.status != "pending":
                for parent in await join_barrier(self.store, [settled]):
                    self._wake(parent)
        if run is not None and run.done:
            self._sent.run_ended(run_id)
            ending = self._ended.pop(run_id, None)
            if ending is not None:
                ending.event.set()

    def _wake(self, run_id: str, *, initial: TurnState | None = None) -> None:
        if self._closed:
            return
        slot = self._active.get(run_id)
        if slot is not None:
            slot.again = True
            return
        self._active[run_id] = _Slot(initial=initial)
        if self._idle.is_set():
            self._idle = trio.Event()
        self._nursery.start_soon(self._drive, run_id, name=f"trio_durable turn {run_id}")

    async def _drive(self, run_id: str) -> None:
        slot = self._active[run_id]
        failures = 0
        try:
            while True:
                slot.again = False
                try:
                    await self._turn(run_id, slot)
                    failures = 0
                except trio.ClosedResourceError:
                    return
                except StoreError as exc:
                    # The write may have been applied or not: repair what its
                    # effects would have done, then run the turn again. After
                    # repeated failures, give up: the lease lapses and the
                    # poller (here or on another engine) resumes the run.
                    logger.warning("turn of run %r failed on the store: %s", run_id, exc)
                    failures += 1
                    if failures > _TURN_RETRIES:
                        return
                    await trio.sleep(_TURN_RETRY_DELAY * failures)
                    try:
                        await self._repair(run_id, self._failed_writes.pop(run_id, None))
                    except StoreError as again:
                        logger.warning("repair of run %r failed: %s", run_id, again)
                    slot.again = True
                self._stats.turns += 1
                if not slot.again:
                    return
        except BaseException:
            # Cut off: by the engine closing, or by a KeyboardInterrupt or
            # SystemExit out of a body or step, which closes it too. The
            # lease this turn may hold is given back once everything here
            # has stopped, so another engine resumes the run at once.
            self._cut_off.append(run_id)
            raise
        finally:
            del self._active[run_id]
            # The poller may be waiting for this turn to end before it looks
            # at the run again (it came due while the turn held it).
            self._progress.set()
            self._check_idle()

    # -- one turn -------------------------------------------------------------

    async def _turn(self, run_id: str, slot: _Slot) -> None:
        now = self.clock.now()
        if slot.initial is not None:
            turn, slot.initial = slot.initial, None
            run = turn.run
        else:
            state = await self.store.begin_turn(run_id, self.engine_id, now + self._lease_ttl, now)
            self._progress.set()
            if state is None:
                return
            run = state.run
            turn = TurnState(run=run, checkpoints={cp.seq: cp for cp in state.checkpoints})
            # Read under the lease: settled elsewhere means no result is
            # waited for here (it went to another engine, or got lost).
            self._sent.observed(run_id, state.checkpoints)
        if run.recoveries > self._max_recoveries:
            error = ErrorInfo(
                message=f"run was taken over {run.recoveries} times from engines that died",
                code="dead",
            )
            await self._end(turn, "dead", error=error)
            return
        if run.status == "cancelling":
            await self._finish_cancel(turn)
            return
        handoff = active_handoff(turn.checkpoints)
        if handoff is not None:
            await follow_handoff(self, turn, handoff)
            return
        if not self.app.has_workflow(run.workflow, run.version):
            # Another engine of a newer or older deploy may know it: leave the
            # run untouched but for a later wake.
            logger.warning(
                "run %r needs workflow %r version %r, which this engine lacks",
                run_id,
                run.workflow,
                run.version,
            )
            await self._write(
                turn,
                UpdateRun(
                    run.id,
                    {
                        "status": "suspended",
                        "wake_at": now + _UNKNOWN_VERSION_BACKOFF,
                        "lease_owner": None,
                        "lease_expiry": None,
                    },
                    expect_status=frozenset({"running"}),
                    expect_owner=self.engine_id,
                ),
            )
            return
        wf = self.app.get_workflow(run.workflow, run.version)
        ctx = Context(self, turn)
        outcome: tuple[str, Any] = ("interrupted", None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._renew_lease, run.id, slot)
            with trio.CancelScope() as slot.body_scope:
                outcome = await self._run_body(wf, ctx, run)
            slot.body_scope = None
            nursery.cancel_scope.cancel()
        kind, value = outcome
        if kind == "store_error":
            raise value
        if kind == "interrupted":
            # cancel() interrupted the body (or the lease was lost): let the
            # next turn see the cancellation. Keep the steps the body did
            # complete, since a cancel with compensation must undo them too;
            # the lease fences that write, so a lost lease writes nothing.
            slot.again = True
            if turn.ops and turn.nondeterminism is None:
                results = await self._write(turn, self._fence(run, {}, ACTIVE_STATUSES))
                if results is not None:
                    await self._after_commit(turn, results)
            else:
                await self.store.release_run_lock(run.id, self.engine_id)
        elif kind == "suspended":
            await self._suspend(turn, value)
        elif kind == "completed":
            await self._end(turn, "completed", output=value)
        else:
            await self._fail(turn, ctx, value, wf)

    async def _run_body(self, wf: Workflow[..., Any], ctx: Context, run: Run) -> tuple[str, Any]:
        try:
            args = _serde.load_args(run.input, wf.fn, skip=1)
            value = await wf.fn(ctx, *args)
            if ctx._turn.nondeterminism is not None:
                return ("failed", ctx._turn.nondeterminism)
            output = _serde.dumps(value)
        except Suspend as suspend:
            if ctx._turn.nondeterminism is not None:
                return ("failed", ctx._turn.nondeterminism)
            return ("suspended", suspend)
        except StoreError as exc:
            # A durable operation's own write failed: that is no failure of
            # the run; the turn is abandoned and run again.
            return ("store_error", exc)
        except Exception as exc:
            if ctx._turn.nondeterminism is not None:
                return ("failed", ctx._turn.nondeterminism)
            return ("failed", exc)
        return ("completed", output)

    async def _renew_lease(self, run_id: str, slot: _Slot) -> None:
        while True:
            await trio.sleep(self._lease_ttl / 3)
            now = self.clock.now()
            try:
                held = await self.store.try_lock_run(
                    run_id, self.engine_id, now + self._lease_ttl, now
                )
            except StoreError as exc:
                logger.warning("could not renew the lease of run %r: %s", run_id, exc)
                continue
            if not held:
                # Another engine took the run over: this turn must write nothing.
                logger.warning("lost the lease of run %r; abandoning its turn", run_id)
                if slot.body_scope is not None:
                    slot.body_scope.cancel()
                return

    def _fence(self, run: Run, changes: dict[str, Any], expect: frozenset[Any]) -> UpdateRun:
        changes = {
            **changes,
            "lease_owner": None,
            "lease_expiry": None,
            "updated_at": self.clock.now(),
        }
        return UpdateRun(run.id, changes, expect_status=expect, expect_owner=self.engine_id)

    async def _write(self, turn: TurnState, *final_ops: Op) -> list[Any] | None:
        """Commit the turn's writes; None if the run changed under it.

        If a cancel moved the run to ``cancelling`` meanwhile, the turn's
        writes are committed without ``final_ops`` (and their effects
        follow), and None is returned: a step that ran is always recorded.

        A turn that records a wide fan writes its checkpoints in chunks of
        `WRITE_CHUNK`, each fenced by the lease, before the final write that
        suspends the run: a database transaction stays bounded, and every
        member is durable before any of its tasks is sent.
        """
        ops = turn.ops
        results: list[Any] = []
        try:
            try:
                start = 0
                while len(ops) - start > WRITE_CHUNK:
                    fence = UpdateRun(turn.run.id, {}, expect_owner=self.engine_id)
                    results.extend(
                        (await self.store.apply([*ops[start : start + WRITE_CHUNK], fence]))[:-1]
                    )
                    start += WRITE_CHUNK
                try:
                    results.extend(await self.store.apply([*ops[start:], *final_ops]))
                    return results
                except WriteConflict:
                    # A cancel() moved the run to cancelling while the turn ran
                    # (on another engine, or here after the body's last step,
                    # where no interrupt reaches it). The steps this turn
                    # completed did run: record them all the same, so that the
                    # cancel undoes them, in one write fenced by the lease
                    # that leaves the run for the next turn to end.
                    kept = await self.store.apply(
                        [*ops[start:], self._fence(turn.run, {}, _CANCELLING)]
                    )
                    results.extend(kept[:-1])
            except StoreError as exc:
                if not isinstance(exc, LeaseLostError | WriteConflict):
                    self._failed_writes[turn.run.id] = turn
                # Chunks that did commit recorded their members as sent, so no
                # later turn sends them: send them now, or a fan waits forever.
                committed = [
                    task
                    for index, task in turn.dispatch
                    if index < len(results) and results[index] is not False
                ]
                if committed:
                    await self._dispatch(committed)
                raise
        except LeaseLostError:
            logger.warning("run %r was taken over; dropping its turn", turn.run.id)
            return None
        except WriteConflict:
            # Typically a cancel() landed during the turn: run another turn,
            # which sees the new status.
            self._active[turn.run.id].again = True
            return None
        self._active[turn.run.id].again = True
        await self._after_commit(turn, results)
        return None

    async def _suspend(self, turn: TurnState, suspend: Suspend) -> None:
        run = turn.run
        wake_at = suspend.wake_at
        results = await self._write(
            turn,
            self._fence(run, {"status": "suspended", "wake_at": wake_at}, frozenset({"running"})),
        )
        if results is None:
            return
        await self._after_commit(turn, results)
        if any(
            isinstance(op, WaitSignal) and result is not None
            for op, result in zip(turn.ops, results, strict=False)
        ):
            # A buffered signal was handed over by the same write.
            self._active[run.id].again = True
        self._emit_run("run.suspended", run, wake_at=wake_at)
        if wake_at is not None and wake_at < self._poller_deadline:
            self._poke.set()
        if suspend.watch is not None:
            # A remote result or a child's end that settled the last pending
            # checkpoint while this turn held the lease woke nobody (the
            # engine that settled it could not take the run): look once
            # more, now that the lease is given back.
            first, last = suspend.watch
            pending = await self.store.count_checkpoints(run.id, first, last, _PENDING, limit=1)
            if not pending:
                self._active[run.id].again = True
        if suspend.admission is not None and await let_in_meanwhile(
            self.store, run.id, suspend.admission
        ):
            self._active[run.id].again = True

    async def _fail(
        self, turn: TurnState, ctx: Context, exc: BaseException, wf: Workflow[..., Any]
    ) -> None:
        error = error_info(exc, traceback_limit=self.traceback_limit)
        if not isinstance(exc, NonDeterminismError):
            await self._compensate(turn, ctx)
        route = pick_route(wf.on_error, error)
        if route is not None:
            reason = await routes_in_doubt(self, wf.name)
            if reason is None:
                logger.warning(
                    "run %r (workflow %r) failed%s: %s; handing it to %r",
                    turn.run.id,
                    turn.run.workflow,
                    "" if error.step is None else f" in step {error.step!r}",
                    error.message,
                    route.workflow,
                )
                await hand_off(self, turn, route, error)
                return
            self._emit_run("run.unrouted", turn.run, code=error.code, reason=reason)
        await self._end(turn, "failed", error=error)

    async def unserved_on_error_routes(self) -> list[UnservedRoute]:
        """Routes whose handler workflow is neither registered on this engine
        nor known to any live worker: likely a typo in a handler's name."""
        return await _unserved(self)

    async def _compensate(self, turn: TurnState, ctx: Context) -> None:
        """Run the saga's undos, renewing the lease meanwhile: undos and their
        retries may outlast it, and a lapsed lease would let another engine
        take the run over and run the same undos again."""
        failure: StoreError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._renew_lease, turn.run.id, self._active[turn.run.id])
            try:
                await compensate(self, turn, ctx)
            except StoreError as exc:
                # Raised after the nursery, so it is not wrapped in a group.
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _end(
        self,
        turn: TurnState,
        status: RunStatus,
        *,
        output: str | None = None,
        error: ErrorInfo | None = None,
        returned_by: tuple[str, str] | None = None,
    ) -> None:
        run = turn.run
        expect = _END_EXPECTS.get(status, _RUNNING)
        ops: list[Op] = [
            self._fence(
                run,
                {"status": status, "output": output, "error": error, "wake_at": None},
                expect,
            )
        ]
        if run.parent_id is not None and run.parent_seq is not None:
            ops.append(
                SettleCheckpoint(
                    run.parent_id,
                    run.parent_seq,
                    "completed" if status == "completed" else "failed",
                    completion(status == "completed", output, error, returned_by=returned_by),
                    error,
                    self.clock.now(),
                )
            )
        results = await self._write(turn, *ops)
        if results is None:
            return
        self._sent.run_ended(run.id)
        await self._after_commit(turn, results)
        if status in ("failed", "dead") and error is not None:
            _log_failed_run(run, status, error)
        kind: EventKind = {
            "completed": "run.completed",
            "cancelled": "run.cancelled",
        }.get(status, "run.failed")  # type: ignore[assignment]
        self._emit_run(
            kind,
            run,
            **({} if error is None else {"error": error.message, "code": error.code}),
        )
        ending = self._ended.pop(run.id, None)
        if ending is not None:
            ending.run = attrs.evolve(
                run,
                status=status,
                output=output,
                error=error,
                wake_at=None,
                lease_owner=None,
                lease_expiry=None,
            )
            ending.event.set()
        if len(ops) == 2:
            settled = results[-1]
            if settled is not None:
                for parent in await join_barrier(self.store, [settled]):
                    self._wake(parent)

    async def _after_commit(self, turn: TurnState, results: list[Any]) -> None:
        if turn.dispatch:
            tasks = [task for index, task in turn.dispatch if results[index] is not False]
            await self._dispatch(tasks)
        for child in turn.started_children:
            self._emit_run("run.started", child)
        for run_id in turn.cancelled_children:
            self._interrupt(run_id)
        for run_id in turn.wake_after:
            self._wake(run_id)
        # What the turn itself decided (a lost step, a fail_fast fan that
        # froze its members, an attempt sent again) waits for no result.
        self._sent.observed(turn.run.id, turn.checkpoints.values())

    async def _finish_cancel(self, turn: TurnState) -> None:
        run = turn.run
        if run.compensate:
            ctx = Context(self, turn)
            await self._compensate(turn, ctx)
        now = self.clock.now()
        error = ErrorInfo(message="cancelled", code="cancelled")
        for cp in sorted(turn.checkpoints.values(), key=lambda cp: cp.seq):
            if cp.status != "pending" or cp.name.startswith(RETIRED_PREFIX):
                # A retired handoff's handler is no longer the run's to wait
                # for or to cancel, and its record stays as it was.
                continue
            if cp.kind == "child" and cp.child_id is not None:
                turn.ops.append(self.cancel_op(cp.child_id, run.compensate))
                turn.ops.append(
                    SettleCheckpoint(
                        run.id, cp.seq, "failed", completion(False, error=error), error, now
                    )
                )
                turn.wake_after.append(cp.child_id)
                turn.cancelled_children.append(cp.child_id)
            elif cp.kind == "signal":
                turn.ops.append(RemoveSignalWaiter(signal_token(run.id, cp.name)))
        await self._end(turn, "cancelled", error=error)

    # -- due runs -------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self._metrics.count(event)
        self._hub.emit(event)

    def _emit_run(self, kind: EventKind, run: Run, **data: Any) -> None:
        self._emit(
            Event(kind=kind, run_id=run.id, workflow=run.workflow, at=self.clock.now(), data=data)
        )


def _log_failed_run(run: Run, status: RunStatus, error: ErrorInfo) -> None:
    """Log a run's failure once, when it is written, with its traceback."""
    logger.error(
        "run %r (workflow %r) %s%s: %s%s",
        run.id,
        run.workflow,
        "failed" if status == "failed" else "is dead",
        "" if error.step is None else f" in step {error.step!r}",
        error.message,
        "" if error.traceback is None else "\n" + error.traceback.rstrip("\n"),
    )


async def _embedded_worker(
    app: App,
    broker: Broker,
    routes: tuple[str, ...],
    concurrency: int,
    capabilities: tuple[str, ...],
    wall_clock: Callable[[], float],
    engine_id: str,
    seed: int,
    traceback_limit: int,
    task_status: trio.TaskStatus[Worker],
) -> None:
    async with open_worker(
        app,
        broker=broker,
        groups=routes,
        concurrency=concurrency,
        capabilities=capabilities,
        instance_id=f"{engine_id}.worker",
        wall_clock=wall_clock,
        seed=seed,
        traceback_limit=traceback_limit,
    ) as worker:
        task_status.started(worker)
        await trio.sleep_forever()


async def _release_leases(store: Store, engine_id: str, run_ids: list[str]) -> None:
    if not run_ids:
        return
    with trio.move_on_after(5) as cleanup:
        cleanup.shield = True
        try:
            await store.apply([ReleaseRun(run_id, engine_id) for run_id in run_ids])
        except (StoreError, trio.ClosedResourceError) as exc:
            logger.warning("could not release leases on close: %s", exc)


@asynccontextmanager
async def open_engine(
    app: App,
    *,
    store: str | Store = "memory://",
    engine_id: str | None = None,
    seed: int | None = None,
    wall_clock: Callable[[], float] = time.time,
    timer_batch_size: float = DEFAULT_TIMER_BATCH_SIZE,
    lease_ttl: float = 30.0,
    reconcile_interval: float = 60.0,
    result_poll_interval: float = 1.0,
    max_recoveries: int = 10,
    broker: str | Broker = "memory://",
    serve: Sequence[str] = (),
    worker_concurrency: int = 16,
    capabilities: Sequence[str] = (),
    remote_redispatch: tuple[float, int] | None = None,
    blocked_recheck: float = 5.0,
    traceback_limit: int = DEFAULT_TRACEBACK_LIMIT,
) -> AsyncIterator[Engine]:
    """Open an engine that executes ``app``'s workflows on a store.

    Every task the engine runs lives in a nursery this context manager owns;
    leaving the block cancels and joins them all, then gives back the leases
    of runs that were executing, so another engine can resume those at once.
    That holds too when a ``KeyboardInterrupt`` or ``SystemExit`` raised
    inside a step or a workflow body ends the block.

    Args:
      app: The workflows and steps.
      store: A store URL (``memory://``, ``sqlite:///path.db``) or an open
        `Store` to share (the engine does not close a store it was given).
      engine_id: The owner name of this engine's leases; derived from
        ``seed`` if not given. Engines sharing a store need distinct ids.
      seed: Seeds the engine's random source (run ids, jitter, shuffles).
      wall_clock: Read once to anchor durable time (see `Clock`).
      timer_batch_size: How many due runs the poller takes at a time
        (a non-finite or < 1 value means the default, 500).
      lease_ttl: Seconds a run's lease lasts; it is renewed while a turn runs.
      reconcile_interval: Seconds between scans for due runs when no timer is
        nearer.
      result_poll_interval: Seconds between store reads in `Engine.result`
        for runs that end on another engine.
      max_recoveries: How often a run may be taken over from a dead engine
        before it is marked ``dead``.
      broker: A broker URL (``memory://`` by default) or an open `Broker`.
      serve: Group routes to run a worker for inside this engine's nursery
        (as `open_worker` would), e.g. ``["payments"]``.
      worker_concurrency: Tasks that embedded worker runs at once.
      capabilities: What the embedded worker offers to steps with
        ``requires=``.
      remote_redispatch: ``(seconds, maximum)``: a remote step with no result
        ``seconds`` after it was sent is sent again with its attempt count
        raised, at most ``maximum`` times; then it fails with code ``lost``.
        Off by default: brokers redeliver what a dead worker held, but a task
        that never reached the broker (this engine died between committing a
        step and sending it, or the broker refused it eight times) is only
        sent again with this on.
      blocked_recheck: Seconds between checks of a step parked because no
        live worker offers what it ``requires``.
      traceback_limit: How many characters of a traceback a failed step
        attempt or run records with its error (and the embedded worker
        sends with a failed remote attempt); 0 records none. A longer
        traceback keeps its start and its end (see docs/failure-handling.md).

    Raises:
      InvalidURLError: The store URL is malformed.
      UsageError: An option is out of range.
    """
    options = EngineOptions(
        lease_ttl=lease_ttl,
        reconcile_interval=reconcile_interval,
        result_poll_interval=result_poll_interval,
        max_recoveries=max_recoveries,
        remote_redispatch=remote_redispatch,
        blocked_recheck=blocked_recheck,
        traceback_limit=traceback_limit,
        worker_concurrency=worker_concurrency,
        timer_batch_size=timer_batch_size,
        engine_id=engine_id,
    )
    if not isinstance(app, App):
        raise UsageError(f"open_engine needs a td.App, not {app!r}")
    routes = check_routes(app, serve, "serve")
    rng = random.Random(seed)
    if engine_id is None:
        engine_id = f"engine-{rng.getrandbits(32):08x}"
    async with AsyncExitStack() as stack:
        if isinstance(store, str):
            store_obj: Store = await stack.enter_async_context(open_store(store))
        elif callable(getattr(store, "apply", None)) and callable(
            getattr(store, "begin_turn", None)
        ):
            store_obj = store
        else:
            raise InvalidURLError(f"store must be a URL or a Store, not {store!r}")
        if isinstance(broker, str):
            broker_obj: Broker = await stack.enter_async_context(open_broker(broker))
        elif callable(getattr(broker, "dispatch", None)) and callable(
            getattr(broker, "open_consumer", None)
        ):
            broker_obj = broker
        else:
            raise InvalidURLError(f"broker must be a URL or a Broker, not {broker!r}")
        executing: list[str] = []
        engine_ref: list[Engine] = []

        def crashed() -> bool:
            # A simulated crash (trio_durable.testing) leaves the leases to
            # lapse, as a killed process would.
            return bool(engine_ref) and engine_ref[0]._crashed

        try:
            async with trio.open_nursery() as nursery:
                engine = Engine(
                    app,
                    store_obj,
                    nursery,
                    engine_id=engine_id,
                    rng=rng,
                    clock=Clock(wall_clock),
                    timer_batch_size=options.timer_batch_size,
                    lease_ttl=options.lease_ttl,
                    reconcile_interval=options.reconcile_interval,
                    result_poll_interval=options.result_poll_interval,
                    max_recoveries=options.max_recoveries,
                    broker=broker_obj,
                    remote_redispatch=options.remote_redispatch,
                    blocked_recheck=options.blocked_recheck,
                    traceback_limit=options.traceback_limit,
                )
                engine._sent.join()
                stack.callback(engine._sent.leave)
                await nursery.start(consume_results, engine, name="trio_durable result consumer")
                if routes:
                    engine._worker = await nursery.start(
                        _embedded_worker,
                        app,
                        broker_obj,
                        routes,
                        worker_concurrency,
                        tuple(capabilities),
                        wall_clock,
                        engine_id,
                        rng.getrandbits(32),
                        traceback_limit,
                        name="trio_durable embedded worker",
                    )
                    engine._served = frozenset(engine._worker.queues)
                engine_ref.append(engine)
                nursery.start_soon(poll_due, engine, name="trio_durable due-run poller")
                nursery.start_soon(reconcile_stalled, engine, name="trio_durable reconcile")
                for unserved in await engine.unserved_on_error_routes():
                    logger.warning(
                        "workflow %r routes %s to %r, which no engine or live worker knows",
                        unserved.workflow,
                        "every failure" if unserved.code is None else f"code {unserved.code!r}",
                        unserved.handler,
                    )
                try:
                    yield engine
                finally:
                    engine._closed = True
                    engine._closing.set()
                    engine._sent.leave()
                    executing = sorted(engine._active)
                    nursery.cancel_scope.cancel()
        finally:
            # Only once every turn here is cancelled and joined are their
            # leases given back, so no other engine runs a step of theirs
            # while it still runs here.
            if not crashed():
                if engine_ref:
                    # A turn that raised KeyboardInterrupt or SystemExit left
                    # `_active` before the block learned of it.
                    executing = sorted({*executing, *engine_ref[0]._cut_off})
                await _release_leases(store_obj, engine_id, executing)
