"""The engine's public face: `Engine`, which `open_engine` (in
`_open_engine`) yields. Its parts reach each other through one `Runtime`;
each of its methods is a short walk into them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .._base._observe import DEFAULT_EVENT_BUFFER, Event, Metrics
from .._features.entities._entities import EntityRef, engine_entity
from .._features.events._events import EventFront
from .._features.messages._remote_queries import engine_asker
from .._features.messages._streams import StreamWaiters
from .._features.starts._runs import start_run, start_runs
from .._kernel._runtime import EngineStatistics, Runtime
from .._kernel._scheduler import drain
from .._kernel._wakers import SchedulerWaker
from .._kernel._wakes import read_interval
from ._app import App, Workflow
from ._front_core import FrontCore
from ._front_end import FrontEnd
from ._front_events import engine_front
from ._handle import RunHandle
from ._worker import Worker, worker_metrics

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

logger = logging.getLogger("trio_durable")


class Engine(FrontEnd):
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

    def __init__(self, runtime: Runtime, app: App) -> None:
        self._rt = runtime
        self._registry: CollectorRegistry | None = None
        self.app = app
        self.store = runtime.store
        self.broker = runtime.broker
        self.engine_id = runtime.engine_id
        self.clock = runtime.clock
        self.rng = runtime.rng
        self.results_queue = runtime.results_queue
        self.console_url: str | None = None
        self._core = FrontCore(
            store=runtime.store,
            app=app,
            types=app,
            clock=runtime.clock,
            origin=runtime.engine_id,
            rng=runtime.rng,
            waker=SchedulerWaker(runtime),
            endings=runtime.endings,
            streams=runtime.features.part(StreamWaiters),
            poll_interval=read_interval(runtime.store, runtime.options.result_poll_interval),
            broker=runtime.broker,
            check_open=runtime.scheduler.check_open,
            traceback_limit=runtime.options.traceback_limit,
            ask_query=engine_asker(runtime),
        )

    # What is the engine's own: how it starts runs (leased to itself, its
    # first turn taken at once), sends events and calls entities.

    def _event_front(self) -> EventFront:
        self._rt.scheduler.check_open()
        return engine_front(self._rt, self._core.waker.wake_ops)

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

    def _entity(self, name: str, key: Any, call_id: str | None) -> EntityRef:
        return engine_entity(self._rt, self.result, name, key, call_id)

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

    async def groups_without_workers(self) -> list[str]:
        """The groups this engine sends tasks to (its app's remote steps'
        groups and remote workflows' decision groups, less those it serves
        itself) that no live worker serves now, sorted.

        Empty for the first 15 s of Trio's clock after the engine opened
        (workers announce themselves within their heartbeat, so a look
        sooner could miss live ones). Read through the cache the engine
        judges ``requires=`` with, so a caller that asks often costs one
        read of the announcements a second. A group found without workers
        is logged once at WARNING (again if it later loses all its workers),
        and at INFO when one comes; the engine also looks on its own, 15 s
        after it opened and, on a broker whose announcements need
        heartbeats, every 15 s after (see docs/operations.md).

        Raises:
          BrokerError: The announcements could not be read.
        """
        return await self._rt.coverage.look()

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
        if isinstance(self._rt.worker, Worker):
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


def crash(engine: Engine) -> None:
    """Make leaving ``engine``'s `open_engine` block act as a killed process
    would: its leases are left to lapse (for `trio_durable.testing`)."""
    engine._rt.crashed = True
