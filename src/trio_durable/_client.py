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
from functools import partial
from typing import Any, Final, final

import trio

from ._app import App, Workflow
from ._blob_store import BlobOptions
from ._blobs import DEFAULT_BLOB_GRACE, DEFAULT_BLOB_THRESHOLD, BlobStore
from ._brokers import enter_broker
from ._brokers._base import Broker
from ._clock import Clock
from ._codec import PayloadCodec
from ._control import cancel_run, read_run, retry_run, signal_run
from ._entities import EntityRef, client_entity
from ._events import EventFront
from ._exceptions import UsageError
from ._fleet import Fleet, aggregate
from ._fork import fork_run, retry_from
from ._front_events import SendsEvents, client_front
from ._front_fork import ForksRuns
from ._front_hooks import HookActions
from ._front_messages import QueriesAndUpdates
from ._front_queries import RunQueries
from ._front_schedules import ManagesSchedules
from ._front_starts import StartsRuns
from ._front_streams import ReadsStreams
from ._handle import RunHandle
from ._handoff import UnservedRoute
from ._handoff import unserved_on_error_routes as _unserved
from ._lifecycle import check_timeout, continued_to, deadlines, workflow_timeout
from ._published import Front
from ._records import Run
from ._runs import (
    Endings,
    await_end,
    create_runs,
    new_runs,
    outcome,
    with_search_attributes_all,
)
from ._start_batch import StartBatcher
from ._stores import enter_store
from ._stores._base import RunWatch, Store
from ._stores._codec import check_codec, with_codec
from ._stores._ops import Op
from ._streams import StreamFront, StreamWaiters
from ._wakes import announce, ends_delivery, keep_watching, read_interval

_RESULT_POLL_INTERVAL: Final = 1.0
"""Seconds between reads of a run in `Client.result` on a store that is no
`RunWatch` (there, nothing announces the run's end)."""


@final
class Client(
    RunQueries,
    StartsRuns,
    HookActions,
    SendsEvents,
    ManagesSchedules,
    QueriesAndUpdates,
    ForksRuns,
    ReadsStreams,
):
    """Starts, reads and controls runs; runs none of them.

    It also finds and reads runs, and prunes ended ones, as `Engine` does
    (`list_runs`, `history`, `run_detail`, `fan_page`, `prune`).

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
        # Outputs are structured as an app's workflows return them; with no
        # app, as plain JSON.
        self._types = app if app is not None else App("client")
        self._endings = Endings()
        self._streams = StreamWaiters()
        # Where writes are announced, `result` and `get_event` wait for the
        # announcement alone; elsewhere they read the run again now and then.
        self._poll_interval = read_interval(store, _RESULT_POLL_INTERVAL)
        self._closed = False
        # Starts that arrive together are written in one batch, by a task
        # in the client's nursery (`open_client`).
        self._starts: StartBatcher | None = None

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("the client is closed")

    def _query_store(self) -> Store:
        self._check_open()
        return self.store

    # What `HookActions` (webhooks, breakpoints) needs of its front end.

    def _check_live(self) -> None:
        self._check_open()

    def _origin(self) -> str:
        return self.client_id

    def _wake_ops(self, runs: Sequence[Run]) -> Sequence[Op]:
        return self._wake(runs)

    # What `SendsEvents` (`send_event`) needs of its front end.

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
            self._wake,
        )

    def _stream_front(self, namespace: str | None) -> StreamFront:
        self._check_open()
        return StreamFront(
            store=self.store,
            waiters=self._streams,
            poll_interval=_RESULT_POLL_INTERVAL,
            read_run=lambda run_id: self.get(run_id, namespace=namespace),
        )

    def _schedules_app(self) -> App | None:
        return self.app

    # What `QueriesAndUpdates` (`query`, `update`, `get_event`) needs.

    def _message_front(self) -> Front:
        self._check_open()
        return Front(
            store=self.store,
            app=self.app,
            clock=self.clock,
            endings=self._endings,
            poll_interval=self._poll_interval,
            origin=self.client_id,
            new_id=lambda: f"update-{self._rng.getrandbits(64):016x}",
            wake_ops=self._wake,
            woke=lambda run: None,
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
            also=lambda run: self._wake([run]),
            own=lambda run: deadlines(run, timeout),
        )
        return [RunHandle.of(stored, self) for stored, _ in results]

    async def get(self, run_id: str, *, namespace: str | None = None) -> Run:
        """The run as stored now (see `Engine.get`).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: ``namespace`` is malformed.
        """
        self._check_open()
        return await read_run(self.store, run_id, namespace)

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        """Wait until the run ends, wherever it runs, and return its output
        (see `Engine.result`; without an app, as plain JSON).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          RunFailed: The run failed or is dead (`RunCancelled` if cancelled).
          trio.ClosedResourceError: The client is closed, or closed while
            the call waited (on a store other than the memory store).
        """
        self._check_open()
        read = partial(self.get, run_id, namespace=namespace)
        run = await await_end(self.store, self._endings, self._poll_interval, run_id, read)
        while (following := await continued_to(self.store, run)) is not None:
            # A run that continued as new ends with its chain's last generation.
            read = partial(self.get, following, namespace=namespace)
            run = await await_end(self.store, self._endings, self._poll_interval, following, read)
        return await outcome(self.store, self._types, run)

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, namespace: str | None = None
    ) -> None:
        """Send the signal ``name`` with ``payload`` to a run (see
        `Engine.signal`); the engine serving it resumes it at once.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run already ended.
          SerializationError: The payload cannot be serialized.
          UsageError: ``name`` is not a non-empty string.
        """
        self._check_open()
        await signal_run(self.store, self.clock.now(), run_id, name, payload, namespace, self._wake)

    async def cancel(
        self, run_id: str, *, compensate: bool = False, namespace: str | None = None
    ) -> None:
        """Cancel a run, and the children it awaits (see `Engine.cancel`).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run already ended.
        """
        self._check_open()
        await cancel_run(
            self.store,
            self.clock.now(),
            run_id,
            compensate,
            namespace,
            lambda runs: announce(self.store, self.client_id, "cancel", runs),
        )

    async def retry(
        self, run_id: str, *, namespace: str | None = None, from_seq: int | None = None
    ) -> Run:
        """Run a failed or dead run's body again from its checkpoints, send
        again the remote steps a suspended run waits on, or, with
        ``from_seq``, run any run that ended again from that seq, in place
        (see `Engine.retry`); returns the run as the retry wrote it,
        ``pending`` (``suspended`` and due now, for a suspended run; an
        engine may have taken it up since).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run is neither failed nor dead, nor
            suspended waiting on a remote step (with ``from_seq``: has not
            ended, or continued as new); nothing changed.
          ForkPointError: ``from_seq`` is refused (see `Engine.retry`);
            nothing changed.
        """
        self._check_open()
        if from_seq is not None:
            return await retry_from(
                self.store, self.clock.now(), run_id, from_seq, namespace, self._wake
            )
        wakes = await retry_run(
            self.store, self._types, self.clock.now(), run_id, namespace, self._wake
        )
        return wakes[-1]

    async def _fork(
        self, run_id: str, from_seq: int, new_run_id: str | None, namespace: str | None
    ) -> RunHandle[Any]:
        self._check_open()
        fork = await fork_run(
            self.store,
            self.app,
            self.clock.now(),
            run_id,
            from_seq,
            new_run_id,
            namespace,
            self.client_id,
            self._wake,
        )
        return RunHandle.of(fork, self)

    def _wake(self, runs: Sequence[Run]) -> list[Op]:
        """Announce, with a write that wakes them, runs for an engine to
        take at once."""
        return announce(self.store, self.client_id, "wake", runs)

    def _need_broker(self) -> Broker:
        if self.broker is None:
            raise UsageError("this needs a broker: open the client with broker=URL")
        return self.broker

    async def fleet(self) -> Fleet:
        """What live workers announce, aggregated (see `Engine.fleet`).

        Raises:
          UsageError: The client was opened without a broker.
        """
        self._check_open()
        return aggregate(await self._need_broker().worker_descriptors())

    async def unserved_on_error_routes(self) -> list[UnservedRoute]:
        """Routes of the client's app whose handler no live worker knows
        (see `Engine.unserved_on_error_routes`); none without an app.

        Raises:
          UsageError: The client was opened without a broker.
        """
        self._check_open()
        return await _unserved(self._need_broker(), self._types)

    def entity(self, name: str, key: Any, *, call_id: str | None = None) -> EntityRef:
        """One key of the entity ``name`` of the client's app (see
        `Engine.entity`): an exclusive call's run is created for an engine
        sharing the store to take at once, and the call waits for its
        result; a shared call reads the state here.

        Raises:
          UnknownEntityError: The client has no app, or its app no entity
            ``name`` (or, at the call, no such handler); nothing is written.
          EntityKeyError: ``key`` is not of the entity's key type; nothing
            is written.
          InvalidArgumentsError: At the call, the inputs do not fit the
            handler; nothing is written.
          RunFailed: An exclusive handler raised; the state is unchanged.
        """
        return client_entity(
            app=self.app,
            store=self.store,
            clock=self.clock,
            rng=self._rng,
            wake=self._wake,
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

    Raises:
      InvalidURLError: A URL is malformed.
      StoreError: The store cannot be reached (the message masks the URL's
        password).
      UsageError: ``app`` is not an `App`.
    """
    if app is not None and not isinstance(app, App):
        raise UsageError(f"open_client needs a td.App or None, not {app!r}")
    check_codec(codec)
    blob_options = BlobOptions.of(blobs, blob_threshold, blob_grace)
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
                        ends_delivery(client._endings, client._streams),
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
            client._endings.close(_closed)
            client._streams.close(_closed)


def _closed() -> trio.ClosedResourceError:
    return trio.ClosedResourceError("the client closed while the call waited")
