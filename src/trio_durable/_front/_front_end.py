"""`FrontEnd`: the methods `Engine` and `Client` share, written once.

A front end is its parts (`FrontCore`: the store, the clock, its id, where
callers wait) and a `Waker` that says who runs what its writes wake: an
engine's scheduler, or, for a client, an engine that takes the announced
run. The method families sit in the `_front_*` modules; `FrontEnd` joins
them and adds reading, waiting for and controlling runs. `Engine` adds
what only an engine has (drain, events, metrics); `Client` only its
opening. Each says how it starts runs, sends events and calls entities,
which an engine does on runs it leases itself.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from .._base import _serde
from .._base._bounds import check_name
from .._base._exceptions import UsageError
from .._base._records import DEFAULT_NAMESPACE, Run
from .._features.deployments._deployments import current_builds
from .._features.entities._entities import EntityRef, find_entity
from .._features.fork._fork import retry_from
from .._features.lifecycle._lifecycle import continued_to
from .._features.on_error._handoff import UnservedRoute
from .._features.on_error._handoff import unserved_on_error_routes as _unserved
from .._features.starts._runs import await_end, new_run, outcome, same_workflow
from .._kernel._fleet import Fleet, aggregate
from .._kernel._run_reads import read_run
from ._control import cancel_run, retry_run, signal_run, terminate_run
from ._front_bulk import BulkActions
from ._front_deployments import DeploymentActions
from ._front_events import SendsEvents
from ._front_export import ExportsHistories
from ._front_fork import ForksRuns
from ._front_hooks import HookActions
from ._front_messages import QueriesAndUpdates
from ._front_prune import PrunesRuns
from ._front_queries import RunQueries
from ._front_schedules import ManagesSchedules
from ._front_starts import StartsRuns
from ._front_streams import ReadsStreams
from ._handle import RunHandle

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._brokers._base import Broker
    from ._app import Workflow

__all__ = ["FrontEnd"]


class FrontEnd(
    RunQueries,
    StartsRuns,
    HookActions,
    SendsEvents,
    ManagesSchedules,
    QueriesAndUpdates,
    ForksRuns,
    ReadsStreams,
    BulkActions,
    PrunesRuns,
    ExportsHistories,
    DeploymentActions,
):
    """What `Engine` and `Client` share: every method of theirs but an
    engine's own (see `_front_end`)."""

    def _entity(self, name: str, key: Any, call_id: str | None) -> EntityRef:
        raise NotImplementedError

    async def get(self, run_id: str, *, namespace: str | None = None) -> Run:
        """The run as stored now.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          UsageError: ``namespace`` is malformed.
        """
        self._core.check_open()
        return await read_run(self._core.store, run_id, namespace)

    async def result(self, run_id: str, *, namespace: str | None = None) -> Any:
        """Wait until the run ends, wherever it runs, and return its output.

        The output is structured as the workflow's return annotation or,
        for a run handed to an on-error handler, as the handler's (by a
        client opened without an app, as plain JSON). For a run that
        continued as new, it is the chain's last generation's.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          RunFailed: The run failed or is dead (`RunCancelled` if cancelled);
            the error's message, code and details are the exception's.
          EngineClosedError: The engine is closed, or closed while the call
            waited (on a store other than the memory store, which tells the
            caller of the end itself); a client's: `trio.ClosedResourceError`.
        """
        core = self._core
        core.check_open()
        # Told of the run's end by the turn that ends it here, or by the
        # store's watch if it ends elsewhere: the store is read again only
        # then (or, on a store that announces nothing, now and then).
        read = partial(self.get, run_id, namespace=namespace)
        unended = core.waker.unended(run_id, namespace)
        run = await await_end(
            core.store, core.endings, core.poll_interval, run_id, read, unended=unended
        )
        while (following := await continued_to(core.store, run)) is not None:
            # A run that continued as new ends with its chain's last generation.
            read = partial(self.get, following, namespace=namespace)
            run = await await_end(core.store, core.endings, core.poll_interval, following, read)
        return await outcome(core.store, core.types, run)

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, namespace: str | None = None
    ) -> None:
        """Send the signal ``name`` with ``payload`` to a run.

        If the run is waiting for it, the run resumes; otherwise the signal is
        buffered for its next wait of that name and never lost. A run that
        continued as new is signalled at its chain's latest generation. A run whose
        workflow this engine's app lacks is announced instead, for an engine
        that has it (see docs/client.md); this one takes no turn of it. A
        client's signal is announced, and the engine serving the run
        resumes it at once.

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
          UsageError: ``name`` is not a non-empty string.
        """
        core = self._core
        core.check_open()
        run, waiting = await signal_run(
            core.store, core.clock.now(), run_id, name, payload, namespace, core.waker.wake_ops
        )
        if waiting:
            core.waker.woke(run)

    async def signal_with_start(
        self,
        workflow: Workflow[..., Any] | str,
        signal: str,
        payload: Any = None,
        *,
        run_id: str,
        args: Sequence[Any] = (),
        namespace: str = DEFAULT_NAMESPACE,
        tags: tuple[str, ...] | list[str] = (),
        search_attributes: Mapping[str, Any] | None = None,
    ) -> RunHandle[Any]:
        """Send the signal ``signal`` to the run ``run_id``, starting it
        first (a run of ``workflow`` with ``args``) if no run has that id
        (Temporal's signal-with-start): the way to feed one long-lived run
        per key (an order, a user) without knowing whether it is up yet.

        The start is `start`'s, idempotent by ``run_id``; the signal is
        `signal`'s, so a run started here keeps it for its first wait of
        that name. The signal's name and payload are checked before the
        start, so a bad one starts nothing.

        Args:
          workflow: The workflow to start, as `start` takes it.
          signal: The signal's name.
          payload: Its payload (a JSON-able value or an attrs instance).
          run_id: The run's id: the run signalled, or started.
          args: The inputs of a run started here (checked, as the
            workflow, whether or not the run exists).
          namespace: The run's namespace (a run of that id in another is
            refused, as by `start`).
          tags: Labels stored on a run started here.
          search_attributes: A started run's search attributes (see `start`).

        Returns:
          A `RunHandle` of the run signalled (as stored before the signal).

        Raises:
          RunConflictError: ``run_id`` belongs to a run of another workflow,
            or of another namespace; nothing is written.
          InvalidRunStateError: The run with that id has ended; nothing is
            written (a run's id is never used again: pick a new one).
          UnknownWorkflowError, InvalidArgumentsError: As for `start`;
            nothing is written.
          SerializationError: The payload or an input cannot be
            serialized; nothing is written.
          UsageError: ``signal`` is not a non-empty name, or ``run_id``,
            ``namespace`` or ``tags`` are malformed.
        """
        self._core.check_open()
        check_name("signal name", signal)
        _serde.dumps(payload)
        if not isinstance(run_id, str):
            raise UsageError(f"signal_with_start needs a run_id string, not {run_id!r}")
        if isinstance(args, str | bytes):
            raise UsageError(f"args must be a sequence of inputs, not {args!r}")
        # The start checked in full first (the workflow, the inputs), even
        # for a run that exists: the call's outcome never hangs on the id.
        new_run(self._core.app, workflow, tuple(args), run_id, namespace, tags)
        existing = await self._core.store.get_run(run_id)
        if existing is None:
            handle = await self._start(
                workflow,
                tuple(args),
                run_id,
                namespace,
                tags,
                search_attributes=search_attributes,
            )
        else:
            # Read first: a start of a run that exists would still write
            # its announcement, and one that ended must change nothing.
            name = workflow if isinstance(workflow, str) else workflow.name
            handle = RunHandle.of(same_workflow(existing, name, namespace), self)
        await self.signal(handle.id, signal, payload, namespace=namespace)
        return handle

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
        core = self._core
        core.check_open()
        run = await cancel_run(
            core.store, core.clock.now(), run_id, compensate, namespace, core.waker.cancel_ops
        )
        core.waker.cancelled(run)

    async def terminate(
        self, run_id: str, *, reason: str | None = None, namespace: str | None = None
    ) -> None:
        """End a run now: it ends ``terminated``, and nothing of it runs
        again, no compensation and no cleanup (unlike `cancel`, which
        delivers `Cancelled` to its body and may run its undos).

        The run is marked ``cancelling`` at once (a turn of it in flight is
        interrupted, or fenced if it runs on another engine: it writes only
        what its steps did); the next turn, on any engine of the store,
        ends it ``terminated`` without running its body, even a cleanup
        that a cancel began. Its children are left to their own policy as
        on cancel: those it awaits or started with
        ``cancel_with_parent=True`` are cancelled (each runs its own
        cleanup); terminate them too to end them now. Results of its
        remote steps that come later are stale and rejected. A parent
        awaiting it gets `RunFailed` with code ``terminated``. A run that
        continued as new is terminated at its chain's latest generation.

        Args:
          run_id: The run's id.
          reason: Why, for people: the run's error message (code
            ``terminated``); None: ``"terminated"``.
          namespace: If given, a run of another namespace counts as missing
            (and is left alone).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run already ended, or is being
            terminated already; nothing changed.
          UsageError: ``reason`` is not a string.
        """
        core = self._core
        core.check_open()
        run = await terminate_run(
            core.store, core.clock.now(), run_id, reason, namespace, core.waker.cancel_ops
        )
        core.waker.cancelled(run)

    async def retry(
        self, run_id: str, *, namespace: str | None = None, from_seq: int | None = None
    ) -> Run:
        """Run a failed or dead run's body again from its checkpoints.

        Completed steps are not run again (but for steps whose undo already
        ran, which run again); failed steps, timed-out signal waits and
        compensations are reset; a failed awaited child (or fan member) is
        retried under its same id, so the parent picks up its new outcome.
        A retried child that was cancelled gets back its signal waits, and
        sends again the remote steps whose results the cancel dropped.

        A ``suspended`` run waiting on remote steps (or on a remote
        workflow's decision task) stays suspended, and each of them is sent
        again at once as a new attempt (one whose send the broker refused
        is tried again at once): the way out when a broker lost them. A
        late failure of an earlier attempt then changes nothing, and a late
        success of it still settles the step.

        With ``from_seq``, a run that ended in any way runs again from that
        seq in place (docs/fork-and-retry.md).

        Whatever the retry deletes or resets (the failed operations, undone
        steps and their undos, everything from ``from_seq`` on, failed
        children's checkpoints), and the run's error and status as it ended,
        stay in the run's history, written in the retry's own write:
        `history` returns them as `RunHistory.retried`, one `RetriedHistory`
        per retry. Retrying a suspended run replaces nothing and keeps none.

        Args:
          run_id: The run's id.
          namespace: If given, a run of another namespace counts as missing
            (and is left alone).
          from_seq: The first seq to run again, from 1 to one past the run's
            last body seq; None retries as described first.

        Returns:
          The run as the retry wrote it, ``pending`` (``suspended`` and due
          now, for a suspended run; an engine may have taken it up since).

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          InvalidRunStateError: The run is neither failed nor dead, nor
            suspended waiting on a remote step (with ``from_seq``: has not
            ended, or continued as new); nothing changed.
          ForkPointError: ``from_seq`` is refused; nothing changed.
        """
        core = self._core
        core.check_open()
        now = core.clock.now()
        if from_seq is not None:
            run = await retry_from(
                core.store, now, run_id, from_seq, namespace, core.waker.wake_ops
            )
            core.waker.woke(run)
            return run
        wakes = await retry_run(core.store, core.types, now, run_id, namespace, core.waker.wake_ops)
        for wake in wakes:
            core.waker.woke(wake)
        return wakes[-1]

    def _broker(self) -> Broker:
        broker = self._core.broker
        if broker is None:
            raise UsageError("this needs a broker: open the client with broker=URL")
        return broker

    async def fleet(self) -> Fleet:
        """What live workers announce, aggregated per workflow, with their
        disagreements (a rollout in progress, a misconfigured worker, or a
        new build whose workflow or step parameters break runs of the
        current build: kind ``breaking``).

        Raises:
          UsageError: A client opened without a broker.
        """
        self._core.check_open()
        descriptors = await self._broker().worker_descriptors()
        return aggregate(descriptors, await current_builds(self._core.store))

    async def unserved_on_error_routes(self) -> list[UnservedRoute]:
        """Routes whose handler workflow is neither registered on this engine
        nor known to any live worker: likely a typo in a handler's name (a
        client's: routes of its app whose handler no live worker knows; none
        without an app).

        Raises:
          UsageError: A client opened without a broker.
        """
        self._core.check_open()
        return await _unserved(self._broker(), self._core.types)

    async def entity_state(self, name: str, key: Any) -> Any:
        """The state of one key of the entity ``name`` as stored now (an
        instance of the entity's class; a new one for a key never changed),
        read without calling a handler and writing nothing.

        Raises:
          UnknownEntityError: No entity ``name`` (a client with no app has
            none).
          EntityKeyError: ``key`` is not of the entity's key type.
        """
        self._core.check_open()
        entity, key_text = find_entity(self._core.app, name, key)
        return entity.load_state(await self._core.store.get_value(entity.scope, key_text))

    def entity(self, name: str, key: Any, *, call_id: str | None = None) -> EntityRef:
        """One key of the entity ``name``: its handlers are the attributes,
        ``await engine.entity("cart", key).add(item)``.

        An exclusive call is a run of the entity's internal workflow
        (``entity:<name>``) that waits its turn behind the key's earlier
        exclusive calls, fleet-wide; the call returns its result. A shared
        call runs the handler here, on the state as stored now. A client's
        exclusive call's run is created for an engine sharing the store to
        take at once.

        Args:
          name: The entity's name.
          key: The key, of the entity's key type.
          call_id: The id of an exclusive call's run: a call repeated with
            it returns the first one's result and changes nothing.

        Raises:
          UnknownEntityError: No entity ``name`` (a client with no app has
            none; or, at the call, no such handler); nothing is written.
          EntityKeyError: ``key`` is not of the entity's key type; nothing
            is written.
          InvalidArgumentsError: At the call, the inputs do not fit the
            handler; nothing is written.
          RunFailed: An exclusive handler raised; the state is unchanged.
        """
        return self._entity(name, key, call_id)
