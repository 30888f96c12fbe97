"""The client: runs seen and controlled from a process that runs none.

`open_client` opens a store (and, if asked, a broker) and yields a `Client`,
which starts, reads, waits for, signals, cancels and retries runs. It takes
no leases and runs no turns: its writes go through the same functions as
the engine's (`_runs`, `_control`), with an announcement in the same
batch, so that an engine serving the run, in this process or another,
learns of the write at once (see docs/client.md).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, final

import trio

from .._base._clock import Clock
from .._base._exceptions import UsageError
from .._brokers import enter_broker
from .._brokers._base import Broker
from .._features.entities._entities import EntityRef, client_entity
from .._features.events._events import EventFront
from .._features.lifecycle._lifecycle import check_timeout, deadlines, workflow_timeout
from .._features.messages._streams import StreamWaiters
from .._features.starts._runs import (
    Endings,
    create_runs,
    new_runs,
    with_search_attributes_all,
)
from .._features.starts._start_batch import StartBatcher
from .._kernel._wakers import AnnouncingWaker
from .._kernel._wakes import ends_delivery, keep_watching, read_interval
from .._payloads._blobs import DEFAULT_BLOB_GRACE, DEFAULT_BLOB_THRESHOLD, BlobStore
from .._payloads._codec import PayloadCodec
from .._stores import enter_store
from .._stores._base import RunWatch, Store
from .._stores._blob_store import BlobOptions
from .._stores._codec import check_codec, with_codec
from .._stores._versions import refuse_older
from ._app import App, Workflow
from ._front_core import FrontCore
from ._front_end import FrontEnd
from ._front_events import client_front
from ._handle import RunHandle

_RESULT_POLL_INTERVAL: Final = 1.0
"""Seconds between reads of a run in `Client.result` on a store that is no
`RunWatch` (there, nothing announces the run's end)."""


@final
class Client(FrontEnd):
    """Starts, reads and controls runs; runs none of them.

    It also finds and reads runs, exports their histories, and prunes
    ended ones, as `Engine` does (`list_runs`, `history`, `run_detail`,
    `fan_page`, `export_history`, `prune`).

    Made by `open_client`. It takes no leases: engines (in this process or
    others) sharing its store run the runs it starts, signals, cancels and
    retries.

    Attributes:
      store: The store.
      broker: The broker, or None if none was given.
      app: The application it checks starts against, or None.
      client_id: This client's id, which its writes carry.
      clock: Its `Clock`.
    """

    def __init__(
        self,
        store: Store,
        broker: Broker | None,
        app: App | None,
        clock: Clock,
        rng: random.Random,
    ) -> None:
        self.store = store
        self.broker = broker
        self.app = app
        self.clock = clock
        self.client_id = f"client-{rng.getrandbits(64):016x}"
        self._rng = rng
        self._closed = False
        self._core = FrontCore(
            store=store,
            app=app,
            # Outputs are structured as an app's workflows return them; with
            # no app, as plain JSON.
            types=app if app is not None else App("client"),
            clock=clock,
            origin=self.client_id,
            rng=rng,
            waker=AnnouncingWaker(store, self.client_id),
            endings=Endings(),
            streams=StreamWaiters(),
            # Where writes are announced, `result` and `get_event` wait for
            # the announcement alone; elsewhere they read the run again now
            # and then.
            poll_interval=read_interval(store, _RESULT_POLL_INTERVAL),
            broker=broker,
            check_open=self._check_open,
        )
        # Starts that arrive together are written in one batch, by a task
        # in the client's nursery (`open_client`).
        self._starts: StartBatcher | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the client is closed")

    # What is the client's own: how it starts runs (created ``pending``,
    # announced for an engine to take), sends events and calls entities.

    def _event_front(self) -> EventFront:
        self._check_open()
        if self.app is None:
            raise UsageError(
                "send_event needs the app whose workflows subscribe: open_client(app=...)"
            )
        return client_front(
            self.store,
            self.app,
            self.clock.now,
            lambda: f"event-{self._rng.getrandbits(64):016x}",
            self.client_id,
            self._core.waker.wake_ops,
        )

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
        [handle] = await self._start_many(
            workflow, [args], [run_id], namespace, tags, timeout, search_attributes
        )
        return handle

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
        self._check_open()
        timeout = check_timeout(timeout)
        news = new_runs(self.app, workflow, inputs, run_ids, namespace, tags)
        if not news:
            return []
        news = await with_search_attributes_all(
            self.store, self.app, news, search_attributes, self.clock.now()
        )
        timeout = timeout or workflow_timeout(self.app, news[0].workflow, news[0].version)
        results = await create_runs(
            self.store,
            self._starts,
            self._rng,
            self.clock.now(),
            news,
            also=lambda run: self._core.waker.wake_ops([run]),
            own=lambda run: deadlines(run, timeout),
        )
        return [RunHandle.of(stored, self) for stored, _ in results]

    def _entity(self, name: str, key: Any, call_id: str | None) -> EntityRef:
        return client_entity(
            app=self.app,
            store=self.store,
            clock=self.clock,
            rng=self._rng,
            wake=self._core.waker.wake_ops,
            result=self.result,
            check_open=self._check_open,
            name=name,
            key=key,
            call_id=call_id,
        )


@asynccontextmanager
async def open_client(
    store: str | Store,
    *,
    broker: str | Broker | None = None,
    app: App | None = None,
    wall_clock: Callable[[], float] = time.time,
    codec: PayloadCodec | None = None,
    blobs: BlobStore | str | os.PathLike[str] | None = None,
    blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
    blob_grace: float = DEFAULT_BLOB_GRACE,
) -> AsyncIterator[Client]:
    """Open a client of the runs in ``store``.

    Args:
      store: A store URL (``sqlite:///path.db``, ``postgresql://...``,
        ``memory://``) or an open `Store` (not closed on exit).
      broker: A broker URL or an open `Broker`, for `Client.fleet` and
        `Client.unserved_on_error_routes`; None for none.
      app: The application to check starts against and to structure
        outputs with; None to start workflows by name, untyped.
      wall_clock: Read once to anchor durable time (see `Clock`).
      codec: The codec the store's payloads are kept with (such as
        `AesGcmCodec`; see docs/payload-codecs.md), or None.
      blobs: The engines' blob store (see `open_engine`): payloads that
        refer to it are read from it, and payloads the client writes
        (starts, signals) longer than ``blob_threshold`` go to it.
      blob_threshold: See ``blobs``.
      blob_grace: Seconds a blob is kept after its last write when
        `Client.prune` deletes runs (see `open_engine`).

    A client never changes a store's schema: a SQLite or PostgreSQL store
    whose schema is older than this trio-durable's is refused, with
    nothing written (a new store, with no schema yet, is created).

    Raises:
      InvalidURLError: A URL is malformed.
      SchemaVersionError: The store's schema is older than this
        trio-durable's: upgrade it with ``trio-durable migrate``.
      StoreError: The store cannot be reached (the message masks the URL's
        password).
      UsageError: ``app`` is not an `App`.
    """
    if app is not None and not isinstance(app, App):
        raise UsageError(f"open_client needs a td.App or None, not {app!r}")
    check_codec(codec)
    blob_options = BlobOptions.of(blobs, blob_threshold, blob_grace)
    if isinstance(store, str):
        await refuse_older(store, "a client")
    async with AsyncExitStack() as stack:
        # The codec outermost: what goes to the blob store is encrypted too.
        store_obj = with_codec(
            blob_options.wrap(await enter_store(stack, store), wall_clock), codec
        )
        broker_obj = None if broker is None else await enter_broker(stack, broker)
        client = Client(store_obj, broker_obj, app, Clock(wall_clock), random.Random())
        thrown: BaseException | None = None
        try:
            async with trio.open_nursery() as nursery:
                client._starts = StartBatcher(
                    store_obj, lambda: trio.ClosedResourceError("the client is closed")
                )
                await nursery.start(client._starts.serve, name="trio_durable client starts")
                if isinstance(store_obj, RunWatch):
                    await nursery.start(
                        keep_watching,
                        store_obj,
                        client.client_id,
                        ends_delivery(client._core.endings, [client._core.streams]),
                        name="trio_durable client watch",
                    )
                try:
                    yield client
                except BaseException as exc:
                    thrown = exc
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # What the block raised comes out as it was raised, not wrapped
            # in the group of the nursery that only held the watch.
            if thrown is not None and list(group.exceptions) == [thrown]:
                raise thrown from None
            raise
        finally:
            client._closed = True
            # Callers still waiting (in tasks outside the client's block)
            # would wait for ever once its watch is gone.
            client._core.endings.close(_closed)
            client._core.streams.close(_closed)


def _closed() -> trio.ClosedResourceError:
    return trio.ClosedResourceError("the client closed while the call waited")
