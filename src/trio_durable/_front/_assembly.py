"""The engine's assembly: `open_runtime` makes one `Runtime` with the
features it runs with, and runs its background parts in a nursery it owns:
the result consumer, the embedded worker, the poller, the reconcile pass,
the schedule ticker, the queue sampler, the pruner and the watch over
the groups without live workers (`_coverage`)."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .._base._clock import Clock
from .._base._exceptions import EngineClosedError, StoreError
from .._brokers._base import RESULTS, needs_heartbeat
from .._features.children._children import Children
from .._features.children._fan_window import FanWindows
from .._features.deployments._deployments import Deployments
from .._features.flow_control._admission import Admission
from .._features.lifecycle._feature import Lifecycle
from .._features.messages._context_streams import EmittedValues
from .._features.messages._decision_updates import RemoteUpdates
from .._features.messages._remote_queries import QueryAnswers
from .._features.messages._streams import StreamWaiters
from .._features.messages._updates import Updates
from .._features.on_error._handoff import Handoffs
from .._features.retention._retention import prune_forever
from .._features.schedules._schedule_ticker import ScheduleTicker, tick_schedules
from .._features.starts._start_batch import StartBatcher
from .._features.steps._breakpoints import Breakpoints
from .._kernel._carrier import Carrier, Holding
from .._kernel._catalogue import Catalogue
from .._kernel._coverage import Coverage, watch_coverage
from .._kernel._definitions import remote_groups
from .._kernel._dispatch import Dispatcher
from .._kernel._endings import Endings
from .._kernel._leases import LeaseKeeper
from .._kernel._poller import poll_due, reconcile_stalled
from .._kernel._runtime import Runtime, Telemetry
from .._kernel._scheduler import Scheduler
from .._kernel._sent import SentTasks
from .._kernel._settle import consume_results
from .._kernel._stranded import leave_nothing_stranded, wake_stranded
from .._kernel._turns import Turns
from .._kernel._wakes import engine_delivery, keep_watching
from .._kernel._webhook_keys import WebhookKeys
from .._payloads._blobs import DEFAULT_BLOB_THRESHOLD
from .._stores._base import RunWatch
from .._stores._blob_store import blobs_of
from .._stores._ops import ReleaseRun
from .._wire._layers import engine_layers
from .._wire._tracing import Tracing, make_tracing
from ._carry_out import DecisionCommands
from ._front_bulk import BULK
from ._open_worker import open_worker
from ._worker import Worker

if TYPE_CHECKING:
    from .._brokers._base import Broker
    from .._kernel._engine_options import EngineOptions
    from .._stores._base import Store
    from ._app import App

logger = logging.getLogger("trio_durable")


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
                rt.coverage = Coverage(remote_groups(app, serve), rt.dispatcher.live_workers)
                rt.sent.join()
                joined = rt.sent
                # What it sends on a broker of this process counts as held
                # while the engine is open (see `_carrier`).
                holding = held.enter_context(rt.dispatcher.carrier.open())
                nursery.start_soon(rt.leases.keep, name="trio_durable lease keeper")
                await nursery.start(
                    rt.features.part(StartBatcher).serve, name="trio_durable starts"
                )
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
                    await rt.features.part(Breakpoints).refresh(store)
                except StoreError as exc:
                    # The first step reads them, then.
                    logger.warning("could not read the breakpoints: %s", exc)
                await nursery.start(consume_results, rt, name="trio_durable result consumer")
                if serve:
                    worker: Worker = await nursery.start(
                        _embedded_worker,
                        rt,
                        app,
                        serve,
                        capabilities,
                        wall_clock,
                        rng.getrandbits(32),
                        name="trio_durable embedded worker",
                    )
                    rt.worker = worker
                    rt.dispatcher.own_queues = frozenset(worker.queues)
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
                if rt.coverage.groups:
                    # Says once when a group it sends to has no live worker.
                    nursery.start_soon(
                        watch_coverage,
                        rt.coverage,
                        needs_heartbeat(broker),
                        name="trio_durable worker coverage",
                    )
                if options.retention is not None:
                    nursery.start_soon(
                        prune_forever,
                        store,
                        options.retention,
                        rt.clock,
                        (BULK,),
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
                    rt.features.close(_closed)
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
    # In the order their hooks run: a handoff is followed before admission
    # is asked; an ending run's admission is given back before its parent's
    # checkpoint is settled; a cancelled run's children are cancelled
    # before those that were to be cancelled with it.
    for feature in (
        DecisionCommands(),
        Handoffs(),
        Admission(),
        Deployments(),
        Updates(),
        RemoteUpdates(),
        EmittedValues(),
        Children(),
        Lifecycle(),
        FanWindows(),
        Breakpoints(),
        ScheduleTicker(),
        StreamWaiters(),
        QueryAnswers(),
        StartBatcher(store, lambda: EngineClosedError("the engine is closed")),
    ):
        rt.features.add(feature)
    return rt


async def _embedded_worker(
    rt: Runtime,
    app: App,
    serve: tuple[str, ...],
    capabilities: tuple[str, ...],
    wall_clock: Callable[[], float],
    seed: int,
    task_status: trio.TaskStatus[Worker],
) -> None:
    async with open_worker(
        app,
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
        build_id=rt.options.build_id,
    ) as worker:
        # Its engine counts the steps it runs from their events.
        worker.counts_steps = False
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
