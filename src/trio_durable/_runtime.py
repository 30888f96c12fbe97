"""The runtime: the parts of one engine, as its mechanisms reach each other.

`open_runtime` makes one `Runtime`, starts the parts that run in the
background, and hands the runtime to the parts that need more than a value
or two: the scheduler's turns, the result consumer, the poller, handoffs,
compensation and retry. Each reaches another part only through the public
members listed here, never through its private attributes.

Also here is the small part no mechanism owns alone: the engine's events,
metrics and counters (`Telemetry`).
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from ._blob_store import blobs_of
from ._blobs import DEFAULT_BLOB_THRESHOLD, Blobs
from ._breakpoints import Breakpoints
from ._brokers._base import RESULTS
from ._carrier import Carrier, Holding
from ._catalogue import Catalogue
from ._clock import Clock
from ._dispatch import Dispatcher
from ._exceptions import EngineClosedError, StoreError
from ._learned import Learned
from ._leases import LeaseKeeper
from ._observe import Event, EventHub, EventKind, Metrics
from ._open_worker import open_worker
from ._passed_on import PassedOn
from ._poller import poll_due, reconcile_stalled
from ._records import QueueDepth, Run
from ._remote_queries import QueryAnswers
from ._retention import prune_forever
from ._runs import Endings
from ._schedule_ticker import ScheduleTicker, tick_schedules
from ._scheduler import Scheduler
from ._sent import SentTasks
from ._settle import consume_results
from ._start_batch import StartBatcher
from ._stores._base import RunWatch
from ._stores._ops import ReleaseRun
from ._stranded import leave_nothing_stranded, wake_stranded
from ._streams import StreamWaiters
from ._tracing import DISABLED, Tracing, make_tracing
from ._turns import Turns
from ._wakes import engine_delivery, keep_watching
from ._webhooks import WebhookKeys
from ._wire_layers import WireLayers, engine_layers
from ._worker import Worker

if TYPE_CHECKING:
    from ._app import App
    from ._brokers._base import Broker
    from ._engine_options import EngineOptions
    from ._stores._base import Store

logger = logging.getLogger("trio_durable")


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
      rejected_unsigned: With ``signing=``, result messages rejected
        because they carried no signature (see docs/message-signing.md).
      rejected_forged: With ``signing=``, result messages rejected because
        their signature did not match.
      rejected_unknown_key: With ``signing=``, result messages rejected
        because they were signed with a key id not in the ring.
      rejected_stale: Result messages rejected because no step waits for
        them (signed or not): a duplicate delivery, a late failure of a
        superseded attempt, or a result replayed from an earlier execution
        (before a retry, or of an earlier run under the same id; see
        docs/failure-handling.md#which-result-settles-a-step). Each changed
        nothing, and was dropped or dead-lettered.
      wakes_coalesced: Wakes of a run whose turn was queued and had not
        begun reading it: that turn reads what woke it, so none was added.
    """

    turns: int = 0
    runs_active: int = 0
    events_dropped: int = 0
    reconciled: int = 0
    rejected: int = 0
    rejected_unsigned: int = 0
    rejected_forged: int = 0
    rejected_unknown_key: int = 0
    rejected_stale: int = 0
    wakes_coalesced: int = 0


@final
class Telemetry:
    """An engine's events, the metrics counted from them, and its counters."""

    def __init__(self, clock: Clock) -> None:
        self.hub = EventHub()
        self.metrics = Metrics()
        self.stats = EngineStatistics()
        # Runs whose lease a turn of this engine holds now.
        self.leases = 0
        # The flow-control queues' depths as last read from the store, by
        # queue (`sample_queues`).
        self.queues: dict[str, QueueDepth] = {}
        self._clock = clock

    def emit(self, event: Event) -> None:
        """Count ``event`` and send it to every subscriber."""
        self.metrics.count(event)
        self.hub.emit(event)

    def emit_run(self, kind: EventKind, run: Run, **data: Any) -> None:
        """Emit an event of ``run`` as a whole, stamped now."""
        self.emit(
            Event(kind=kind, run_id=run.id, workflow=run.workflow, at=self._clock.now(), data=data)
        )


@final
@attrs.define(eq=False, kw_only=True)
class Runtime:
    """The parts of one engine.

    Attributes:
      app: The application.
      store: The store.
      broker: The broker remote steps travel through.
      clock: The engine's `Clock`.
      rng: Its seeded random source (ids, jitter, shuffles).
      engine_id: The owner of the leases it takes.
      options: Its checked settings.
      results_queue: The broker queue its result consumer takes results from.
      sent: The tasks it sent to its own worker and still waits on.
      telemetry: Its events, metrics and counters.
      endings: The callers of `Engine.result` waiting on runs.
      dispatcher: Sends tasks and judges whether a worker can run them.
      layers: What its tasks pass through on their way out and its results
        on their way in (tracing, large payloads, signing; see
        `_wire_layers`).
      tracing: Its OpenTelemetry spans (see `_tracing`); off by default.
      scheduler: Runs turns, set once the turns can be made.
      worker: The embedded worker (``serve=``), once started.
      crashed: Set by a simulated crash (`trio_durable.testing`): closing
        leaves the leases to lapse, as a killed process would.
      nursery: The nursery its parts and turns run in (what the engine
        serves besides, such as its console, runs there too).
      breakpoints: The breakpoints as last read from the store.
      webhook_keys: The secret webhook tokens derive from.
      learned: The steps and queues remote workflows' decisions named.
      catalogue: What live workers announce (remote workflows' groups and
        routes), read at most once per `CACHE_SECONDS`.
      schedules: What tells the schedule ticker that schedules changed.
      blobs: The blob store payloads over the threshold go to, if any
        (docs/large-payloads.md).
      streams: The readers of runs' streams waiting for new values.
      leases: Renews the leases of the turns in flight.
      starts: Writes the runs of starts that arrive together in one batch.
      passed_on: The runs it passed on because its app lacks their
        workflow, which its poller leaves alone for a backoff.
      query_answers: The queries it sent to workers, waiting for answers.
    """

    app: App
    store: Store
    broker: Broker
    clock: Clock
    rng: random.Random
    engine_id: str
    options: EngineOptions
    results_queue: str
    sent: SentTasks
    telemetry: Telemetry
    endings: Endings
    dispatcher: Dispatcher
    layers: WireLayers
    tracing: Tracing = DISABLED
    scheduler: Scheduler = attrs.field(init=False)
    worker: Worker | None = None
    crashed: bool = False
    nursery: trio.Nursery = attrs.field(init=False)
    breakpoints: Breakpoints = attrs.field(factory=Breakpoints)
    webhook_keys: WebhookKeys = attrs.field(factory=WebhookKeys)
    learned: Learned = attrs.field(factory=Learned)
    catalogue: Catalogue = attrs.field(init=False)
    schedules: ScheduleTicker = attrs.field(factory=ScheduleTicker)
    blobs: Blobs | None = None
    streams: StreamWaiters = attrs.field(factory=StreamWaiters)
    leases: LeaseKeeper = attrs.field(init=False)
    starts: StartBatcher = attrs.field(init=False)
    passed_on: PassedOn = attrs.field(factory=PassedOn)
    query_answers: QueryAnswers = attrs.field(factory=QueryAnswers)


@asynccontextmanager
async def open_runtime(
    app: App,
    store: Store,
    broker: Broker,
    options: EngineOptions,
    *,
    engine_id: str,
    rng: random.Random,
    wall_clock: Callable[[], float],
    serve: tuple[str, ...],
    capabilities: tuple[str, ...],
    broker_url: str | None = None,
) -> AsyncIterator[Runtime]:
    """Run an engine's parts in a nursery owned here: the result consumer,
    the embedded worker (if ``serve`` names group routes), the due-run
    poller and the reconcile pass; every turn runs there too. The broker's
    URL (``broker_url``, if it was opened from one) names it in the marks
    of the steps sent on it (see `_carrier`).

    Leaving cancels and joins them all, then gives back the leases of the
    runs whose turns were cut off, and, as the last engine of this process
    on a broker that keeps nothing across its process, marks the remote
    steps still out on it for other engines to send again (see
    `_stranded`), unless the runtime ``crashed``.
    """
    executing: list[str] = []
    running: Runtime | None = None
    holding: Holding | None = None
    joined: SentTasks | None = None
    held = ExitStack()
    # Checked before anything starts: a UsageError comes out as it is.
    tracing = make_tracing(options.tracing)
    try:
        try:
            async with trio.open_nursery() as nursery:
                rt = _assemble(
                    app,
                    store,
                    broker,
                    nursery,
                    options,
                    engine_id,
                    rng,
                    wall_clock,
                    tracing,
                    broker_url,
                )
                rt.sent.join()
                joined = rt.sent
                # What it sends on a broker of this process counts as held
                # while the engine is open (see `_carrier`).
                holding = held.enter_context(rt.dispatcher.carrier.open())
                nursery.start_soon(rt.leases.keep, name="trio_durable lease keeper")
                await nursery.start(rt.starts.serve, name="trio_durable starts")
                if isinstance(store, RunWatch):
                    await nursery.start(
                        keep_watching,
                        store,
                        engine_id,
                        engine_delivery(rt),
                        name="trio_durable store watch",
                    )
                # Read once the watch runs: a change announced from now on
                # is heard, so no step reads them again until one is.
                try:
                    await rt.breakpoints.refresh(store)
                except StoreError as exc:
                    # The first step reads them, then.
                    logger.warning("could not read the breakpoints: %s", exc)
                await nursery.start(consume_results, rt, name="trio_durable result consumer")
                if serve:
                    rt.worker = await nursery.start(
                        _embedded_worker,
                        rt,
                        serve,
                        capabilities,
                        wall_clock,
                        rng.getrandbits(32),
                        name="trio_durable embedded worker",
                    )
                    rt.dispatcher.own_queues = frozenset(rt.worker.queues)
                running = rt
                # Runs whose steps went with a broker that kept nothing, or
                # whose lost deadline this engine's settings move.
                await nursery.start(wake_stranded, rt, name="trio_durable stranded steps")
                nursery.start_soon(poll_due, rt, name="trio_durable due-run poller")
                nursery.start_soon(reconcile_stalled, rt, name="trio_durable reconcile")
                # Started once the app's schedules are declared, so a
                # schedule the app declares is in the store when the
                # engine's block is entered.
                await nursery.start(tick_schedules, rt, name="trio_durable schedule ticker")
                if app.queues:
                    nursery.start_soon(sample_queues, rt, name="trio_durable queue sampler")
                if options.retention is not None:
                    nursery.start_soon(
                        prune_forever,
                        store,
                        options.retention,
                        rt.clock,
                        name="trio_durable pruner",
                    )
                try:
                    yield rt
                finally:
                    executing = rt.scheduler.close()
                    # Callers still waiting here (in tasks outside the
                    # engine's block) would wait for ever: nothing tells this
                    # engine of a change once its watch and turns are gone.
                    rt.endings.close(_closed)
                    rt.streams.close(_closed)
                    rt.sent.leave()
                    nursery.cancel_scope.cancel()
        finally:
            # Only once every turn here is cancelled and joined are their
            # leases given back, so no other engine runs a step of theirs
            # while it still runs here. A simulated crash (trio_durable.testing)
            # leaves them to lapse, as a killed process would.
            if running is None or not running.crashed:
                if running is not None:
                    # A turn that raised KeyboardInterrupt or SystemExit left
                    # the scheduler before the block learned of it.
                    executing = sorted({*executing, *running.scheduler.cut_off})
                await _release_leases(store, engine_id, executing)
                if running is not None and holding is not None:
                    # The last engine of this process on a memory broker
                    # leaves nothing that engines elsewhere would wait on.
                    await leave_nothing_stranded(running, holding)
    finally:
        held.close()
        if joined is not None:
            joined.leave()
        # Every turn is joined: no dispatch span opens after this.
        tracing.close()


def _closed() -> EngineClosedError:
    return EngineClosedError("the engine closed while the call waited")


def _assemble(
    app: App,
    store: Store,
    broker: Broker,
    nursery: trio.Nursery,
    options: EngineOptions,
    engine_id: str,
    rng: random.Random,
    wall_clock: Callable[[], float],
    tracing: Tracing,
    broker_url: str | None,
) -> Runtime:
    """Make an engine's parts, wired to each other, with ``nursery`` for
    the turns they run."""
    clock = Clock(wall_clock)
    scope = getattr(store, "scope", None)
    # Engines sharing a store share a results queue; engines of other
    # stores on the same broker must never take each other's results.
    results_queue = RESULTS if not isinstance(scope, str) else f"{RESULTS}.{scope}"
    sent = SentTasks(results_queue)
    telemetry = Telemetry(clock)
    blobs = blobs_of(store)
    layers = engine_layers(tracing, blobs, options.signing)
    rt = Runtime(
        app=app,
        store=store,
        broker=broker,
        clock=clock,
        rng=rng,
        engine_id=engine_id,
        options=options,
        results_queue=results_queue,
        sent=sent,
        telemetry=telemetry,
        endings=Endings(),
        dispatcher=Dispatcher(
            app,
            broker,
            clock,
            rng,
            sent,
            results_queue,
            options.blocked_recheck,
            layers,
            store=store,
            carrier=Carrier.of(broker, broker_url),
        ),
        layers=layers,
        tracing=tracing,
        webhook_keys=WebhookKeys(options.webhook_secret),
        blobs=blobs,
    )
    # The scheduler drives turns, and turns reach the scheduler (to wake
    # runs): the runtime is complete once both exist.
    rt.dispatcher.learned = rt.learned
    rt.catalogue = Catalogue(broker)
    rt.scheduler = Scheduler(nursery, Turns(rt), telemetry.stats)
    rt.dispatcher.wake = rt.scheduler.wake
    rt.leases = LeaseKeeper(store, engine_id, options.lease_ttl, clock)
    rt.nursery = nursery
    rt.starts = StartBatcher(store, lambda: EngineClosedError("the engine is closed"))
    return rt


async def _embedded_worker(
    rt: Runtime,
    serve: tuple[str, ...],
    capabilities: tuple[str, ...],
    wall_clock: Callable[[], float],
    seed: int,
    task_status: trio.TaskStatus[Worker],
) -> None:
    async with open_worker(
        rt.app,
        broker=rt.broker,
        groups=serve,
        concurrency=rt.options.worker_concurrency,
        capabilities=capabilities,
        instance_id=f"{rt.engine_id}.worker",
        wall_clock=wall_clock,
        seed=seed,
        traceback_limit=rt.options.traceback_limit,
        tracing=rt.options.tracing,
        blobs=None if rt.blobs is None else rt.blobs.store,
        blob_threshold=DEFAULT_BLOB_THRESHOLD if rt.blobs is None else rt.blobs.threshold,
        signing=rt.options.signing,
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


async def sample_queues(rt: Runtime) -> None:
    """Read the flow-control queues' depths from the store every
    ``metrics_interval`` seconds, for the engine's queue gauges: a metrics
    scrape cannot wait for the store, so it reports the last reading."""
    while True:
        try:
            depths = await rt.store.queue_depths()
        except StoreError as exc:
            logger.warning("could not read the flow-control queues' depths: %s", exc)
        else:
            rt.telemetry.queues = {depth.queue: depth for depth in depths}
        await trio.sleep(rt.options.metrics_interval)
