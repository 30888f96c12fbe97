"""The engine's public face: `Engine` and `open_engine`.

`open_engine` checks its options (`_options`), opens the store and the
broker, and assembles the engine's parts in a nursery it owns: the
scheduler that runs turns (`_scheduler`, `_turn`), the dispatcher
(`_dispatch`), the result consumer (`_settle`), the due-run poller and the
reconcile pass (`_poller`), and, with ``serve=``, an embedded worker. The
parts reach each other through one `Runtime`; `Engine` is what users hold,
and each of its methods is a short walk into them.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._app import App, Workflow
from ._brokers import enter_broker
from ._brokers._base import Broker
from ._control import cancel_run, read_run, retry_run, signal_run
from ._descriptor import check_group_routes
from ._entities import EntityRef, engine_entity
from ._events import EventFront, SendsEvents, engine_front
from ._exceptions import UsageError
from ._fleet import Fleet, aggregate
from ._handle import RunHandle
from ._handoff import UnservedRoute
from ._handoff import unserved_on_error_routes as _unserved
from ._hook_api import HookActions
from ._lifecycle import continued_to
from ._observe import DEFAULT_EVENT_BUFFER, Event, Metrics
from ._options import DEFAULT_TIMER_BATCH_SIZE, ConsoleOptions, EngineOptions
from ._records import (
    DEFAULT_TRACEBACK_LIMIT,
    Run,
)
from ._run_queries import RunQueries
from ._runs import await_end, outcome, start_run
from ._runtime import EngineStatistics, Runtime, open_runtime
from ._scheduler import drain
from ._schedules import ManagesSchedules
from ._search_attributes import register as register_search_attributes
from ._starts import StartsRuns
from ._stores import enter_store
from ._stores._base import Store
from ._stores._ops import Op
from ._views import Retention
from ._wakes import announce, serves
from ._worker import worker_metrics

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("trio_durable")


class Engine(RunQueries, StartsRuns, HookActions, SendsEvents, ManagesSchedules):
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
        """
        rt = self._rt
        read = partial(self.get, run_id, namespace=namespace)
        run = await await_end(rt.store, rt.endings, rt.options.result_poll_interval, run_id, read)
        while (following := await continued_to(rt.store, run)) is not None:
            # A run that continued as new ends with its chain's last generation.
            read = partial(self.get, following, namespace=namespace)
            run = await await_end(
                rt.store, rt.endings, rt.options.result_poll_interval, following, read
            )
        return await outcome(self.store, self.app, run)

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
        self._rt.scheduler.check_open()
        wakes = await retry_run(
            self.store, self.app, self.clock.now(), run_id, namespace, self._pass_on
        )
        for wake in wakes:
            if self._serves(wake):
                self._rt.scheduler.wake(wake.id)
        return await self.get(run_id)

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
    retention: Retention | None = None,
    tracing: bool | TracerProvider = False,
    metrics_interval: float = 15.0,
    console: ConsoleOptions | None = None,
    webhook_secret: bytes | str | None = None,
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
        for runs that end on another engine (a backstop: on the built-in
        stores, the other engine's announcement wakes the caller at once).
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
      retention: Prune ended runs as this says, in a task of the engine's
        nursery (see docs/queries.md); None keeps them.
      tracing: OpenTelemetry spans for turns, local step attempts and
        remote steps from dispatch to settle (and for the embedded
        worker's executions): True uses the global tracer provider, or
        pass a tracer provider. Needs the ``otel`` extra; off by default
        (see docs/tracing.md).
      metrics_interval: Seconds between reads of the flow-control queues'
        depths from the store, for the queue gauges of `Engine.metrics`
        (only if ``app`` has queues).
      console: Serve the console (its JSON API, pages and ``/metrics``)
        from this engine's nursery, as `ConsoleOptions` say; it listens
        before the block is entered, at `Engine.console_url` (see
        docs/http-api.md). None serves none.
      webhook_secret: The secret webhook tokens are derived from (at least
        16 bytes; the same on every engine of a fleet). Without one, a
        random secret is made once and kept in the store, which then holds
        what derives the tokens (see docs/webhooks-and-breakpoints.md).

    Raises:
      InvalidURLError: The store URL is malformed.
      UsageError: An option is out of range, or ``tracing`` is asked for
        without opentelemetry-api installed.
      SearchAttributeError: A search attribute ``app`` declares is recorded
        in the store with another type.
      OSError: The console's address cannot be listened on (raised from
        the engine's nursery, in its exception group).
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
        retention=retention,
        tracing=tracing,
        metrics_interval=metrics_interval,
        webhook_secret=webhook_secret,
    )
    if not isinstance(app, App):
        raise UsageError(f"open_engine needs a td.App, not {app!r}")
    if console is not None and not isinstance(console, ConsoleOptions):
        raise UsageError(f"console= takes a td.ConsoleOptions or None, not {console!r}")
    routes = check_group_routes(app, serve, "serve")
    rng = random.Random(seed)
    if engine_id is None:
        engine_id = f"engine-{rng.getrandbits(32):08x}"
    async with AsyncExitStack() as stack:
        store_obj = await enter_store(stack, store)
        # Before any run: a type the store records otherwise is refused.
        await register_search_attributes(store_obj, app, wall_clock())
        broker_obj = await enter_broker(stack, broker)
        async with open_runtime(
            app,
            store_obj,
            broker_obj,
            options,
            engine_id=engine_id,
            rng=rng,
            wall_clock=wall_clock,
            serve=routes,
            capabilities=tuple(capabilities),
        ) as rt:
            engine = Engine(rt)
            for unserved in await engine.unserved_on_error_routes():
                logger.warning(
                    "workflow %r routes %s to %r, which no engine or live worker knows",
                    unserved.workflow,
                    "every failure" if unserved.code is None else f"code {unserved.code!r}",
                    unserved.handler,
                )
            if console is not None:
                # Imported here: `import trio_durable` never loads starlette.
                from ._console import serve_console

                engine.console_url = await rt.nursery.start(
                    partial(
                        serve_console,
                        engine,
                        host=console.host,
                        port=console.port,
                        token=console.token,
                        cors_origins=console.cors_origins,
                    ),
                    name="trio_durable console",
                )
            yield engine


def crash(engine: Engine) -> None:
    """Make leaving ``engine``'s `open_engine` block act as a killed process
    would: its leases are left to lapse (for `trio_durable.testing`)."""
    engine._rt.crashed = True
