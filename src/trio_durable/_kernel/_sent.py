"""The tasks an engine sent to its own worker and still waits on.

An engine that serves groups itself (``serve=``) counts every task it sends
to a queue its embedded worker consumes, from just before the send until it
learns the outcome of that attempt: `Engine.drain` waits for the count to
reach zero, so it cannot return while such a task is still on the broker,
on a worker, or its result on the way back, whatever the broker.

An attempt stops counting when any of these happens, whichever is first, so
the count never goes below zero and never stays above it once nothing is
left to come:

- a result for it (or for a later attempt of the same step) was settled,
  rescheduled or dropped by an engine of this process that shares the
  results queue (a duplicate finds nothing left to release);
- a turn found its checkpoint (or the run's decision record, for a
  decision task) no longer waiting for it: settled (by a result another
  engine took, a lost-step deadline, a ``fail_fast`` fan that froze it),
  re-armed as a later attempt, or gone;
- its run ended;
- the send failed for good (the checkpoint stays pending; nothing comes).

Engines of one process that share a results queue share what they learn,
since a result goes to whichever of them takes it first. An engine in
another process that takes a result tells nobody here: `reconcile_stalled`
then reads the store for the steps still counted, while a drain waits (see
`SentTasks.recheck`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final, final

import trio

from .._base._records import TERMINAL_STATUSES, Checkpoint
from .._base._run_records import RunRecord
from ._decision_record import DECISION, decision_of

if TYPE_CHECKING:
    from .._stores._base import Store
    from .._wire._messages import Result, Task

Key = int | str
"""What an attempt is counted under in its run: its step's seq, or
`DECISION` for a decision task."""


def sent_key(message: Task | Result) -> Key:
    """What ``message``'s attempt is counted under."""
    return DECISION if message.kind == "decision" else message.seq


_groups: Final[dict[tuple[str, trio.lowlevel.TrioToken], list[SentTasks]]] = {}
"""The engines of this process, by the results queue they share (and by
Trio run: engines of other threads' runs are other processes to them)."""


@final
class SentTasks:
    """One engine's count of attempts it sent to its own worker.

    Made inside the engine's Trio run.

    Args:
      results_queue: The results queue the engine consumes; engines of this
        process that consume the same one release each other's attempts.
    """

    def __init__(self, results_queue: str) -> None:
        self._group = (results_queue, trio.lowlevel.current_trio_token())
        # run id -> key -> the attempt sent last (a later one replaces it).
        self._attempts: dict[str, dict[Key, int]] = {}
        self._count = 0
        self._none = trio.Event()
        self._none.set()

    @property
    def count(self) -> int:
        """How many attempts are counted now."""
        return self._count

    def runs(self) -> list[str]:
        """The runs with attempts counted, in the order they were sent."""
        return list(self._attempts)

    async def wait_none(self) -> None:
        """Wait until no attempt is counted."""
        await self._none.wait()

    def join(self) -> None:
        """Share what this engine learns with the engines of this process
        that consume the same results queue, and learn from them."""
        _groups.setdefault(self._group, []).append(self)

    def leave(self) -> None:
        """Stop sharing (the engine closed), and count nothing any more, so
        a drain still waiting wakes up."""
        group = _groups.get(self._group, [])
        if self in group:
            group.remove(self)
        if not group:
            _groups.pop(self._group, None)
        self._attempts.clear()
        self._set_count(0)

    def add(self, run_id: str, seq: Key, attempt: int) -> None:
        """Count an attempt about to be sent (before the send: its result
        may be settled before the send returns)."""
        seqs = self._attempts.setdefault(run_id, {})
        if seq not in seqs:
            self._set_count(self._count + 1)
        seqs[seq] = max(attempt, seqs.get(seq, attempt))

    def unsent(self, run_id: str, seq: Key, attempt: int) -> None:
        """The send of an attempt failed for good: no result will come."""
        self._release(run_id, seq, attempt)

    def result_handled(self, run_id: str, seq: Key, attempt: int) -> None:
        """A result of this attempt was settled, rescheduled or dropped:
        no earlier attempt of the step is waited for either."""
        for peer in self._peers():
            peer._release(run_id, seq, attempt)

    def run_ended(self, run_id: str) -> None:
        """The run reached a terminal status: nothing of it is waited for."""
        for peer in self._peers():
            peer._drop_run(run_id)

    def attempts_of(self, run_id: str) -> dict[Key, int]:
        """The attempts of ``run_id`` counted now, by key (a copy)."""
        return dict(self._attempts.get(run_id, {}))

    def observed(
        self,
        run_id: str,
        checkpoints: Iterable[Checkpoint],
        records: Iterable[RunRecord] | None,
        seqs: range | None = None,
        *,
        as_of: dict[Key, int] | None = None,
    ) -> None:
        """What this engine read of ``run_id``'s checkpoints (those at
        ``seqs``, or all of them) and, unless None, its records: release
        every attempt whose checkpoint (or decision record) no longer waits
        for it (absent means gone).

        Args:
          as_of: The attempts counted when the read began (`attempts_of`);
            an attempt counted since then is newer than what was read, and
            stays. Without it, the caller guarantees that no attempt of the
            run was counted since (it held the run's lease meanwhile).
        """
        found: dict[Key, Checkpoint | RunRecord] = {cp.seq: cp for cp in checkpoints}
        if records is not None:
            decision = decision_of({record.kind: record for record in records})
            if decision is not None:
                found[DECISION] = decision
        self._observe(run_id, found, seqs, records is not None, as_of)
        # The other engines learn only what cannot go stale: a settled
        # checkpoint waits for no attempt up to its own. (What this read
        # saw pending may have moved on since, under another engine.)
        for peer in self._peers():
            if peer is not self:
                for key, cp in found.items():
                    if cp.status != "pending":
                        peer._release(run_id, key, cp.attempts)

    async def recheck(self, store: Store) -> None:
        """Read the store for the attempts still counted: an engine in
        another process may have settled them, or ended their run, without
        this engine taking part."""
        for run_id in self.runs():
            as_of = self.attempts_of(run_id)
            if not as_of:
                continue
            run = await store.get_run(run_id)
            if run is None or run.status in TERMINAL_STATUSES:
                if self.attempts_of(run_id) == as_of:
                    self.run_ended(run_id)
                continue
            seqs = [key for key in as_of if isinstance(key, int)]
            found = await store.get_checkpoints(run_id, min(seqs), max(seqs)) if seqs else []
            records = await store.get_records(run_id) if DECISION in as_of else None
            read = range(min(seqs), max(seqs) + 1) if seqs else range(0)
            self.observed(run_id, found, records, read, as_of=as_of)

    # -- internals ------------------------------------------------------------

    def _peers(self) -> list[SentTasks]:
        group = _groups.get(self._group)
        if group is None or self not in group:
            return [self]
        return list(group)

    def _observe(
        self,
        run_id: str,
        found: dict[Key, Checkpoint | RunRecord],
        seqs: range | None,
        records: bool,
        as_of: dict[Key, int] | None,
    ) -> None:
        for seq, attempt in list(self._attempts.get(run_id, {}).items()):
            if as_of is not None and as_of.get(seq) != attempt:
                continue
            cp = found.get(seq)
            read = records if isinstance(seq, str) else seqs is None or seq in seqs
            if read and (
                cp is None
                or cp.status != "pending"
                or cp.attempts != attempt
                or cp.started_at is None
            ):
                self._release(run_id, seq, attempt)

    def _release(self, run_id: str, seq: Key, up_to: int) -> None:
        seqs = self._attempts.get(run_id)
        if seqs is None or seqs.get(seq, up_to + 1) > up_to:
            return
        del seqs[seq]
        if not seqs:
            del self._attempts[run_id]
        self._set_count(self._count - 1)

    def _drop_run(self, run_id: str) -> None:
        seqs = self._attempts.pop(run_id, None)
        if seqs:
            self._set_count(self._count - len(seqs))

    def _set_count(self, count: int) -> None:
        self._count = count
        if count == 0:
            self._none.set()
        elif self._none.is_set():
            self._none = trio.Event()
