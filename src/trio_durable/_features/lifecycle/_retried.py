"""What a retry replaced: the history a retry of a run would otherwise lose.

A retry (`plan_retry`, and `retry_from` from a seq) deletes the
checkpoints the retried body must record again (the failed operations,
those an undo undid and their undos, everything at or after ``from_seq``),
resets failed children it retries with the run, rewrites or deletes some of
the run's records and keyed values, and clears the run's error. Each retry
keeps all of it, as it was, in one keyed value (`StoredValue`) of the scope
`retried_scope` of the run, under the retry's number: the run's status,
error, output, tags and end, and the checkpoints, run records and keyed
values the retry's write replaced, whole (payloads, every attempt's error
and traceback, times).

It is written in the retry's own batch, after the run's fenced update, so
a retry that loses a race keeps nothing, and two retries can never keep
the same number (``expect_version=0``). It goes with the run
(``run_id``): retention prunes it with the run, and nothing else deletes
it. A keyed value, not a run record: a turn reads every record of its run
(`Store.begin_turn`), and what a retry replaced, a fan's worth of failures
perhaps, is read only by the history queries (`retried_histories`). A
`CodecStore` encodes it whole, as it encodes every keyed value.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, final

import attrs

from ..._base import _serde
from ..._base._records import Checkpoint, ErrorInfo, Run, RunStatus
from ..._base._run_records import RunRecord
from ..._kernel._views import HistoryEntry, RetriedHistory
from ..._payloads._stored_payloads import codec_text
from ..._stores._ops import DeleteCheckpoints, Op, PutCheckpoint, PutValue
from ..._stores._record_ops import ClaimRecord, DeleteRecords, PutRecord

if TYPE_CHECKING:
    from ..._stores._base import Store

SCOPE: Final = "retried:"
"""What the keyed-value scope of a run's retried histories begins with
(then the run's id)."""

_PAGE: Final = 100


def retried_scope(run_id: str) -> str:
    """The keyed-value scope of what the retries of ``run_id`` replaced."""
    return f"{SCOPE}{run_id}"


def _key(retry: int) -> str:
    # Zero-padded: keys list in the order of the retries.
    return f"{retry:010d}"


@final
@attrs.define(frozen=True, kw_only=True)
class KeptValue:
    """A keyed value of the run as it was before a retry rewrote or
    deleted it (a value it published, a value of its stream)."""

    scope: str
    key: str
    value: str


@final
@attrs.define(frozen=True, kw_only=True)
class Replaced:
    """What one retry replaced, as it is stored (JSON, through the one
    converter)."""

    retry: int
    retried_at: float
    from_seq: int | None
    status: RunStatus
    error: ErrorInfo | None
    output: str | None
    tags: tuple[str, ...]
    ended_at: float
    checkpoints: tuple[Checkpoint, ...]
    records: tuple[RunRecord, ...] = ()
    values: tuple[KeptValue, ...] = ()

    def shown(self) -> RetriedHistory:
        """It as histories show it: its operations' entries, no payloads."""
        return RetriedHistory(
            retry=self.retry,
            retried_at=self.retried_at,
            from_seq=self.from_seq,
            status=self.status,
            error=self.error,
            ended_at=self.ended_at,
            entries=tuple(HistoryEntry.of(cp) for cp in self.checkpoints),
        )


async def next_retry(store: Store, run_id: str) -> int:
    """The number the next retry of ``run_id`` keeps what it replaces under."""
    last = 0
    after: str | None = None
    while page := await store.list_values(retried_scope(run_id), after=after, limit=_PAGE):
        after = page[-1].key
        last = int(after)
        if len(page) < _PAGE:
            break
    return last + 1


def keep_replaced(
    run: Run,
    retry: int,
    now: float,
    from_seq: int | None,
    ops: Sequence[Op],
    checkpoints: Iterable[Checkpoint],
    records: Iterable[RunRecord],
    values: Mapping[tuple[str, str], str] | None = None,
) -> PutValue:
    """The write that keeps what ``ops`` (a retry's writes) replace of
    ``run``, as the retry read it: its checkpoints deleted or whose status
    the retry changes, its records deleted or rewritten, and of ``values``
    (the run's keyed values the retry may write, by scope and key) those
    it changes. Ops of other runs (children retried with it) are skipped:
    each run keeps its own."""
    by_seq = {cp.seq: cp for cp in checkpoints}
    by_kind = {record.kind: record for record in records}
    known = values or {}
    kept_seqs: set[int] = set()
    kept_kinds: set[str] = set()
    kept_values: dict[tuple[str, str], str] = {}
    for op in ops:
        match op:
            case DeleteCheckpoints(run_id, seqs) if run_id == run.id:
                kept_seqs.update(seq for seq in seqs if seq in by_seq)
            case PutCheckpoint(cp) if cp.run_id == run.id:
                old = by_seq.get(cp.seq)
                # A status it changes (a failed child reset to run again);
                # a handoff retired keeps its row and its status.
                if old is not None and old.status != cp.status:
                    kept_seqs.add(cp.seq)
            case DeleteRecords(run_id, kinds) if run_id == run.id:
                kept_kinds.update(kind for kind in kinds if kind in by_kind)
            case PutRecord(record) | ClaimRecord(record) if record.run_id == run.id:
                old_record = by_kind.get(record.kind)
                if old_record is not None and old_record != record:
                    kept_kinds.add(record.kind)
            case PutValue(scope, key, value) if (scope, key) in known:
                if known[scope, key] != value:
                    kept_values[scope, key] = known[scope, key]
            case _:
                pass
    replaced = Replaced(
        retry=retry,
        retried_at=now,
        from_seq=from_seq,
        status=run.status,
        error=run.error,
        output=run.output,
        tags=run.tags,
        ended_at=run.updated_at,
        checkpoints=tuple(by_seq[seq] for seq in sorted(kept_seqs)),
        records=tuple(by_kind[kind] for kind in sorted(kept_kinds)),
        values=tuple(
            KeptValue(scope=scope, key=key, value=value)
            for (scope, key), value in sorted(kept_values.items())
        ),
    )
    text = json.dumps(_serde.converter.unstructure(replaced), separators=(",", ":"))
    return PutValue(retried_scope(run.id), _key(retry), text, now, expect_version=0, run_id=run.id)


async def retried_histories(store: Store, run_id: str) -> tuple[RetriedHistory, ...]:
    """What each retry of ``run_id`` replaced, oldest first."""
    found: list[RetriedHistory] = []
    after: str | None = None
    while page := await store.list_values(retried_scope(run_id), after=after, limit=_PAGE):
        after = page[-1].key
        for stored in page:
            sealed = codec_text(stored.value)
            if sealed is not None:
                # Read without the codec that encoded it: what it holds
                # stays sealed; the retry's number and time are the row's.
                found.append(
                    RetriedHistory(
                        retry=int(stored.key), retried_at=stored.updated_at, sealed=sealed
                    )
                )
            else:
                kept = _serde.converter.structure(json.loads(stored.value), Replaced)
                found.append(kept.shown())
        if len(page) < _PAGE:
            break
    return tuple(found)
