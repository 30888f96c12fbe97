"""`CodecStore`: a store that keeps every payload encoded by a codec.

It wraps another store and implements the whole store protocol by
delegation. On the way in it encodes the payloads of the operations it
applies; on the way out it decodes the payloads of the rows and results it
returns. What carries no payload (ids, names, statuses, times, counts,
error codes, tags) passes through untouched, so counts, statistics, due
times and list filters work as they do on the store underneath, and a store
needs nothing of its own to be wrapped.

What the codec made is kept marked (``~enc:<codec text>``, see
`_stored_payloads`), and only text so marked is decoded: a payload in the
clear (written before the codec, or by a process without it) is read as
it is, whatever it looks like.

Encoded (see docs/payload-codecs.md):

- runs' and checkpoints' ``input`` and ``output``;
- errors (a run's, a checkpoint's, each attempt's): their ``message``,
  ``details`` and ``traceback`` are encoded together into `ErrorInfo.sealed`,
  and the message kept is what the codec says of it (``"encrypted with
  k2"``); ``code``, ``type`` and ``step`` stay as they are, since stores
  and on-error routes match on the code;
- signal payloads (delivered or buffered);
- keyed values (`PutValue`) and settings (`KeepSetting`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Sequence
from typing import Any, Final, TypeVar, cast

import attrs

from .._base._exceptions import CodecError, UsageError
from .._base._records import (
    Checkpoint,
    CheckpointStatus,
    ErrorInfo,
    Mark,
    Run,
    RunFilter,
    RunStatus,
    StoredValue,
)
from .._base._run_records import RunRecord
from .._payloads._codec import PayloadCodec
from .._payloads._stored_payloads import codec_text, encoded, is_marked
from ._base import Store, TurnState
from ._hook_ops import KeepSetting
from ._ops import (
    ClaimCheckpoint,
    CreateRun,
    DeliverSignal,
    Op,
    PutCheckpoint,
    PutValue,
    RescheduleCheckpoint,
    SettleCheckpoint,
    UpdateRun,
    WaitSignal,
)
from ._record_ops import ClaimRecord, PutRecord, SettleRecord
from ._wrapping import StoreWrapper, wrapped

_COMPACT = (",", ":")
T = TypeVar("T")
Row = TypeVar("Row", Checkpoint, RunRecord)


CACHE_BYTES: Final = 16 * 1024 * 1024
"""How much decoded text (in characters, stored and decoded counted) a
`CodecStore` keeps, so that a run's history, read again at each of its
turns, is decrypted once."""

_CACHED_TEXT_MAX: Final = 64 * 1024


class PayloadCoder:
    """A codec applied to the store's records: what `CodecStore` encodes
    and decodes, field by field."""

    def __init__(self, codec: PayloadCodec) -> None:
        self.codec = codec
        # What the codec made -> the text it made it from, oldest first (a
        # text decodes to the same payload every time: the cache never
        # goes stale).
        self._decoded: dict[str, str] = {}
        self._cached = 0

    # -- text --------------------------------------------------------------

    def text_in(self, text: str | None) -> str | None:
        return None if text is None else self.encode(text)

    def encode(self, text: str) -> str:
        """``text`` encoded and marked as such, remembered: reading back
        what this store wrote needs no decoding. A mark stays as it is (a
        payload encoded already, or in a blob store, copied as it was read
        by a process without the codec)."""
        if is_marked(text):
            return text
        return encoded(self._seal(text))

    def _seal(self, text: str) -> str:
        sealed = self.codec.encode(text)
        self._remember(sealed, text)
        return sealed

    def text_out(self, text: str | None) -> str | None:
        return None if text is None else self.decode(text)

    def decode(self, text: str) -> str:
        """The payload ``text`` holds: decoded if it is marked as encoded,
        else as it is."""
        sealed = codec_text(text)
        return text if sealed is None else self._unseal(sealed)

    def _unseal(self, sealed: str) -> str:
        found = self._decoded.get(sealed)
        if found is not None:
            return found
        plain = self.codec.decode(sealed)
        self._remember(sealed, plain)
        return plain

    def _remember(self, sealed: str, plain: str) -> None:
        size = len(sealed) + len(plain)
        if size > _CACHED_TEXT_MAX or sealed in self._decoded:
            return
        self._decoded[sealed] = plain
        self._cached += size
        while self._cached > CACHE_BYTES:
            old = next(iter(self._decoded))
            self._cached -= len(old) + len(self._decoded.pop(old))

    # -- errors ------------------------------------------------------------

    def error_in(self, error: ErrorInfo | None) -> ErrorInfo | None:
        if error is None or error.sealed is not None:
            return error
        secret = {"message": error.message, "details": error.details, "traceback": error.traceback}
        sealed = self._seal(json.dumps(secret, separators=_COMPACT))
        return attrs.evolve(
            error,
            message=self.codec.describe(sealed) or "encoded",
            details=None,
            traceback=None,
            sealed=sealed,
        )

    def error_out(self, error: ErrorInfo | None) -> ErrorInfo | None:
        if error is None or error.sealed is None:
            return error  # in the clear: written before the codec, or by a store itself
        secret = json.loads(self._unseal(error.sealed))
        return attrs.evolve(
            error,
            message=str(secret["message"]),
            details=secret.get("details"),
            traceback=secret.get("traceback"),
            sealed=None,
        )

    def errors_in(self, errors: tuple[ErrorInfo, ...]) -> tuple[ErrorInfo, ...]:
        return tuple(cast(ErrorInfo, self.error_in(e)) for e in errors)

    def errors_out(self, errors: tuple[ErrorInfo, ...]) -> tuple[ErrorInfo, ...]:
        return tuple(cast(ErrorInfo, self.error_out(e)) for e in errors)

    # -- rows --------------------------------------------------------------

    def run_in(self, run: Run) -> Run:
        return _with_payloads(
            run, self.encode(run.input), self.text_in(run.output), self.error_in(run.error)
        )

    def run_out(self, run: Run) -> Run:
        return _with_payloads(
            run, self.decode(run.input), self.text_out(run.output), self.error_out(run.error)
        )

    def run_listed(self, run: Run) -> Run:
        """`run_out` for lists: a payload that cannot be decoded (its key
        is not in the ring) is left as it is stored, not raised on."""
        try:
            return self.run_out(run)
        except CodecError:
            return attrs.evolve(
                run,
                input=_or_stored(self.decode, run.input),
                output=_or_stored(self.text_out, run.output),
                error=_or_stored(self.error_out, run.error),
            )

    def checkpoint_in(self, cp: Row) -> Row:
        """A checkpoint's (or a run record's) payloads encoded (an error
        that only shows the row's mark holds none)."""
        coded_input, output = self.text_in(cp.input), self.text_in(cp.output)
        error = cp.error if _shows_mark(cp) else self.error_in(cp.error)
        if coded_input is cp.input and output is cp.output and error is cp.error and not cp.errors:
            return cp  # nothing to encode (a timer's row, a pending step's mark)
        errors = self.errors_in(cp.errors)
        return attrs.evolve(cp, input=coded_input, output=output, error=error, errors=errors)

    def checkpoint_out(self, cp: Row) -> Row:
        """A checkpoint's (or a run record's) payloads decoded."""
        coded_input, output = self.text_out(cp.input), self.text_out(cp.output)
        error, errors = self.error_out(cp.error), self.errors_out(cp.errors)
        if cp.mark is not None and error is not cp.error and error is not None:
            # A mark a release before sealed as the pending row's error (the
            # migration copied it into the mark as it was): its details are
            # in the sealed text.
            mark = Mark(code=error.code or "", message=error.message, details=error.details)
            return attrs.evolve(cp, input=coded_input, output=output, errors=errors, mark=mark)
        if coded_input is cp.input and output is cp.output and error is cp.error and not errors:
            return cp  # nothing was encoded (a timer, a row older than the codec)
        return attrs.evolve(cp, input=coded_input, output=output, error=error, errors=errors)

    def value_out(self, value: StoredValue) -> StoredValue:
        return attrs.evolve(value, value=self.decode(value.value))

    # -- operations and their results --------------------------------------

    def op_in(self, op: Op) -> Op:
        """``op`` with its payloads encoded (an operation without any as it is)."""
        match op:
            case CreateRun(run):
                return CreateRun(
                    self.run_in(run),
                    tuple(map(self.checkpoint_in, op.checkpoints)),
                    tuple(map(self.checkpoint_in, op.records)),
                )
            case UpdateRun():
                return attrs.evolve(op, changes=self._changes_in(op.changes))
            case PutCheckpoint(cp):
                return PutCheckpoint(self.checkpoint_in(cp))
            case ClaimCheckpoint(cp):
                return attrs.evolve(op, checkpoint=self.checkpoint_in(cp))
            case SettleCheckpoint():
                return attrs.evolve(
                    op, output=self.text_in(op.output), error=self.error_in(op.error)
                )
            case PutRecord(record):
                return PutRecord(self.checkpoint_in(record))
            case ClaimRecord(record):
                return attrs.evolve(op, record=self.checkpoint_in(record))
            case SettleRecord():
                return attrs.evolve(
                    op, output=self.text_in(op.output), error=self.error_in(op.error)
                )
            case RescheduleCheckpoint():
                return attrs.evolve(op, error=cast(ErrorInfo, self.error_in(op.error)))
            case DeliverSignal():
                return attrs.evolve(op, payload=self.encode(op.payload))
            case PutValue() if op.value is not None:
                return attrs.evolve(op, value=self.encode(op.value))
            case KeepSetting():
                return attrs.evolve(op, value=self.encode(op.value))
            case _:
                return op

    def _changes_in(self, changes: dict[str, Any]) -> dict[str, Any]:
        coded = dict(changes)
        if isinstance(coded.get("input"), str):
            coded["input"] = self.encode(coded["input"])
        if isinstance(coded.get("output"), str):
            coded["output"] = self.encode(coded["output"])
        if isinstance(coded.get("error"), ErrorInfo):
            coded["error"] = self.error_in(coded["error"])
        return coded

    def result_out(self, op: Op, result: Any) -> Any:
        """The result of ``op`` with its payloads decoded."""
        if isinstance(op, WaitSignal | KeepSetting) and isinstance(result, str):
            return self.decode(result)
        if isinstance(result, Checkpoint):
            return self.checkpoint_out(result)
        if isinstance(result, RunRecord):
            return self.checkpoint_out(result)
        if isinstance(op, CreateRun) and isinstance(result, tuple):
            run, created = result
            return (self.run_out(run), created)
        return result


def _or_stored(decode: Callable[[T], T], value: T) -> T:
    try:
        return decode(value)
    except CodecError:
        return value


def _shows_mark(row: Checkpoint | RunRecord) -> bool:
    """Whether ``row``'s error only shows its mark (what it waits for)."""
    return row.mark is not None and row.error == row.mark.as_error()


class CodecStore(StoreWrapper):
    """A store that keeps payloads encoded by ``codec`` in ``store``.

    Implements the whole `Store` protocol by delegation to ``store``,
    encoding the payloads it writes and decoding those it reads (see
    docs/payload-codecs.md for which). It is a `ChangeFeed` and a
    `RunWatch` exactly when ``store`` is. Closing it closes ``store``.

    Every process that writes the store (engines, clients, the console)
    should wrap it with the same codec: what a process without it writes is
    kept in the clear, and read as it is (only what the codec made is kept
    marked as such, and decoded; so rows written before the codec stay
    readable, and no payload passes for an encoded one).

    Args:
      store: The store that keeps the encoded payloads.
      codec: The codec, e.g. `trio_durable.AesGcmCodec`.

    Raises:
      UsageError: ``store`` is not a store, or ``codec`` not a codec.
    """

    def __new__(cls, store: Store, codec: PayloadCodec) -> CodecStore:
        if cls is CodecStore:
            cls = wrapped(CodecStore, store)
        return object.__new__(cls)

    def __init__(self, store: Store, codec: PayloadCodec) -> None:
        if not (
            callable(getattr(store, "apply", None)) and callable(getattr(store, "begin_turn", None))
        ):
            raise UsageError(f"CodecStore wraps a Store, not {store!r}")
        if not isinstance(codec, PayloadCodec):
            raise UsageError(f"CodecStore needs a codec (such as td.AesGcmCodec), not {codec!r}")
        self.inner = store
        self.codec = codec
        self._coder = PayloadCoder(codec)

    def __repr__(self) -> str:
        return f"CodecStore({self.inner!r}, {self.codec!r})"

    # -- writes --------------------------------------------------------------

    async def apply(self, ops: Sequence[Op]) -> list[Any]:
        coder = self._coder
        coded = [coder.op_in(op) for op in ops]
        results = await self.inner.apply(coded)
        return [coder.result_out(op, result) for op, result in zip(ops, results, strict=True)]

    async def begin_turn(
        self, run_id: str, owner: str, expiry: float, now: float
    ) -> TurnState | None:
        state = await self.inner.begin_turn(run_id, owner, expiry, now)
        if state is None:
            return None
        coder = self._coder
        return TurnState(
            run=coder.run_out(state.run),
            checkpoints=tuple(coder.checkpoint_out(cp) for cp in state.checkpoints),
            records=tuple(coder.checkpoint_out(record) for record in state.records),
        )

    # -- reads that return payloads -----------------------------------------

    async def get_run(self, run_id: str) -> Run | None:
        run = await self.inner.get_run(run_id)
        return None if run is None else self._coder.run_out(run)

    async def list_runs(
        self,
        *,
        statuses: Collection[RunStatus] | None = None,
        workflow: str | None = None,
        parent_id: str | None = None,
        limit: int = 1000,
    ) -> list[Run]:
        runs = await self.inner.list_runs(
            statuses=statuses, workflow=workflow, parent_id=parent_id, limit=limit
        )
        return [self._coder.run_out(run) for run in runs]

    async def find_runs(
        self, where: RunFilter, *, before: tuple[float, str] | None = None, limit: int = 100
    ) -> list[Run]:
        # The query for people (pages of runs): a run whose payloads this
        # codec cannot decode is listed with them as stored.
        runs = await self.inner.find_runs(where, before=before, limit=limit)
        return [self._coder.run_listed(run) for run in runs]

    async def get_records(self, run_id: str) -> list[RunRecord]:
        return [self._coder.checkpoint_out(r) for r in await self.inner.get_records(run_id)]

    async def get_checkpoints(
        self, run_id: str, from_seq: int | None = None, to_seq: int | None = None
    ) -> list[Checkpoint]:
        found = await self.inner.get_checkpoints(run_id, from_seq, to_seq)
        return [self._coder.checkpoint_out(cp) for cp in found]

    async def find_checkpoints(
        self,
        run_id: str,
        from_seq: int,
        to_seq: int,
        *,
        statuses: Collection[CheckpointStatus] | None = None,
        offset: int = 0,
        limit: int = 100,
    ) -> list[Checkpoint]:
        found = await self.inner.find_checkpoints(
            run_id, from_seq, to_seq, statuses=statuses, offset=offset, limit=limit
        )
        return [self._coder.checkpoint_out(cp) for cp in found]

    async def buffered_signals(self, token: str) -> list[str]:
        return [self._coder.decode(p) for p in await self.inner.buffered_signals(token)]

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        value = await self.inner.get_value(scope, key)
        return None if value is None else self._coder.value_out(value)

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        found = await self.inner.list_values(scope, prefix=prefix, after=after, limit=limit)
        return [self._coder.value_out(value) for value in found]


def with_codec(store: Store, codec: PayloadCodec | None) -> Store:
    """``store`` wrapped in a `CodecStore` of ``codec``, or as it is if
    ``codec`` is None (`open_engine`'s and `open_client`'s ``codec=``).

    Raises:
      UsageError: ``codec`` is not a codec, or ``store`` has one already.
    """
    if codec is None:
        return store
    if isinstance(store, CodecStore):
        raise UsageError("the store is a CodecStore already: give codec= or a CodecStore, not both")
    return cast(Store, CodecStore(store, codec))


def check_codec(codec: object) -> None:
    """Raise `UsageError` unless ``codec`` is a `PayloadCodec` or None."""
    if codec is not None and not isinstance(codec, PayloadCodec):
        raise UsageError(f"codec= takes a codec (such as td.AesGcmCodec) or None, not {codec!r}")


def _with_payloads(run: Run, input: str, output: str | None, error: ErrorInfo | None) -> Run:
    """``run`` with these payloads: itself when none changed."""
    if input is run.input and output is run.output and error is run.error:
        return run
    return attrs.evolve(run, input=input, output=output, error=error)
