"""Group commit of starts: the runs of starts that arrive together, created
in one batch.

Each start (`Engine.start`, `Client.start`, or all the runs of one
`start_many`) queues its runs and waits. One task, in a nursery the engine
or client owns, takes every start queued while its previous batch was being
written and writes them all in ONE `Store.apply`: one transaction, one
fsync on SQLite, however many starts rode in it. Each caller returns only
once the batch that holds its runs committed; a batch that fails fails every
start in it with the same error, and nothing of it was written (a batch is
atomic).

Only starts whose writes cannot refuse one another ride together: a
`CreateRun` never fails (an id that exists returns the stored run, and the
deadline checkpoint it carries is written only with a run it inserts), and
the writes beside it (announcements, search-attribute type records written
``strict=False``) refuse nothing. Starts under run
controls (concurrency keys, singletons, dedup keys) claim their keys by
compare-and-swap, whose lost round rolls back its batch: they are written
one by one (see `._start_controls`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, final

import attrs
import trio

from ..._base._bounds import MAX_NAME_LENGTH, check_name
from ..._base._exceptions import StoreError, UsageError
from ..._base._index_text import refuse_nul_in
from ..._base._records import Run
from ..._kernel._hooks import Feature
from ..._kernel._options import check_id
from ..._stores._ops import CreateRun, Op

if TYPE_CHECKING:
    from ..._base._run_records import RunRecord
    from ..._stores._base import Store
    from ._runs import NewRun

Entry = tuple[CreateRun, Sequence[Op]]
"""The create of a run (with the checkpoints written only if it creates
it) and the writes that go with it, in its batch."""


@final
@attrs.define(eq=False)
class _Start:
    """One caller's runs, and what their batch did."""

    entries: Sequence[Entry]
    # Set when the writer took it into a batch: from then on the caller may
    # not withdraw it, and must wait for the batch's outcome.
    taken: bool = False
    results: list[tuple[Run, bool]] | None = None
    error: BaseException | None = None
    done: trio.Event = attrs.Factory(trio.Event)


@final
class StartBatcher(Feature):
    """The starts of one engine or client, written in batches by `serve`.

    Args:
      store: Where the runs are written.
      closed: The exception a start gets once the batcher has stopped.

    Attributes:
      batches: Batches written (successfully or not): a test reads it.
    """

    def __init__(self, store: Store, closed: Callable[[], BaseException]) -> None:
        self._store = store
        self._closed = closed
        self._queue: list[_Start] = []
        self._ready = trio.Event()
        self._serving = False
        self._stopped = False
        self.batches = 0

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write the queued starts, a batch at a time, until cancelled;
        then fail the starts still queued."""
        self._serving = True
        task_status.started()
        try:
            while True:
                await self._ready.wait()
                self._ready = trio.Event()
                starts, self._queue = self._queue, []
                if starts:
                    await self._write(starts)
        finally:
            self._stopped = True
            starts, self._queue = self._queue, []
            for start in starts:
                start.taken = True
                start.error = self._closed()
                start.done.set()

    async def _write(self, starts: list[_Start]) -> None:
        ops: list[Op] = []
        positions: list[list[int]] = []
        for start in starts:
            start.taken = True
            at: list[int] = []
            for create, also in start.entries:
                at.append(len(ops))
                ops.append(create)
                ops.extend(also)
            positions.append(at)
        self.batches += 1
        try:
            # Taken starts must learn their outcome: the write finishes even
            # if the engine is closing meanwhile.
            with trio.CancelScope(shield=True):
                results = await self._store.apply(ops)
        except (StoreError, trio.ClosedResourceError) as exc:
            for start in starts:
                start.error = exc
                start.done.set()
            return
        for start, at in zip(starts, positions, strict=True):
            start.results = [results[i] for i in at]
            start.done.set()

    async def create(self, entries: Sequence[Entry]) -> list[tuple[Run, bool]]:
        """Create the runs of ``entries`` (each with its writes) in the next
        batch; return, in order, each run as stored and whether it was
        created (`CreateRun`'s result).

        Raises:
          StoreError: The batch failed; nothing of it was written.
          trio.ClosedResourceError: The store is closed.
          The ``closed`` exception: the batcher stopped (or never ran).
        """
        if self._stopped or not self._serving:
            raise self._closed()
        await trio.lowlevel.checkpoint_if_cancelled()
        start = _Start(entries)
        self._queue.append(start)
        self._ready.set()
        try:
            await start.done.wait()
        except BaseException:
            if not start.taken:
                self._queue.remove(start)
                raise
            # A taken start is written whatever we do: wait for its outcome,
            # so the caller is not told a committed start failed. The
            # cancellation comes at the caller's next checkpoint.
            with trio.CancelScope(shield=True):
                await start.done.wait()
        error = start.error
        if error is not None:
            if isinstance(error, StoreError):
                # Every start of the batch raises its own exception.
                raise StoreError(f"the batch of starts failed: {error}") from error
            if isinstance(error, trio.ClosedResourceError):
                raise trio.ClosedResourceError(str(error)) from error
            raise error
        assert start.results is not None
        return start.results


def derive_id(workflow: str, rng: random.Random) -> str:
    """A run id derived from the engine's (or client's) seeded source."""
    return f"{workflow}-{rng.getrandbits(64):016x}"


def prepare_run(
    new: NewRun,
    rng: random.Random,
    now: float,
    *,
    owner: str | None,
    lease_ttl: float,
) -> Run:
    """The row of ``new`` (its id derived if it has none), its id,
    namespace and tags checked.

    Raises:
      UsageError: The id, namespace or tags are malformed (a tag holding a
        NUL character among them).
    """
    run_id = derive_id(new.workflow, rng) if new.run_id is None else new.run_id
    check_id("run_id", run_id)
    check_id("namespace", new.namespace)
    tags = tuple(new.tags)
    if not all(isinstance(tag, str) for tag in tags):
        raise UsageError(f"tags must be strings, not {new.tags!r}")
    for tag in tags:
        if len(tag) > MAX_NAME_LENGTH:
            check_name("a tag", tag)
    refuse_nul_in("a tag", tags)
    return Run(
        id=run_id,
        workflow=new.workflow,
        version=new.version,
        namespace=new.namespace,
        status="pending" if owner is None else "running",
        input=new.input,
        tags=tags,
        search_attributes=dict(new.search_attributes),
        lease_owner=owner,
        lease_expiry=None if owner is None else now + lease_ttl,
        created_at=now,
        updated_at=now,
    )


async def create_batched(
    batcher: StartBatcher | None,
    store: Store,
    rng: random.Random,
    pairs: Sequence[tuple[NewRun, Run]],
    also: Callable[[Run], Sequence[Op]],
    *,
    own: Callable[[Run], Sequence[RunRecord]] = lambda run: (),
    read_first: bool,
    check: Callable[[NewRun, Run], object],
) -> list[tuple[Run, bool]]:
    """Create the runs of ``pairs`` (none under run controls) in one batch
    of ``batcher`` (without one, in one `Store.apply`); return each as stored and whether it was created, in
    order. A run whose id was derived and is taken gets another.

    ``own(run)`` gives the records written with a run only if its
    create inserts it (its deadline): a start that finds its id taken,
    however close it raced the one that took it, writes none of them.
    The writes ``also`` gives go in whatever the create found (they are
    harmless to a run that exists). With ``read_first``, the ids are
    looked up first, together, and only the missing runs are written.

    ``check(new, run)`` is called on each run that exists under an id
    given, and raises if it may not be returned for ``new`` (another
    workflow's, another namespace's): with ``read_first``, before anything
    is written.
    """
    results: list[tuple[Run, bool] | None] = [None] * len(pairs)
    todo = [(i, new, run) for i, (new, run) in enumerate(pairs)]
    while todo:
        if read_first:
            found = await _read_runs(store, [run.id for _, _, run in todo])
            left = []
            taken = False
            for (i, new, run), existing in zip(todo, found, strict=True):
                if existing is None:
                    left.append((i, new, run))
                elif new.run_id is None:
                    left.append((i, new, attrs.evolve(run, id=derive_id(new.workflow, rng))))
                    taken = True
                else:
                    check(new, existing)
                    results[i] = (existing, False)
            todo = left
            if taken:
                continue  # a derived id was taken: look its new one up too
            if not todo:
                break
        entries = [
            (CreateRun(run, records=tuple(own(run))), [*also(run), *new.search_records])
            for _, new, run in todo
        ]
        if batcher is not None:
            stored = await batcher.create(entries)
        else:
            stored = await _apply(store, entries)
        again = []
        for (i, new, run), (row, created) in zip(todo, stored, strict=True):
            if not created and new.run_id is None:
                # A derived id must name a new run: with a fixed seed, an
                # engine restarted on the same store derives the same ids.
                again.append((i, new, attrs.evolve(run, id=derive_id(new.workflow, rng))))
            else:
                if not created:
                    check(new, row)
                results[i] = (row, created)
        todo = again
    return [result for result in results if result is not None]


async def _apply(store: Store, entries: Sequence[Entry]) -> list[tuple[Run, bool]]:
    ops: list[Op] = []
    at: list[int] = []
    for create, also in entries:
        at.append(len(ops))
        ops.append(create)
        ops.extend(also)
    results = await store.apply(ops)
    return [results[i] for i in at]


async def _read_runs(store: Store, run_ids: Sequence[str]) -> list[Run | None]:
    """The runs of ``run_ids`` (None where missing), read concurrently so
    that a store that groups its calls reads them in one trip."""
    if len(run_ids) == 1:
        return [await store.get_run(run_ids[0])]
    found: list[Run | None] = [None] * len(run_ids)

    async def read(i: int, run_id: str) -> None:
        found[i] = await store.get_run(run_id)

    async with trio.open_nursery() as nursery:
        for i, run_id in enumerate(run_ids):
            nursery.start_soon(read, i, run_id)
    return found
