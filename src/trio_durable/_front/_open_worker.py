"""Opening a worker: `open_worker` checks its options, opens the broker
(and the blob store, if asked), and runs a `Worker` (`_worker`) in a nursery
it owns: its consumers, its result publisher and its announcements (a
heartbeat, where the broker needs one).
"""

from __future__ import annotations

import logging
import os
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .._base._clock import Clock
from .._base._exceptions import UsageError
from .._base._keyring import Keyring
from .._base._records import DEFAULT_TRACEBACK_LIMIT
from .._brokers import open_broker
from .._brokers._base import (
    Broker,
    BrokerError,
)
from .._kernel._builds import check_build_id
from .._kernel._options import DEFAULT_MAX_DELIVERIES, WorkerOptions
from .._payloads._blobs import DEFAULT_BLOB_THRESHOLD, Blobs, BlobStore, check_blob_options
from .._wire._tracing import make_tracing
from ._app import App
from ._descriptor import check_group_routes

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

from ._health import check_address, serve_http_face
from ._worker import Worker

logger = logging.getLogger("trio_durable")


@asynccontextmanager
async def open_worker(
    app: App,
    *,
    broker: str | Broker = "memory://",
    groups: Sequence[str],
    concurrency: int = 16,
    capabilities: Sequence[str] = (),
    instance_id: str | None = None,
    heartbeat: float = 5.0,
    ttl: float = 15.0,
    wall_clock: Callable[[], float] | None = None,
    seed: int | None = None,
    max_deliveries: int = DEFAULT_MAX_DELIVERIES,
    traceback_limit: int = DEFAULT_TRACEBACK_LIMIT,
    tracing: bool | TracerProvider = False,
    blobs: BlobStore | str | os.PathLike[str] | None = None,
    blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
    signing: Keyring | None = None,
    http: tuple[str, int] | str | None = None,
    build_id: str | None = None,
) -> AsyncIterator[Worker]:
    """Run a worker for ``groups`` until the block exits.

    Args:
      app: The application whose remote steps it runs.
      broker: A broker URL, or an open `Broker` to share.
      groups: Group routes to serve: ``"<group>"`` or ``"<group>@<namespace>"``
        for a tenant's own fleet.
      concurrency: How many tasks run at once (and the prefetch per route).
      capabilities: What this worker offers to steps with ``requires=``; it
        takes tasks only of the steps whose requirements these cover.
      instance_id: Its id in announcements; derived at random if not given.
      heartbeat: Seconds between announcements, where the broker needs
        heartbeats (`Broker.needs_heartbeat`); the memory broker needs
        none: the worker announces once and withdraws as it leaves.
      ttl: Seconds an announcement lives without a heartbeat (on the
        memory broker, only that of a crashed worker, in simulations).
      wall_clock: Anchors durable time (see `Clock`); defaults to `time.time`.
      seed: Seeds the worker's random source (its id, publish backoff jitter).
      max_deliveries: A task the broker delivers more often than this (each
        earlier delivery ended with no result: the worker died running it)
        is a poison message: it is not run again; its step fails for good
        with code ``poison`` and the message is rejected without requeue,
        which dead-letters it on brokers that keep a dead-letter queue.
      traceback_limit: How many characters of a failed step's traceback
        the worker sends with its result (the engine records it on the
        attempt's error); 0 sends none.
      tracing: An OpenTelemetry span per task executed, the child of the
        engine's dispatch span when the task carries its trace context:
        True uses the global tracer provider, or pass a tracer provider.
        Needs the ``otel`` extra; off by default (see docs/tracing.md).
      blobs: The blob store the engines keep large payloads in (a
        `BlobStore`, or a directory for a `LocalBlobStore`): task inputs
        that refer to it are read from it, and outputs longer than
        ``blob_threshold`` characters are written to it and sent as
        references (docs/large-payloads.md). None sends every output as
        it is.
      blob_threshold: See ``blobs``.
      signing: Sign every result with the ring's current key, and run only
        tasks signed by a key of the ring (docs/message-signing.md).
      http: Serve ``/healthz``, ``/readyz`` and ``/metrics`` on this
        address, ``(host, port)`` or ``"host:port"`` (port 0: any free one;
        the URL is `Worker.http_url`) while the worker is open:
        ``/readyz`` answers 503 with a reason while the broker fails or
        does not answer within 2 s (the worker announces itself again,
        a round trip), and from when the block starts to exit
        (docs/operations.md).
      build_id: The build it belongs to (a broker-safe token), which it
        announces; it also takes the tasks of runs on that build
        (docs/deployments.md). None: its app's registration hash.

    Raises:
      UsageError: A group is unknown or malformed, an option is out of
        range, or ``tracing`` is asked for without opentelemetry-api.
      InvalidURLError: The broker URL is malformed.
    """
    address = None if http is None else check_address(http)
    if build_id is not None:
        check_build_id(build_id)
    routes = check_group_routes(app, groups, "groups")
    if not routes:
        raise UsageError("a worker needs at least one group to serve")
    options = WorkerOptions(
        concurrency=concurrency,
        heartbeat=heartbeat,
        ttl=ttl,
        max_deliveries=max_deliveries,
        traceback_limit=traceback_limit,
        capabilities=capabilities,
        tracing=tracing,
        signing=signing,
    )
    tracer = make_tracing(options.tracing)
    blob_store = check_blob_options(blobs, blob_threshold)
    rng = random.Random(seed)
    if instance_id is None:
        instance_id = f"worker-{rng.getrandbits(48):012x}"
    async with AsyncExitStack() as stack:
        if isinstance(broker, str):
            broker_obj: Broker = await stack.enter_async_context(open_broker(broker))
        else:
            broker_obj = broker
        clock = Clock() if wall_clock is None else Clock(wall_clock)
        worker = Worker(
            app,
            broker_obj,
            instance_id=instance_id,
            routes=routes,
            concurrency=options.concurrency,
            capabilities=tuple(options.capabilities),
            clock=clock,
            heartbeat=options.heartbeat,
            ttl=options.ttl,
            rng=rng,
            max_deliveries=options.max_deliveries,
            traceback_limit=options.traceback_limit,
            tracing=tracer,
            signing=options.signing,
            build_id=build_id,
        )
        if blob_store is not None:
            worker.blobs = Blobs(blob_store, blob_threshold, clock)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(worker._publish_forever, name="trio_durable result publisher")
            for queue in worker.queues:
                await nursery.start(worker._consume, queue, name=f"trio_durable consumer {queue}")
            await worker.announce()
            if worker.heartbeats:
                nursery.start_soon(worker.heartbeat, name="trio_durable heartbeat")
            if address is not None:
                worker.http_url = await nursery.start(
                    serve_http_face, worker.readiness, worker.metrics, address
                )
            try:
                yield worker
            finally:
                # Not ready from the moment it starts to leave.
                worker.readiness.draining = True
                with trio.move_on_after(5) as cleanup:
                    cleanup.shield = True
                    try:
                        if worker._crashed:
                            # A simulated crash (trio_durable.testing) leaves
                            # its announcement to lapse, as a killed process
                            # would.
                            await worker._lapse()
                        else:
                            await worker._withdraw()
                    except BrokerError as exc:
                        logger.warning("worker %s could not withdraw: %s", instance_id, exc)
                nursery.cancel_scope.cancel()
