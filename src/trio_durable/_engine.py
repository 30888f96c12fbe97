"""The engine's public face: `Engine`, which `open_engine` (in
`_open_engine`) yields. Its parts reach each other through one `Runtime`;
each of its methods is a short walk into them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._app import App, Workflow
from ._control import cancel_run, read_run, retry_run, signal_run
from ._entities import EntityRef, engine_entity
from ._events import EventFront
from ._fleet import Fleet, aggregate
from ._fork import fork_run, retry_from
from ._front_events import SendsEvents, engine_front
from ._front_fork import ForksRuns
from ._front_hooks import HookActions
from ._front_messages import QueriesAndUpdates, engine_front_of
from ._front_queries import RunQueries
from ._front_schedules import ManagesSchedules
from ._front_starts import StartsRuns
from ._front_streams import ReadsStreams
from ._handle import RunHandle
from ._handoff import UnservedRoute
from ._handoff import unserved_on_error_routes as _unserved
from ._lifecycle import continued_to
from ._observe import DEFAULT_EVENT_BUFFER, Event, Metrics
from ._published import Front
from ._records import (
    Run,
)
from ._runs import await_end, outcome, start_run, start_runs
from ._runtime import EngineStatistics, Runtime
from ._scheduler import drain
from ._stores._base import Store
from ._stores._ops import Op
from ._streams import StreamFront
from ._wakes import announce, read_interval, serves
from ._worker import worker_metrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("trio_durable")


class Engine(
    RunQueries,
    StartsRuns,
    HookActions,
    SendsEvents,
    ManagesSchedules,
    QueriesAndUpdates,
    ForksRuns,
    ReadsStreams,
):
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
      console_url: The URL its console listens on (``console=``), or None.
    """

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime
        self._registry: CollectorRegistry | None = None
        self.app = runtime.app
        self.store = runtime.store
        self.broker = runtime.broker
        self.engine_id = runtime.engine_id
        self.clock = runtime.clock
        self.rng = runtime.rng
        self.results_queue = runtime.results_queue
        self.console_url: str | None = None

    def _query_store(self) -> Store:
        self._rt.scheduler.check_open()
        return self.store

    # What `HookActions` (webhooks, breakpoints) needs of its front end.

    def _check_live(self) -> None:
        self._rt.scheduler.check_open()

    def _origin(self) -> str:
        return self.engine_id

    def _wake_ops(self, runs: Sequence[Run]) -> Sequence[Op]:
        return self._pass_on(runs)

    def _woke(self, run: Run) -> None:
        if self._serves(run):
            self._rt.scheduler.wake(run.id)

    def _breakpoints_changed(self) -> None:
        self._rt.breakpoints.changed()

    # What `SendsEvents` (`send_event`) needs of its front end.

    def _event_front(self) -> EventFront:
        self._rt.scheduler.check_open()
        return engine_front(self._rt, self._pass_on)

    def _schedules_changed(self) -> None:
        self._rt.schedules.changed()

    def _schedules_app(self) -> App:
        return self.app

    # What `QueriesAndUpdates` (`query`, `update`, `get_event`) needs.

    def _message_front(self) -> Front:
        self._rt.scheduler.check_open()
        return engine_front_of(self._rt, self._woke)

    def _stream_front(self, namespace: str | None) -> StreamFront:
        rt = self._rt
        rt.scheduler.check_open()
        return StreamFront(
            store=rt.store,
            waiters=rt.streams,
            poll_interval=read_interval(rt.store, rt.options.result_poll_interval),
            read_run=lambda run_id: self.get(run_id, namespace=namespace),
        )

    # -- public API -----------------------------------------------------------

    async def _start(
        self,
        workflow: Workflow[..., Any] | str,
        args: tuple[Any, ...],
        run_id: str | None,
        namespace: str,
        tags: tuple[str, ...] | list[str],
        timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[Any]:
        return RunHandle.of(
            await start_run(
                self._rt, workflow, args, run_id, namespace, tags, timeout, search_attributes
            ),
            self,
        )

    async def _start_many(
        self,
        workflow: Workflow[..., Any] | str,
        inputs: Sequence[tuple[Any, ...]],
        run_ids: Sequence[str | None],
        namespace: str,
        tags: tuple[str, ...] | list[str],
        timeout: float | None,  # noqa: ASYNC109 (a durable deadline)
        search_attributes: Mapping[str, Any] | None,
    ) -> list[RunHandle[Any]]:
        runs = await start_runs(
            self._rt, workflow, inputs, run_ids, namespace, tags, timeout, search_attributes
        )
        return [RunHandle.of(run, self) for run in runs]

    async def get(self, run_id: str, *, namespace: str | None = None) -> Run:
        """The run as stored now.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: ``namespace`` is malformed.
        """
        self._rt.scheduler.check_open()
        return await read_run(self.store, run_id, namespace)

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        """Wait until the run ends and return its output.

        The output is structured as the workflow's return annotation or,
        for a run handed to an on-error handler, as the handler's. For a run
        that continued as new, it is the chain's last generation's.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          RunFailed: The run failed or is dead (`RunCancelled` if cancelled);
            the error's message, code and details are the exception's.
          EngineClosedError: The engine closed while the call waited (on a
            store other than the memory store, which tells the caller of
            the end itself).
        """
        rt = self._rt
        # Told of the run's end by the turn that ends it here, or by the
        # store's watch if it ends elsewhere: the store is read again only
        # then (or, on a store that announces nothing, now and then).
        poll = read_interval(rt.store, rt.options.result_poll_interval)
        read = partial(self.get, run_id, namespace=namespace)
        run = await await_end(
            rt.store, rt.endings, poll, run_id, read, unended=self._unended(run_id, namespace)
        )
        while (following := await continued_to(rt.store, run)) is not None:
            # A run that continued as new ends with its chain's last generation.
            read = partial(self.get, following, namespace=namespace)
            run = await await_end(rt.store, rt.endings, poll, following, read)
        return await outcome(self.store, self.app, run)

    def _unended(self, run_id: str, namespace: str | None) -> bool:
        # A run just started here, its first turn not begun, needs no read
        # before its result is waited for (a start then a result, the
        # commonest pair of calls, reads nothing).
        rt = self._rt
        run = rt.scheduler.untouched(run_id)
        return (
            run is not None
            and run.lease_owner == rt.engine_id
            and run.lease_expiry is not None
            and run.lease_expiry > rt.clock.now()
            and namespace in (None, run.namespace)
        )

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, namespace: str | None = None
    ) -> None:
        """Send the signal ``name`` with ``payload`` to a run.

        If the run is waiting for it, the run resumes; otherwise the signal is
        buffered for its next wait of that name and never lost. A run that
        continued as new is signalled at its chain's latest generation. A run whose
        workflow this engine's app lacks is announced instead, for an engine
        that has it (see docs/client.md); this one takes no turn of it.

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
        self._rt.scheduler.check_open()
        run, waiting = await signal_run(
            self.store, self.clock.now(), run_id, name, payload, namespace, self._pass_on
        )
        if waiting and self._serves(run):
            self._rt.scheduler.wake(run.id)

    async def cancel(
        self, run_id: str, *, compensate: bool = False, namespace: str | None = None
    ) -> None:
        """Cancel a run, and the children it awaits.

        The run's turn in flight, if any, is interrupted; it is then marked
        ``cancelling`` and ends ``cancelled``. Children it started with
        ``cancel_with_parent=True`` are cancelled too. A run that continued
        as new is cancelled at its chain's latest generation.

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
        self._rt.scheduler.check_open()
        run = await cancel_run(
            self.store,
            self.clock.now(),
            run_id,
            compensate,
            namespace,
            # A run this engine cannot run is announced, for an engine that
            # can; one it can run, it cancels itself (a turn in flight on
            # another engine then sees the cancel when it writes).
            lambda runs: announce(
                self.store, self.engine_id, "cancel", [r for r in runs if not self._serves(r)]
            ),
        )
        if self._serves(run):
            self._rt.scheduler.interrupt(run.id)
            self._rt.scheduler.wake(run.id)

    async def retry(
        self, run_id: str, *, namespace: str | None = None, from_seq: int | None = None
    ) -> Run:
        """Run a failed or dead run's body again from its checkpoints.

        Completed steps are not run again (but for steps whose undo already
        ran, which run again); failed steps, timed-out signal waits and
        compensations are reset; a failed awaited child (or fan member) is
        retried under its same id, so the parent picks up its new outcome.
        A retried child that was cancelled gets back its signal waits, and
        sends again the remote steps whose results the cancel dropped.

        A ``suspended`` run waiting on remote steps (or on a remote
        workflow's decision task) stays suspended, and each of them is sent
        again at once as a new attempt (one whose send the broker refused
        is tried again at once): the way out when a broker lost them. A
        late failure of an earlier attempt then changes nothing, and a late
        success of it still settles the step.

        With ``from_seq``, a run that ended in any way runs again from that
        seq in place (docs/fork-and-retry.md).

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing
            (and is left alone).
          from_seq: The first seq to run again, from 1 to one past the run's
            last body seq; None retries as described first.

        Returns:
          The run as the retry wrote it, ``pending`` (``suspended`` and due
          now, for a suspended run; an engine may have taken it up since).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run is neither failed nor dead, nor
            suspended waiting on a remote step (with ``from_seq``: has not
            ended); nothing changed.
          ForkPointError: ``from_seq`` is refused; nothing changed.
        """
        self._rt.scheduler.check_open()
        if from_seq is not None:
            run = await retry_from(
                self.store, self.clock.now(), run_id, from_seq, namespace, self._pass_on
            )
            self._woke(run)
            return run
        wakes = await retry_run(
            self.store, self.app, self.clock.now(), run_id, namespace, self._pass_on
        )
        for wake in wakes:
            if self._serves(wake):
                self._rt.scheduler.wake(wake.id)
        return wakes[-1]

    async def _fork(
        self, run_id: str, from_seq: int, new_run_id: str | None, namespace: str | None
    ) -> RunHandle[Any]:
        self._rt.scheduler.check_open()
        now, origin = self.clock.now(), self.engine_id
        args = (run_id, from_seq, new_run_id, namespace, origin, self._pass_on)
        fork = await fork_run(self.store, self.app, now, *args)
        self._rt.telemetry.emit_run("run.started", fork)
        self._woke(fork)
        return RunHandle.of(fork, self)

    def _serves(self, run: Run) -> bool:
        return serves(self.app, run.workflow, run.version)

    def _pass_on(self, runs: Sequence[Run]) -> list[Op]:
        """Announce, with a write that wakes them, the runs this engine
        cannot run (its app lacks their workflow): an engine that has it
        takes them at once."""
        others = [run for run in runs if not self._serves(run)]
        return announce(self.store, self.engine_id, "wake", others)

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
        ends: timers not yet due, schedules' next ticks, signals, children running on another
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
        await drain(self._rt)

    @contextmanager
    def subscribe(
        self, buffer: float = DEFAULT_EVENT_BUFFER
    ) -> Iterator[trio.MemoryReceiveChannel[Event]]:
        """Receive this engine's events while the ``with`` block lasts.

        Args:
          buffer: How many events may wait unread; past that, new events are
            dropped for this subscriber (and counted in `statistics`).
        """
        with self._rt.telemetry.hub.subscribe(buffer) as receive:
            yield receive

    def metrics(self) -> str:
        """This engine's metrics in the Prometheus text exposition format
        (0.0.4), its embedded worker's counts included; every metric is
        listed in docs/operations.md."""
        from ._prometheus import render

        return render(self.metrics_registry)

    @property
    def metrics_registry(self) -> CollectorRegistry:
        """This engine's own prometheus-client ``CollectorRegistry`` (never
        the process-wide default one), read afresh at each scrape: mount it
        in an exporter, e.g. ``prometheus_client.make_asgi_app(registry)``.
        Made on first use."""
        if self._registry is None:
            from ._prometheus import ENGINE_GAUGES, metrics_registry

            self._registry = metrics_registry(self._counts, ENGINE_GAUGES, self._gauges)
        return self._registry

    def _counts(self) -> list[Metrics]:
        counts = [self._rt.telemetry.metrics]
        if self._rt.worker is not None:
            counts.append(worker_metrics(self._rt.worker))
        return counts

    def _gauges(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        telemetry = self._rt.telemetry
        gauges: list[tuple[str, tuple[tuple[str, str], ...], float]] = [
            ("trio_durable_leases_held", (), float(telemetry.leases))
        ]
        limits = {queue.name: queue.concurrency for queue in self.app.queues}
        for name in sorted(limits.keys() | telemetry.queues.keys()):
            labels = (("queue", name),)
            if name in limits:
                gauges.append(("trio_durable_queue_limit", labels, float(limits[name])))
            depth = telemetry.queues.get(name)
            admitted, waiting = (0, 0) if depth is None else (depth.admitted, depth.waiting)
            gauges.append(("trio_durable_queue_admitted", labels, float(admitted)))
            gauges.append(("trio_durable_queue_waiting", labels, float(waiting)))
        return gauges

    def statistics(self) -> EngineStatistics:
        """A snapshot of this engine's counters."""
        telemetry = self._rt.telemetry
        telemetry.stats.runs_active = self._rt.scheduler.active
        telemetry.stats.events_dropped = telemetry.hub.dropped
        return attrs.evolve(telemetry.stats)

    async def fleet(self) -> Fleet:
        """What live workers announce, aggregated per workflow, with their
        disagreements (a rollout in progress, or a misconfigured worker)."""
        return aggregate(await self.broker.worker_descriptors())

    async def unserved_on_error_routes(self) -> list[UnservedRoute]:
        """Routes whose handler workflow is neither registered on this engine
        nor known to any live worker: likely a typo in a handler's name."""
        return await _unserved(self.broker, self.app)

    def entity(self, name: str, key: Any, *, call_id: str | None = None) -> EntityRef:
        """One key of the entity ``name``: its handlers are the attributes,
        ``await engine.entity("cart", key).add(item)``.

        An exclusive call is a run of the entity's internal workflow
        (``entity:<name>``) that waits its turn behind the key's earlier
        exclusive calls, fleet-wide; the call returns its result. A shared
        call runs the handler here, on the state as stored now.

        Args:
          name: The entity's name.
          key: The key, of the entity's key type.
          call_id: The id of an exclusive call's run: a call repeated with
            it returns the first one's result and changes nothing.

        Raises:
          UnknownEntityError: No entity ``name`` (or, at the call, no such
            handler); nothing is written.
          EntityKeyError: ``key`` is not of the entity's key type; nothing
            is written.
          InvalidArgumentsError: At the call, the inputs do not fit the
            handler; nothing is written.
          RunFailed: An exclusive handler raised; the state is unchanged.
        """
        return engine_entity(self._rt, self.result, name, key, call_id)


def crash(engine: Engine) -> None:
    """Make leaving ``engine``'s `open_engine` block act as a killed process
    would: its leases are left to lapse (for `trio_durable.testing`)."""
    engine._rt.crashed = True
