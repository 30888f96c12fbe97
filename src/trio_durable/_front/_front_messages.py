"""Queries, updates and published values, as `Engine` and `Client` offer
them: each one line into `_read_replay`, `_updates` or `_published` on the
front end's parts (see docs/queries-and-updates.md)."""

from __future__ import annotations

from typing import Any

from .._features.messages._published import Front, get_event
from .._features.messages._read_replay import query_run
from .._features.messages._updates import update_run
from .._kernel._wakes import announce
from ._front_core import FrontPart


class QueriesAndUpdates(FrontPart):
    """`query`, `update` and `get_event` on a front end."""

    def _message_front(self) -> Front:
        core = self._core
        core.check_open()
        return Front(
            store=core.store,
            app=core.app,
            clock=core.clock,
            endings=core.endings,
            poll_interval=core.poll_interval,
            origin=core.origin,
            new_id=lambda: f"update-{core.rng.getrandbits(64):016x}",
            # Every engine that can run it is told, so that one whose turn of
            # it is in flight runs another.
            wake_ops=lambda runs: announce(core.store, core.origin, "wake", runs),
            woke=core.waker.woke,
            traceback_limit=core.traceback_limit,
            ask=core.ask_query,
        )

    async def query(
        self, run_id: str, name: str, *args: Any, namespace: str | None = None, type: Any = Any
    ) -> Any:
        """Ask the run's query handler ``name`` with ``args``.

        The caller replays the run in its own process, up to where its
        history stands, writing nothing and running no step, and calls the
        handler the body registered by then. So any engine or client with
        the app answers, whichever engine holds the run. A remote
        workflow's run whose body the app lacks is replayed by one of its
        workers, which an engine asks (docs/remote-workflows.md). A run that
        continued as new is queried at its latest generation; an ended run
        answers from where it ended.

        Args:
          run_id: The run's id.
          name: The query's name.
          *args: Its arguments (JSON-able; the handler gets them as plain
            JSON values).
          namespace: If given, a run of another namespace counts as missing.
          type: The type to structure the answer as (default: plain JSON).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UnknownHandlerError: The body registered no query ``name`` by
            where the run stands.
          InvalidArgumentsError: ``args`` do not fit the handler.
          QueryFailed: The handler raised, or no worker answered (code
            ``no_answer``).
          NonDeterminismError: The run's history does not match the body.
          UsageError: A client whose app lacks the workflow's body (opened
            without an app, or a remote workflow's run).
        """
        return await query_run(self._message_front(), run_id, name, args, namespace, type)

    async def update(
        self,
        run_id: str,
        name: str,
        *args: Any,
        namespace: str | None = None,
        update_id: str | None = None,
        type: Any = Any,
    ) -> Any:
        """Apply the run's update handler ``name`` to ``args``, durably, and
        return its result.

        The caller replays the run where it stands and runs the update's
        validator (for a remote workflow's run whose body the app lacks, a
        worker does): a rejection raises and writes nothing. Accepted, the
        update is stored and the run woken (made due in the store, so an
        engine that opens later takes it too); its next turn, on whichever
        engine takes it, applies it where the body waits, before the
        operation it waits in returns, and records it in the run's
        history, and this call returns the handler's result (waiting for
        it without polling where the store announces writes).

        Args:
          run_id: The run's id (its latest generation, if it continued).
          name: The update's name.
          *args: Its arguments (JSON-able; the handler and the validator get
            them as plain JSON values).
          namespace: If given, a run of another namespace counts as missing.
          update_id: The update's id: an update sent again with it is not
            applied again, and returns the first one's outcome (waking the
            run again if it is not applied yet). Made up if not given.
          type: The type to structure the result as (default: plain JSON).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run has ended, or ended before it
            applied the update.
          UnknownHandlerError: The body registered no update ``name`` by
            where the run stands; nothing is written.
          InvalidArgumentsError: ``args`` do not fit the handler; nothing
            is written.
          UpdateRejected: Its validator rejected it (nothing is written;
            or, if the run's state changed before its turn, it is recorded
            as rejected).
          UpdateFailed: The handler raised in the run's turn.
          UsageError: ``update_id`` is malformed, or a client's app lacks
            the workflow's body (opened without an app, or a remote
            workflow's run).
          EngineClosedError: The engine closed while the call waited (a
            client's: `trio.ClosedResourceError`); send it again with the
            same ``update_id`` elsewhere for its outcome.
        """
        return await update_run(
            self._message_front(), run_id, name, args, namespace, update_id, type
        )

    async def get_event(
        self,
        run_id: str,
        key: str,
        timeout: float | None = None,  # noqa: ASYNC109 (returns None when it passes)
        *,
        namespace: str | None = None,
        type: Any = Any,
    ) -> Any:
        """Wait for the value the run published under ``key``
        (`Context.set_event`) and return it (DBOS's ``get_event``).

        Args:
          run_id: The run's id (a run that continued as new publishes under
            each generation's own id).
          key: The key.
          timeout: Seconds to wait at most; None waits until the value is
            published or the run ends.
          namespace: If given, a run of another namespace counts as missing.
          type: The type to structure the value as (default: plain JSON).

        Returns:
          The value last published under ``key``; None if ``timeout``
          passed first, or the run ended without publishing it.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: ``key`` is not a non-empty string, or ``timeout`` is
            negative or not finite.
          EngineClosedError: The engine closed while the call waited (a
            client's: `trio.ClosedResourceError`).
        """
        return await get_event(self._message_front(), run_id, key, timeout, namespace, type)
