"""Opening an engine: `open_engine` checks its options (`_options`), opens
the store (wrapped for large payloads and a codec, if asked) and the
broker, and assembles the engine's parts in a nursery it owns: the
scheduler that runs turns (`_scheduler`, `_turn`), the dispatcher
(`_dispatch`), the result consumer (`_settle`), the due-run poller and the
reconcile pass (`_poller`), and, with ``serve=``, an embedded worker. The
parts reach each other through one `Runtime` (`_runtime`); the `Engine`
(`_engine`) it yields is what users hold.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING

from .._base._exceptions import UsageError
from .._base._records import (
    DEFAULT_TRACEBACK_LIMIT,
)
from .._brokers import enter_broker
from .._brokers._base import Broker
from .._features.search._search_attributes import register as register_search_attributes
from .._front._app import App
from .._front._assembly import open_runtime
from .._front._descriptor import check_group_routes
from .._front._engine import Engine
from .._front._undecodable import guarded
from .._kernel._engine_options import EngineOptions
from .._kernel._options import DEFAULT_TIMER_BATCH_SIZE, ConsoleOptions
from .._kernel._views import Retention
from .._payloads._blobs import DEFAULT_BLOB_GRACE, DEFAULT_BLOB_THRESHOLD, BlobStore
from .._payloads._codec import PayloadCodec
from .._stores import enter_store
from .._stores._base import Store
from .._stores._blob_store import BlobOptions
from .._stores._codec import check_codec, with_codec

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from .._base._keyring import Keyring

logger = logging.getLogger("trio_durable")


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
    build_id: str | None = None,
    remote_redispatch: tuple[float, int] | None = None,
    blocked_recheck: float = 5.0,
    traceback_limit: int = DEFAULT_TRACEBACK_LIMIT,
    retention: Retention | None = None,
    tracing: bool | TracerProvider = False,
    metrics_interval: float = 15.0,
    console: ConsoleOptions | None = None,
    webhook_secret: bytes | str | None = None,
    codec: PayloadCodec | None = None,
    blobs: BlobStore | str | os.PathLike[str] | None = None,
    blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
    blob_grace: float = DEFAULT_BLOB_GRACE,
    signing: Keyring | None = None,
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
      reconcile_interval: The safety net where processes that may die
        without a word write the store too (SQLite under Trio's own clock,
        PostgreSQL): seconds between scans for due and stalled runs when no
        timer is nearer. On a store whose writers all live in this process
        (memory; SQLite under another clock), the delay from a change after
        which a run that may have stalled is looked for, and no periodic
        scan (docs/configuration.md).
      result_poll_interval: Seconds between store reads in `Engine.result`,
        `Engine.get_event` and `Engine.update` on a store that announces
        no writes (one of your own that is no `RunWatch`). Unused on the
        built-in stores, which announce every run's end and published
        value: the caller waits for the announcement alone.
      max_recoveries: How often a run may be taken over from a dead engine
        before it is marked ``dead``.
      broker: A broker URL (``memory://`` by default) or an open `Broker`.
      serve: Group routes to run a worker for inside this engine's nursery
        (as `open_worker` would), e.g. ``["payments"]``.
      worker_concurrency: Tasks that embedded worker runs at once.
      capabilities: What the embedded worker offers to steps with
        ``requires=``.
      build_id: The build the embedded worker announces and takes the
        tasks of (docs/deployments.md); None: the app's registration hash.
      remote_redispatch: ``(seconds, maximum)``: a remote step with no result
        ``seconds`` after it was sent is sent again with its attempt count
        raised, at most ``maximum`` times; then it fails with code ``lost``.
        It applies to steps already out when the engine opens, whoever sent
        them. Off by default: durable brokers redeliver what a dead worker
        held, steps out on a ``memory://`` broker that went with its process
        are sent again at once, and a send the broker refused is retried
        later; but a task a durable broker lost, or one that never reached
        it (an engine died between committing a step and sending it), is
        only sent again with this on.
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
      codec: Keep every payload encoded at rest with this codec (such as
        `AesGcmCodec`): the store is wrapped in a `CodecStore` (see
        docs/payload-codecs.md). None keeps payloads as they are.
      blobs: Keep payloads longer than ``blob_threshold`` characters in this
        `BlobStore` (or a `LocalBlobStore` in this directory); rows and
        broker messages carry references. Pruning deletes the blobs only
        pruned runs referred to, once ``blob_grace`` seconds old (see
        docs/large-payloads.md). None keeps payloads in the rows.
      blob_threshold: See ``blobs``.
      blob_grace: See ``blobs``.
      signing: Sign every task with the ring's current key, and settle
        only results signed by a key of the ring; the embedded worker
        does the same (see docs/message-signing.md).

    Raises:
      InvalidURLError: The store URL is malformed.
      UsageError: An option is out of range, or ``tracing`` is asked for
        without opentelemetry-api installed.
      SearchAttributeError: A search attribute ``app`` declares is recorded
        in the store with another type.
      OSError: The console's address cannot be listened on (raised from
        the engine's nursery, in its exception group).
    """
    # Every option but the resources (app, store, broker), as declared
    # (tests/test_options_declared_once.py checks that none is left out).
    options = EngineOptions(
        engine_id=engine_id,
        seed=seed,
        wall_clock=wall_clock,
        timer_batch_size=timer_batch_size,
        lease_ttl=lease_ttl,
        reconcile_interval=reconcile_interval,
        result_poll_interval=result_poll_interval,
        max_recoveries=max_recoveries,
        serve=serve,
        worker_concurrency=worker_concurrency,
        capabilities=capabilities,
        build_id=build_id,
        remote_redispatch=remote_redispatch,
        blocked_recheck=blocked_recheck,
        traceback_limit=traceback_limit,
        retention=retention,
        tracing=tracing,
        metrics_interval=metrics_interval,
        console=console,
        webhook_secret=webhook_secret,
        codec=codec,
        blobs=blobs,
        blob_threshold=blob_threshold,
        blob_grace=blob_grace,
        signing=signing,
    )
    if not isinstance(app, App):
        raise UsageError(f"open_engine needs a td.App, not {app!r}")
    if console is not None and not isinstance(console, ConsoleOptions):
        raise UsageError(f"console= takes a td.ConsoleOptions or None, not {console!r}")
    routes = check_group_routes(app, serve, "serve")
    check_codec(codec)
    rng = random.Random(seed)
    if engine_id is None:
        engine_id = f"engine-{rng.getrandbits(32):08x}"
    blob_options = BlobOptions.of(blobs, blob_threshold, blob_grace)
    async with AsyncExitStack() as stack:
        # The codec over the blob store: what goes to the blob store is
        # encrypted too. Over both, the guard of turns that cannot decode.
        store_obj = guarded(
            with_codec(blob_options.wrap(await enter_store(stack, store), wall_clock), codec)
        )
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
            broker_url=broker if isinstance(broker, str) else None,
        ) as rt:
            engine = Engine(rt, app)
            for unserved in await engine.unserved_on_error_routes():
                logger.warning(
                    "workflow %r routes %s to %r, which no engine or live worker knows",
                    unserved.workflow,
                    "every failure" if unserved.code is None else f"code {unserved.code!r}",
                    unserved.handler,
                )
            if console is not None:
                # Imported here: `import trio_durable` never loads starlette.
                from .._console import serve_console

                engine.console_url = await rt.nursery.start(
                    serve_console, engine, console, name="trio_durable console"
                )
            yield engine
