"""`BlobbingStore`: a store whose payloads over the threshold live in a
blob store, and the garbage collection of those blobs with retention.

It wraps any `Store`. Every write that carries a payload (a run's input or
output, a checkpoint's input or output, a signal's payload) has the
payloads that `Blobs.offloads` written to the blob store first, and the row
keeps their marks (``~blob:<key>:<size>``, see `_stored_payloads`); every
read resolves the marks again, so the engine and the client above it see
payloads, never marks.

Which runs refer to which blobs is kept in the store's keyed values, scope
``"blob"``, written in the same atomic batch as the row that refers:

- ``r/<blob key>/<run id>``: the blob is referred to by the run;
- ``o/["<run id>","<blob key>"]``: the same, found by run.

(A signal's payload belongs to the run of its token; a token of no run, as
a store's own tests write, stands for itself in the run id's place.)

A mark is honoured only where its run's record lists the blob: a mark
copied into another run's row (by hand, or by a process without the blob
store) reads as a missing blob (`BlobNotFound`), never as the other run's
payload.

When runs are pruned (`Store.prune_runs`, which retention calls, or
`RunDeleter.delete_runs`, which `Engine.prune_many` calls), their rows are
deleted, and then each blob that no run refers to any more is
deleted too, unless it was written less than ``grace`` seconds ago: a
writer puts a blob before it commits the row that refers to it, and a blob
is content-addressed, so another run may be about to refer to the very
blob a pruned run leaves behind. Nothing else deletes blobs, so a blob
still referred to is never deleted.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final, overload

import attrs

from .._base._clock import Clock
from .._base._exceptions import BlobNotFound, UsageError
from .._base._records import (
    Checkpoint,
    Run,
    RunFilter,
    RunStatus,
)
from .._payloads._blobs import Blobs, BlobStore, check_blob_options
from .._payloads._stored_payloads import IN_BLOB, blob_mark, legacy_blob_content, parse_blob_mark
from ._base import Store, TurnState, delete_runs
from ._ops import (
    ClaimCheckpoint,
    CreateRun,
    DeliverSignal,
    Op,
    PutCheckpoint,
    PutValue,
    SettleCheckpoint,
    UpdateRun,
    WaitSignal,
)
from ._wrapping import StoreWrapper, wrapped

SCOPE: Final = "blob"
"""The keyed values' scope of blob references."""

_PAGE: Final = 500


def _by_blob(key: str, run_id: str) -> str:
    return f"r/{key}/{run_id}"


def _by_run(run_id: str, key: str) -> str:
    return "o/" + json.dumps([run_id, key], separators=(",", ":"))


def blob_listing(run_id: str, key: str) -> str:
    """The key (in scope `SCOPE`) of the record that lists blob ``key``
    among the blobs of run ``run_id``: a mark of that blob in the run's
    rows is honoured only while it exists."""
    return _by_run(run_id, key)


def _run_prefix(run_id: str) -> str:
    return "o/" + json.dumps([run_id], separators=(",", ":"))[:-1] + ","


def _signal_owner(token: str) -> str:
    """The run a signal token belongs to (see `signal_token`), or the token
    itself if it names no run: whose record lists its payloads' blobs."""
    try:
        parsed = json.loads(token)
    except ValueError:
        return token
    if isinstance(parsed, list) and parsed and isinstance(parsed[0], str):
        return parsed[0]
    return token


_LISTED_MAX: Final = 100_000
"""How many (run, blob) pairs a `BlobbingStore` remembers finding listed."""


@final
class _Batch:
    """What offloading one batch found: the marks it made (with the payload
    each stands for, so results need not read them back) and which run
    refers to which blob."""

    def __init__(self, store: BlobbingStore) -> None:
        self.store = store
        self.texts: dict[str, str] = {}
        self.refs: dict[tuple[str, str], None] = {}

    @overload
    async def offload(self, owner: str, text: str) -> str: ...
    @overload
    async def offload(self, owner: str, text: str | None) -> str | None: ...
    async def offload(self, owner: str, text: str | None) -> str | None:
        # A blob's mark already (copied as read by a process without the
        # blob store) stays one: it is never offloaded again.
        if text is None or not self.store.blobs.offloads(text) or text.startswith(IN_BLOB):
            return text
        key, size = await self.store.blobs.offload(text)
        mark = blob_mark(key, size)
        self.texts[mark] = text
        self.refs[owner, key] = None
        return mark

    @overload
    async def resolve(self, owner: str, text: str) -> str: ...
    @overload
    async def resolve(self, owner: str, text: str | None) -> str | None: ...
    async def resolve(self, owner: str, text: str | None) -> str | None:
        if text is None:
            return None
        known = self.texts.get(text)
        return known if known is not None else await self.store.resolve(owner, text)


def _run_with(run: Run, input: str, output: str | None) -> Run:
    """``run`` with this input and output: itself when neither changed (no
    payload of it is in a blob, the usual case), so that a row read or
    written whole costs no copy."""
    if input is run.input and output is run.output:
        return run
    return attrs.evolve(run, input=input, output=output)


def _checkpoint_with(checkpoint: Checkpoint, input: str | None, output: str | None) -> Checkpoint:
    """``checkpoint`` with this input and output: itself when neither
    changed (see `_run_with`)."""
    if input is checkpoint.input and output is checkpoint.output:
        return checkpoint
    return attrs.evolve(checkpoint, input=input, output=output)


def _settled_elsewhere(ops: Sequence[Op], results: Sequence[Any]) -> list[tuple[str, str]]:
    """The (run, blob) pairs of signal payloads in blobs that ``ops`` (as
    written) put in the checkpoint of a run other than their token's: only
    a token of no run (the engine's tokens are its runs') does that."""
    found: list[tuple[str, str]] = []
    for op, result in zip(ops, results, strict=False):
        if isinstance(op, DeliverSignal) and isinstance(result, tuple):
            run_id, payload = result[0], op.payload
        elif isinstance(op, WaitSignal) and isinstance(result, str):
            run_id, payload = op.run_id, result
        else:
            continue
        if run_id == _signal_owner(op.token):
            continue
        try:
            mark = parse_blob_mark(payload)
        except BlobNotFound:
            continue  # no blob of a well-formed mark: nothing to refer to
        if mark is not None:
            found.append((run_id, mark.key))
    return found


class BlobbingStore(StoreWrapper):
    """A `Store` that keeps payloads over ``blobs``' threshold in its blob
    store (see the module's docstring). Whatever it does not define (a
    store's change feed, its watch, its scope) is the wrapped store's.

    Args:
      inner: The store the rows go to.
      blobs: The blob store and threshold.
      grace: Seconds after its last write during which a blob no run
        refers to is still kept.
    """

    def __init__(self, inner: Store, blobs: Blobs, grace: float) -> None:
        self.inner = inner
        self.blobs = blobs
        self.grace = grace
        # Where the next sweep for blobs no row refers to goes on from.
        self._swept_to: str | None = None
        # (run, blob) pairs found in the run's record: a record goes only
        # with its run's rows (pruning: those this store prunes are dropped
        # here), so a pair found once stays true.
        self._listed: OrderedDict[tuple[str, str], None] = OrderedDict()

    def __repr__(self) -> str:
        return f"BlobbingStore({self.inner!r}, {self.blobs.store!r})"

    async def resolve(self, owner: str, text: str) -> str:
        """The payload ``text`` stands for in a row of the run ``owner``:
        ``text`` itself unless it is a blob's mark.

        Raises:
          BlobNotFound: The blob is missing, or the run's record does not
            list it.
          BlobCorrupted: The blob does not match its key.
          StoreError: The blob store or the store failed.
        """
        mark = parse_blob_mark(text)
        if mark is None:
            return text
        pair = (owner, mark.key)
        if pair in self._listed:
            self._listed.move_to_end(pair)
        elif await self.inner.get_value(SCOPE, _by_run(owner, mark.key)) is None:
            raise BlobNotFound(
                mark.key,
                f"a row of run {owner!r} refers to blob {mark.key!r}, which the run's"
                " blob references do not list: it is not read",
            )
        else:
            self._remember_listed(pair)
        payload = await self.blobs.resolve(mark.key)
        return legacy_blob_content(payload) if mark.legacy else payload

    def _remember_listed(self, pair: tuple[str, str]) -> None:
        self._listed[pair] = None
        if len(self._listed) > _LISTED_MAX:
            self._listed.popitem(last=False)

    # Writes.

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        batch = _Batch(self)
        written = [await self._offload(op, batch) for op in ops]
        now = self.blobs.clock.now()
        refs = [
            PutValue(SCOPE, key, "1", now)
            for run_id, blob in batch.refs
            for key in (_by_blob(blob, run_id), _by_run(run_id, blob))
        ]
        results = await self.inner.apply([*written, *refs])
        for pair in batch.refs:
            self._remember_listed(pair)
        settled = _settled_elsewhere(written, results)
        if settled:
            # A signal under a token of no run settled a run's checkpoint
            # with a payload in a blob: that run refers to it now too.
            await self.inner.apply(
                [
                    PutValue(SCOPE, key, "1", now)
                    for run_id, blob in settled
                    for key in (_by_blob(blob, run_id), _by_run(run_id, blob))
                ]
            )
            for pair in settled:
                self._remember_listed(pair)
        return [
            await self._resolve_result(op, result, batch)
            for op, result in zip(ops, results[: len(ops)], strict=True)
        ]

    async def _offload(self, op: Op, batch: _Batch) -> Op:
        if isinstance(op, CreateRun):
            run = op.run
            return CreateRun(
                _run_with(
                    run,
                    await batch.offload(run.id, run.input),
                    await batch.offload(run.id, run.output),
                ),
                tuple([await self._offload_checkpoint(cp, batch) for cp in op.checkpoints]),
                op.records,
            )
        if isinstance(op, UpdateRun):
            changes = dict(op.changes)
            for field in ("input", "output"):
                if isinstance(changes.get(field), str):
                    changes[field] = await batch.offload(op.run_id, changes[field])
            return attrs.evolve(op, changes=changes)
        if isinstance(op, PutCheckpoint | ClaimCheckpoint):
            checkpoint = await self._offload_checkpoint(op.checkpoint, batch)
            return op if checkpoint is op.checkpoint else attrs.evolve(op, checkpoint=checkpoint)
        if isinstance(op, SettleCheckpoint):
            return attrs.evolve(op, output=await batch.offload(op.run_id, op.output))
        if isinstance(op, DeliverSignal):
            payload = await batch.offload(_signal_owner(op.token), op.payload)
            return attrs.evolve(op, payload=payload)
        return op

    async def _offload_checkpoint(self, checkpoint: Checkpoint, batch: _Batch) -> Checkpoint:
        return _checkpoint_with(
            checkpoint,
            await batch.offload(checkpoint.run_id, checkpoint.input),
            await batch.offload(checkpoint.run_id, checkpoint.output),
        )

    async def _resolve_result(self, op: Op, result: Any, batch: _Batch) -> Any:
        if isinstance(result, Checkpoint):
            return await self._checkpoint(result, batch)
        if isinstance(result, Run):
            return await self._run(result, batch)
        if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Run):
            return (await self._run(result[0], batch), result[1])
        if isinstance(op, WaitSignal) and isinstance(result, str):
            # The payload of a buffered signal it consumed.
            return await batch.resolve(_signal_owner(op.token), result)
        return result

    # Reads: marks resolved.

    async def _run(self, run: Run, batch: _Batch | None = None) -> Run:
        batch = batch or _Batch(self)
        return _run_with(
            run,
            await batch.resolve(run.id, run.input),
            await batch.resolve(run.id, run.output),
        )

    async def _checkpoint(self, checkpoint: Checkpoint, batch: _Batch | None = None) -> Checkpoint:
        batch = batch or _Batch(self)
        return _checkpoint_with(
            checkpoint,
            await batch.resolve(checkpoint.run_id, checkpoint.input),
            await batch.resolve(checkpoint.run_id, checkpoint.output),
        )

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        state = await self.inner.begin_turn(run_id, owner, expiry, now)
        if state is None:
            return None
        return attrs.evolve(
            state,
            run=await self._run(state.run),
            checkpoints=tuple([await self._checkpoint(c) for c in state.checkpoints]),
        )

    async def get_run(self, run_id: str) -> Run | None:
        run = await self.inner.get_run(run_id)
        return None if run is None else await self._run(run)

    # Keywords are passed on as given, so that a store's own (or a later
    # protocol's) filters reach it.

    async def list_runs(self, **filters: Any) -> list[Run]:
        return [await self._run(run) for run in await self.inner.list_runs(**filters)]

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        found = await self.inner.get_checkpoints(run_id, from_seq, to_seq)
        return [await self._checkpoint(c) for c in found]

    async def find_runs(self, where: RunFilter, **options: Any) -> list[Run]:
        return [await self._run(run) for run in await self.inner.find_runs(where, **options)]

    async def find_checkpoints(
        self, run_id: str, from_seq: int, to_seq: int, **options: Any
    ) -> list[Checkpoint]:
        found = await self.inner.find_checkpoints(run_id, from_seq, to_seq, **options)
        return [await self._checkpoint(c) for c in found]

    async def buffered_signals(self, token: str) -> list[str]:
        owner = _signal_owner(token)
        return [await self.resolve(owner, p) for p in await self.inner.buffered_signals(token)]

    async def prune_runs(self, older_than: Mapping[RunStatus, float], limit: int) -> list[str]:
        pruned = await self.inner.prune_runs(older_than, limit)
        await self._collect(pruned)
        if len(pruned) < limit:
            # The end of a pruning pass: sweep on for blobs no row refers to.
            self._swept_to = await sweep_orphans(
                self.inner, self.blobs.store, self.blobs.clock, self.grace, self._swept_to
            )
        return pruned

    async def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        deleted = await delete_runs(self.inner, run_ids)
        await self._collect(deleted)
        return deleted

    async def _collect(self, gone: list[str]) -> None:
        """Forget the blob references of the runs just deleted, and delete
        the blobs no run refers to any more (see `collect`)."""
        if not gone:
            return
        # Their references go: a run made again under one of their ids
        # refers to no blob until it writes one.
        deleted = set(gone)
        for pair in [pair for pair in self._listed if pair[0] in deleted]:
            del self._listed[pair]
        await collect(self.inner, self.blobs.store, gone, self.blobs.clock, self.grace)


async def collect(
    store: Store, blob_store: BlobStore, run_ids: Sequence[str], clock: Clock, grace: float
) -> list[str]:
    """Forget the blob references of the (pruned) runs ``run_ids``, then
    delete each of their blobs that no run refers to any more and that was
    last written more than ``grace`` seconds ago. Returns the keys deleted.

    A failure midway leaves references that keep their blobs (never the
    other way round).
    """
    keys: dict[str, None] = {}
    for run_id in run_ids:
        prefix = _run_prefix(run_id)
        after: str | None = None
        while True:
            page = await store.list_values(SCOPE, prefix=prefix, after=after, limit=_PAGE)
            forget: list[Op] = []
            for value in page:
                blob = json.loads(value.key[2:])[1]
                keys[blob] = None
                forget.append(PutValue(SCOPE, value.key, None, clock.now()))
                forget.append(PutValue(SCOPE, _by_blob(blob, run_id), None, clock.now()))
            if forget:
                await store.apply(forget)
            if len(page) < _PAGE:
                break
            after = page[-1].key
    deleted: list[str] = []
    for blob in sorted(keys):
        if await store.list_values(SCOPE, prefix=f"r/{blob}/", limit=1):
            continue
        info = await blob_store.stat(blob)
        if info is None or info.stored_at > clock.now() - grace:
            continue
        await blob_store.delete(blob)
        deleted.append(blob)
    return deleted


async def sweep_orphans(
    store: Store,
    blob_store: BlobStore,
    clock: Clock,
    grace: float,
    after: str | None,
    limit: int = _PAGE,
) -> str | None:
    """Delete the blobs no run refers to, among up to ``limit`` blobs listed
    after the key ``after``, that were last written more than ``grace``
    seconds ago: blobs written for a row that never committed (a writer
    died between the two, a step's result was never settled). Returns the
    key to go on from, None once the listing wrapped round.

    The grace protects a writer about to refer to a blob, as in `collect`:
    every writer writes the blob before it commits the row that refers
    to it.
    """
    page = await blob_store.list(after=after, limit=limit)
    cutoff = clock.now() - grace
    for info in page:
        if info.stored_at > cutoff:
            continue
        if await store.list_values(SCOPE, prefix=f"r/{info.key}/", limit=1):
            continue
        await blob_store.delete(info.key)
    return page[-1].key if len(page) == limit else None


def blobs_of(store: Store) -> Blobs | None:
    """The blobs of ``store`` if it keeps large payloads in a blob store
    (itself, or a store it wraps)."""
    while isinstance(store, StoreWrapper):
        if isinstance(store, BlobbingStore):
            return store.blobs
        store = store.inner
    return None


def blobbing_store(inner: Store, blobs: Blobs, grace: float) -> BlobbingStore:
    """``inner`` wrapped in a `BlobbingStore` that is a `ChangeFeed` and a
    `RunWatch` when ``inner`` is."""
    return wrapped(BlobbingStore, inner)(inner, blobs, grace)


@final
@attrs.define(frozen=True, kw_only=True)
class BlobOptions:
    """The checked ``blobs=``, ``blob_threshold=`` and ``blob_grace=`` of
    `open_engine` and `open_client`; `BlobOptions.of` checks them before
    anything is opened.

    Attributes:
      store: The blob store, or None for none.
      threshold: Payloads longer than this many characters are offloaded.
      grace: Seconds a blob no run refers to is kept after its last write.
    """

    store: BlobStore | None
    threshold: int
    grace: float

    @classmethod
    def of(cls, blobs: object, threshold: object, grace: object) -> BlobOptions:
        """The options, checked.

        Raises:
          UsageError: One is of the wrong type or out of range.
        """
        blob_store = check_blob_options(blobs, threshold)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise UsageError(f"blob_grace must be a number of seconds >= 0, not {grace!r}")
        assert isinstance(threshold, int)
        return cls(store=blob_store, threshold=threshold, grace=float(grace))

    def wrap(self, store: Store, wall_clock: Callable[[], float]) -> Store:
        """``store``, keeping large payloads in the blob store if there is one."""
        if self.store is None:
            return store
        return blobbing_store(
            store, Blobs(self.store, self.threshold, Clock(wall_clock)), self.grace
        )


BLOBS_ENV: Final = "TRIO_DURABLE_BLOBS"
"""The environment variable the ``trio-durable`` command reads the blob
store's directory from (for its engines, workers and run commands)."""


def with_blobs_from_env(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for `open_engine`, `open_worker` or `open_client`, with
    ``blobs=`` the directory `BLOBS_ENV` names, if it is set."""
    directory = os.environ.get(BLOBS_ENV)
    return {**options, "blobs": directory} if directory else options
