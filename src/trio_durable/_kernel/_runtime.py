"""The runtime: the parts of one engine, as its mechanisms reach each other.

`open_runtime` (in `_front._assembly`) makes one `Runtime` and starts the
parts that run in the background; the runtime goes to the parts that need
more than a value or two: the scheduler's turns, the result consumer, the
poller, handoffs, compensation and retry. Each reaches another part only
through the public members listed here, never through its private
attributes; a feature's own part is reached by its type
(``rt.features.part(StreamWaiters)``, see `_features`).

Also here is the small part no mechanism owns alone: the engine's events,
metrics and counters (`Telemetry`).
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING, Any, Protocol, final

import attrs
import trio

from .._base._clock import Clock
from .._base._observe import Event, EventHub, EventKind, Metrics
from .._base._records import QueueDepth, Run
from .._payloads._blobs import Blobs
from .._wire._layers import WireLayers
from .._wire._tracing import DISABLED, Tracing
from ._catalogue import Catalogue
from ._coverage import Coverage
from ._dispatch import Dispatcher
from ._endings import Endings
from ._hooks import Features
from ._learned import Learned
from ._leases import LeaseKeeper
from ._passed_on import PassedOn
from ._scheduler import Scheduler
from ._sent import SentTasks
from ._webhook_keys import WebhookKeys

if TYPE_CHECKING:
    from .._brokers._base import Broker
    from .._stores._base import Store
    from ._definitions import Registry
    from ._engine_options import EngineOptions

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


class EmbeddedWorker(Protocol):
    """What the engine's drain reads of the worker it embeds (``serve=``)."""

    @property
    def queues(self) -> tuple[str, ...]: ...

    @property
    def busy(self) -> bool: ...

    async def wait_idle(self) -> None: ...


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
      webhook_keys: The secret webhook tokens derive from.
      learned: The steps and queues remote workflows' decisions named.
      catalogue: What live workers announce (remote workflows' groups and
        routes), read at most once per `CACHE_SECONDS`.
      coverage: Which groups it sends tasks to have a live worker (see
        `_coverage`).
      blobs: The blob store payloads over the threshold go to, if any
        (docs/large-payloads.md).
      leases: Renews the leases of the turns in flight.
      features: The features it runs with (see `_features`).
      passed_on: The runs it passed on because its app lacks their
        workflow, which its poller leaves alone for a backoff.
    """

    app: Registry
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
    worker: EmbeddedWorker | None = None
    crashed: bool = False
    nursery: trio.Nursery = attrs.field(init=False)
    webhook_keys: WebhookKeys = attrs.field(factory=WebhookKeys)
    learned: Learned = attrs.field(factory=Learned)
    catalogue: Catalogue = attrs.field(init=False)
    coverage: Coverage = attrs.field(init=False)
    blobs: Blobs | None = None
    leases: LeaseKeeper = attrs.field(init=False)
    passed_on: PassedOn = attrs.field(factory=PassedOn)
    features: Features = attrs.field(factory=Features)
