"""Runs as their callers see them: starting one, waiting for its end, and
the value or exception it ends with.

A run is started idempotently by id (by `Engine.start`, created already
leased to the engine that starts it, so its first turn needs no write of
its own; by `Client.start`, leased to none). A caller of `result` waits for
the end: on a store whose writers all share this process, for the store's
own end event; elsewhere for the engine that ends the run here, or the
announcement of an engine elsewhere (`_wakes`), to say so (`Endings`), or
for the next read of the store.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast, final

import attrs
import trio

from ..._base import _serde
from ..._base._exceptions import (
    RecordedTraceback,
    RunCancelled,
    RunConflictError,
    RunFailed,
    RunTerminated,
    UnknownWorkflowError,
    UsageError,
)
from ..._base._index_text import refuse_nul
from ..._base._records import LATEST_VERSION, TERMINAL_STATUSES, ErrorInfo, Run
from ..._base._run_records import RunRecord
from ..._kernel._definitions import Workflow, workflow_of
from ..._kernel._endings import Ending as Ending
from ..._kernel._endings import Endings as Endings
from ..._kernel._replay import TurnDraft
from ..._payloads._stored_payloads import check_readable
from ..._stores._base import ChangeFeed, offers
from ..._stores._ops import CreateRun
from ..children._children import output_type
from ..flow_control._admission import StartControls, start_controls
from ..flow_control._start_controls import create_controlled
from ..lifecycle._lifecycle import check_timeout, deadlines, workflow_timeout
from ..on_error._handoff import output_source
from ..search._search_attributes import start_attributes
from ._start_batch import StartBatcher, create_batched, derive_id, prepare_run

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry
    from ..._kernel._runtime import Runtime
    from ..._stores._base import Store
    from ..._stores._ops import Op


async def start_run(
    rt: Runtime,
    workflow: Workflow[..., Any] | str,
    args: tuple[Any, ...],
    run_id: str | None,
    namespace: str,
    tags: tuple[str, ...] | list[str],
    timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
    search_attributes: Mapping[str, Any] | None = None,
) -> Run:
    """`Engine.start`: the run as stored, created and woken here if new."""
    [stored] = await start_runs(
        rt, workflow, [args], [run_id], namespace, tags, timeout, search_attributes
    )
    return stored


async def start_runs(
    rt: Runtime,
    workflow: Workflow[..., Any] | str,
    inputs: Sequence[tuple[Any, ...]],
    run_ids: Sequence[str | None],
    namespace: str,
    tags: tuple[str, ...] | list[str],
    timeout: float | None = None,  # noqa: ASYNC109 (a durable deadline)
    search_attributes: Mapping[str, Any] | None = None,
) -> list[Run]:
    """`Engine.start` and `Engine.start_many`: the runs as stored, in
    order, created (in one batch of the engine's `StartBatcher` unless the
    workflow has run controls) and woken here if new."""
    rt.scheduler.check_open()
    timeout = check_timeout(timeout)
    app: Registry | None = rt.app
    if isinstance(workflow, str) and not any(wf.name == workflow for wf in rt.app.workflows):
        refuse_nul("a workflow's name", workflow, UnknownWorkflowError)
        # Served by convention (docs/remote-workflows.md): a workflow this
        # engine does not register runs if live workers announce it; they
        # check its inputs.
        if await rt.catalogue.served(workflow, LATEST_VERSION, namespace) is None:
            # What was read may predate the workers that announce it now: a
            # start refused reads the announcements afresh first.
            rt.catalogue.invalidate()
        if await rt.catalogue.served(workflow, LATEST_VERSION, namespace) is None:
            raise UnknownWorkflowError(
                f"no workflow {workflow!r} in app {rt.app.name!r}, and no live worker announces it"
            )
        app = None
    news = new_runs(app, workflow, inputs, run_ids, namespace, tags)
    if not news:
        return []
    news = await with_search_attributes_all(
        rt.store, rt.app, news, search_attributes, rt.clock.now()
    )
    timeout = timeout or workflow_timeout(app, news[0].workflow, news[0].version)
    # A run is created leased to this engine, so its first turn needs no
    # write of its own; if this engine dies, the lease lapses and any
    # engine takes the run over.
    results = await create_runs(
        rt.store,
        rt.features.part(StartBatcher),
        rt.rng,
        rt.clock.now(),
        news,
        owner=rt.engine_id,
        lease_ttl=rt.options.lease_ttl,
        own=lambda run: deadlines(run, timeout),
    )
    for new, (stored, created) in zip(news, results, strict=True):
        if not created:
            continue
        rt.telemetry.emit_run("run.started", stored)
        # A run created with its admission reads it in its first turn.
        initial = None
        if new.controls is None:
            records = {record.kind: record for record in deadlines(stored, timeout)}
            initial = TurnDraft(run=stored, checkpoints={}, records=records)
        rt.scheduler.wake(stored.id, initial=initial)
    return [stored for stored, _ in results]


async def create_runs(
    store: Store,
    batcher: StartBatcher | None,
    rng: random.Random,
    now: float,
    news: Sequence[NewRun],
    *,
    owner: str | None = None,
    lease_ttl: float = 0.0,
    also: Callable[[Run], Sequence[Op]] = lambda run: (),
    own: Callable[[Run], Sequence[RunRecord]] = lambda run: (),
) -> list[tuple[Run, bool]]:
    """`create_run` for each of ``news``, in order: in one batch of
    ``batcher`` (or one `Store.apply` without one), unless the workflow
    has run controls, whose keys are claimed one run after another.
    """
    if news[0].controls is not None:
        return [
            await create_run(
                store, rng, now, new, owner=owner, lease_ttl=lease_ttl, also=also, own=own
            )
            for new in news
        ]
    pairs = [(new, prepare_run(new, rng, now, owner=owner, lease_ttl=lease_ttl)) for new in news]
    return await create_batched(
        batcher,
        store,
        rng,
        pairs,
        also,
        own=own,
        # Many starts write none if one id given conflicts, and a run that
        # exists must not get another start's search attributes nor a
        # client's wake announcement: such ids are looked up first. One
        # start by id, with nothing beside its `CreateRun`, skips the read:
        # the write finds a run that exists and changes nothing. A derived
        # id is new but for a seed used again, which its write finds.
        read_first=_look_up_ids(news, pairs, also),
        check=lambda new, run: same_workflow(run, new.workflow, new.namespace),
    )


def _look_up_ids(
    news: Sequence[NewRun],
    pairs: Sequence[tuple[NewRun, Run]],
    also: Callable[[Run], Sequence[Op]],
) -> bool:
    if len(news) == 1:
        [(new, run)] = pairs
        return new.run_id is not None and bool(new.search_records or also(run))
    return any(new.run_id is not None for new in news)


def new_runs(
    app: Registry | None,
    workflow: Workflow[..., Any] | str,
    inputs: Sequence[tuple[Any, ...]],
    run_ids: Sequence[str | None],
    namespace: str,
    tags: tuple[str, ...] | list[str],
) -> list[NewRun]:
    """`new_run` for each of ``inputs`` (with the id of ``run_ids`` at its
    index); every input is checked before any is written.

    Raises:
      UsageError: ``inputs`` is not a sequence of tuples, or ``run_ids``
        is not one id (or None) per input.
    """
    if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
        raise UsageError(f"inputs must be a sequence of argument tuples, not {inputs!r}")
    if len(run_ids) != len(inputs):
        raise UsageError(f"run_ids must hold one id per input ({len(inputs)}), not {len(run_ids)}")
    news = []
    for args in inputs:
        if not isinstance(args, tuple):
            raise UsageError(
                f"each input is the tuple of one run's arguments, not {args!r} (write ({args!r},))"
            )
    for args, run_id in zip(inputs, run_ids, strict=True):
        news.append(new_run(app, workflow, args, run_id, namespace, tags))
    return news


async def with_search_attributes_all(
    store: Store, app: Registry | None, news: list[NewRun], attributes: object, now: float
) -> list[NewRun]:
    """``news`` with their (shared) search attributes checked once."""
    if not news:
        return news
    first = await with_search_attributes(store, app, news[0], attributes, now)
    if first is news[0]:
        return news
    return [
        first,
        *(
            attrs.evolve(
                new,
                search_attributes=first.search_attributes,
                search_records=first.search_records,
            )
            for new in news[1:]
        ),
    ]


@final
@attrs.define(frozen=True, kw_only=True)
class NewRun:
    """A run to start, its inputs checked: what `create_run` writes."""

    workflow: str
    version: str
    input: str
    run_id: str | None
    namespace: str
    tags: tuple[str, ...] | list[str]
    controls: StartControls | None = None
    # Checked by `start_attributes`, with the writes that record their types.
    search_attributes: Mapping[str, Any] = attrs.field(factory=dict)
    search_records: tuple[Op, ...] = ()


def new_run(
    app: Registry | None,
    workflow: Workflow[..., Any] | str,
    args: tuple[Any, ...],
    run_id: str | None,
    namespace: str,
    tags: tuple[str, ...] | list[str],
) -> NewRun:
    """A run of ``workflow`` to start, its inputs checked against the
    workflow's parameters.

    Without ``app``, a `Workflow` is checked as it is, and a name is taken
    as it is: its inputs are serialized unchecked and its version is
    `LATEST_VERSION`, which the engine that first runs it decides.

    Raises:
      UnknownWorkflowError: ``app`` lacks the workflow, or it is neither a
        `Workflow` nor a non-empty name (with no NUL character).
      InvalidArgumentsError: ``args`` do not fit the workflow's parameters,
        or a key function of its run controls failed on them.
      SerializationError: An input cannot be serialized.
    """
    if app is not None:
        wf: Workflow[..., Any] = workflow_of(app, workflow)
    elif isinstance(workflow, Workflow):
        wf = workflow
    elif isinstance(workflow, str) and workflow:
        refuse_nul("a workflow's name", workflow, UnknownWorkflowError)
        return NewRun(
            workflow=workflow,
            version=LATEST_VERSION,
            input=_serde.dumps(list(args)),
            run_id=run_id,
            namespace=namespace,
            tags=tags,
        )
    else:
        raise UnknownWorkflowError(f"not a workflow: {workflow!r}")
    input_json = _serde.check_workflow_args(wf, args)
    return NewRun(
        workflow=wf.name,
        version=wf.version,
        input=input_json,
        run_id=run_id,
        namespace=namespace,
        tags=tags,
        controls=start_controls(wf, input_json),
    )


async def with_search_attributes(
    store: Store, app: Registry | None, new: NewRun, attributes: object, now: float
) -> NewRun:
    """``new`` with its search attributes checked (see `start_attributes`)."""
    checked, records = await start_attributes(store, app, attributes, now)
    if not checked:
        return new
    return attrs.evolve(new, search_attributes=checked, search_records=tuple(records))


async def create_run(
    store: Store,
    rng: random.Random,
    now: float,
    new: NewRun,
    *,
    owner: str | None = None,
    lease_ttl: float = 0.0,
    also: Callable[[Run], Sequence[Op]] = lambda run: (),
    own: Callable[[Run], Sequence[RunRecord]] = lambda run: (),
) -> tuple[Run, bool]:
    """Create ``new`` unless a run with its id exists; return the run as
    stored and whether it was created (`Engine.start` and `Client.start`).

    With ``owner``, the run is created ``running``, leased to it for
    ``lease_ttl`` seconds; without, ``pending`` and unleased, due at once for
    any engine. ``also`` gives the operations to write with the run, in the
    same batch; ``own`` the records written only if the run is created
    (its deadline: a start that finds the id taken leaves it as it is).

    Raises:
      RunConflictError: The id belongs to a run of another workflow or
        namespace.
      UsageError: The id, namespace or tags are malformed.
    """
    generated = new.run_id is None
    run = prepare_run(new, rng, now, owner=owner, lease_ttl=lease_ttl)
    existing = await store.get_run(run.id)
    while generated and existing is not None:
        # A derived id must name a new run: with a fixed seed, an engine
        # restarted on the same store derives the same ids again.
        run = attrs.evolve(run, id=derive_id(new.workflow, rng))
        existing = await store.get_run(run.id)
    if existing is not None:
        return same_workflow(existing, new.workflow, new.namespace), False
    with_run = [*also(run), *new.search_records]
    records = tuple(own(run))
    if new.controls is not None:
        stored, created = await create_controlled(store, run, new.controls, with_run, records)
    else:
        [(stored, created), *_] = await store.apply([CreateRun(run, records=records), *with_run])
    if not created:
        return same_workflow(stored, new.workflow, new.namespace), False
    return stored, True


def same_workflow(run: Run, workflow: str, namespace: str) -> Run:
    """``run``, which holds an id a start asked for, if it is a run of
    ``workflow`` in ``namespace``.

    Raises:
      RunConflictError: It is not.
    """
    if run.namespace != namespace:
        # Checked first, and told without a word of the other run: a
        # tenant learns that the id is taken, nothing more.
        raise RunConflictError(
            f"run id {run.id!r} is taken by a run outside namespace {namespace!r}"
        )
    if run.workflow != workflow:
        raise RunConflictError(
            f"run id {run.id!r} belongs to a run of workflow {run.workflow!r}, not {workflow!r}"
        )
    return run


async def await_end(
    store: Store,
    endings: Endings,
    poll_interval: float,
    run_id: str,
    read: Callable[[], Awaitable[Run]],
    *,
    unended: bool = False,
) -> Run:
    """Wait until ``run_id`` ended; return it as it ended. ``read`` reads it
    from the store (and raises if it is missing); ``endings`` is told when
    it ends here or elsewhere, and the store is read again at least every
    ``poll_interval`` seconds (`math.inf`: only when told).

    ``unended`` says the run exists and cannot have ended yet (this engine
    created it and holds its lease, its first turn not yet begun: see
    `Scheduler.untouched`), so the first read is skipped: the wait is
    registered before anything can end it.
    """
    while True:
        if offers(store, ChangeFeed):
            if unended:
                unended = False
                await cast("ChangeFeed", store).run_end_event(run_id).wait()
                continue
            run = await read()
            if run.status in TERMINAL_STATUSES:
                return run
            # Every writer shares this process: wait for the change itself.
            await cast("ChangeFeed", store).run_end_event(run_id).wait()
            continue
        # Registered before the read: a run that ends while the read is in
        # flight still sets it (registered after, the end would go unseen
        # until the next poll).
        ending = endings.register(run_id)
        if unended:
            unended = False
        else:
            try:
                run = await read()
            except BaseException:
                endings.forget(run_id, ending)
                raise
            if run.status in TERMINAL_STATUSES:
                endings.forget(run_id, ending)
                return run
        with trio.move_on_after(poll_interval):
            await ending.event.wait()
        if ending.run is not None:
            # Ended by this engine, which knows the row it wrote.
            return ending.run


async def outcome(store: Store, app: Registry, run: Run) -> Any:
    """What an ended run gives its caller: its output, structured as its
    workflow (or the on-error handler it handed off to) returns it.

    Raises:
      RunFailed: The run failed or is dead (`RunCancelled` if cancelled,
        `RunTerminated` if terminated).
    """
    if run.status == "completed":
        # A run that handed off ended with its handler's output.
        source = await output_source(store, app, run) or (run.workflow, run.version)
        # Left marked by the store's layers: no codec or blob store here reads it.
        check_readable(run.output)
        return _serde.loads(run.output, output_type(app, *source))
    error = run.error or ErrorInfo(message=run.status)
    cls = {"cancelled": RunCancelled, "terminated": RunTerminated}.get(run.status, RunFailed)
    failure = cls(
        run.id,
        error.message,
        error.code,
        error.details,
        step=error.step,
        traceback=error.traceback,
    )
    if error.traceback is None:
        raise failure
    raise failure from RecordedTraceback(error.traceback)
