"""A run's own records: the bookkeeping a run keeps besides the log of its
body's operations.

A body's operations are `Checkpoint`s, under the seqs the body takes. What
a run keeps about itself (that it waits for admission, the decision task
of a remote workflow that is out, where its cancellation was delivered,
the run it continued from, ...) is a `RunRecord`, one per run and kind, in
a table of its own in every store: a turn reads them in the same read as
the run and its checkpoints (`Store.begin_turn`), and the feature that
keeps a kind is the only code that knows its name.
"""

from __future__ import annotations

from typing import final

import attrs

from ._records import CheckpointStatus, ErrorInfo, Mark


@final
@attrs.define(frozen=True, kw_only=True)
class RunRecord:
    """One record a run keeps about itself, under its kind.

    Most kinds hold a value (``output``) written once; a record of a task
    sent on a run's behalf (a remote workflow's decision task) goes through
    the states of a checkpoint, and the store's claims work alike on it
    (`ClaimRecord`, `SettleRecord`).

    Attributes:
      run_id: The run it belongs to.
      kind: What it records, unique per run (the feature that keeps it
        names it).
      status: ``pending`` while it waits (for a slot, a decision, ...),
        else ``completed`` or ``failed``.
      input: What it waits with, as JSON text, if anything.
      output: Its value, as JSON text, if any.
      error: Why it failed; while it has a `mark`, the mark as an error.
      mark: What it waits for besides its answer (a `Mark`: its task is
        out on a broker, its send waits for the broker, it is to be sent
        again), while pending.
      errors: The errors of the attempts that came before, in order.
      attempts: How many attempts of its task were sent.
      group: Where its task goes (a worker group route).
      wake_at: When it is due (durable time).
      enqueued_at: When it was first written.
      started_at: When its task was sent.
      finished_at: When it was settled.
      executions: The execution ids of its task's dispatches, oldest first
        (a result settles it only if it carries one of them).
    """

    run_id: str
    kind: str
    status: CheckpointStatus = "completed"
    input: str | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    errors: tuple[ErrorInfo, ...] = ()
    attempts: int = 0
    group: str | None = None
    wake_at: float | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    executions: tuple[str, ...] = ()
    mark: Mark | None = None

    def __attrs_post_init__(self) -> None:
        if self.mark is not None and (self.error is None or self.error.sealed is None):
            # A marked record shows its mark as its error (but one a codec
            # sealed in a release before, which the codec store reads the
            # mark from).
            object.__setattr__(self, "error", self.mark.as_error())


def value_record(
    run_id: str, kind: str, output: str | None, now: float, *, input: str | None = None
) -> RunRecord:
    """A completed record that holds a value (``output``, JSON text)."""
    return RunRecord(
        run_id=run_id,
        kind=kind,
        input=input,
        output=output,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
    )
