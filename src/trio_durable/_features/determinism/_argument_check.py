"""Argument checks: non-determinism detection that also compares what a
durable operation was called with (``@app.workflow(check_arguments=True)``).

Replay always compares an operation's kind and name with what the run
recorded at its seq. A workflow registered with ``check_arguments=True``
also compares a SHA-256 digest of its arguments (a step's, a child's or a
fan member's inputs, an entity call's, a signal wait's timeout, a timer's
due time, a sent signal's target, payload and key, a published event's
value, a search-attribute upsert's changes) with the digest of what the
checkpoint recorded (docs/determinism.md lists them). A mismatch fails the run through the same path as
a changed name (`NonDeterminismError`, code ``non_determinism``).

The check only covers what was recorded while it was on: the first turn that
checks writes the first seq it recorded under the check (its record of kind
`CHECKED_FROM`),
and checkpoints before it, recorded by a deploy without the check, are
accepted as they are. Turning the check on for a workflow with runs in flight
therefore breaks none of them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Final

from ..._base._exceptions import NonDeterminismError
from ..._base._records import Checkpoint, CheckpointKind
from ..._base._run_records import value_record
from ..._kernel._markers import body_seqs
from ..._kernel._replay import Replay

CHECKED_FROM: Final = "checked_from"
"""The kind of a run's record of the first seq it recorded under the check."""

Arguments = Callable[[Checkpoint], str]
"""What an operation was called with, as text to digest, given the
checkpoint recorded at its seq (a timer's due time depends on when it was
recorded)."""


def digest(text: str) -> str:
    """The SHA-256 digest of ``text``, in hex."""
    return hashlib.sha256(text.encode()).hexdigest()


def checked_from(replay: Replay) -> int:
    """The first seq recorded under the check, recording it if this is the
    run's first turn under it."""
    turn = replay.turn
    found = turn.records.get(CHECKED_FROM)
    if found is not None and found.output is not None:
        return int(json.loads(found.output))
    first = max(body_seqs(turn.checkpoints), default=0) + 1
    now = replay.runtime.clock.now()
    turn.put_record(value_record(turn.run.id, CHECKED_FROM, json.dumps(first), now))
    return first


def check_arguments(
    replay: Replay,
    first_checked: int,
    name: str,
    kind: CheckpointKind,
    arguments: Arguments,
    *,
    seq: int | None = None,
    recorded: Arguments | None = None,
) -> None:
    """Compare the arguments of the operation about to take the next seq
    (or ``seq``: a fan's member) with what its checkpoint recorded (as
    ``recorded`` reads them, by default its input), if it recorded one
    under the check.

    Raises:
      NonDeterminismError: They differ (or replay already diverged).
    """
    turn = replay.turn
    if turn.nondeterminism is not None:
        raise turn.nondeterminism
    seq = replay.peek() if seq is None else seq
    cp = turn.checkpoints.get(seq)
    if cp is None or seq < first_checked or cp.name != name or cp.kind != kind:
        # Nothing recorded under the check here (a changed name or kind is
        # the replay's own check, made next).
        return
    recorded_digest = digest((recorded or recorded_arguments)(cp))
    requested = digest(arguments(cp))
    if recorded_digest == requested:
        return
    error = NonDeterminismError(
        f"at seq {seq} the run recorded {kind} {name!r} with other arguments"
        f" (digest {recorded_digest[:16]}) than the workflow now passes (digest {requested[:16]})",
        details={
            "seq": seq,
            "recorded": name,
            "requested": name,
            "recorded_kind": kind,
            "requested_kind": kind,
            "recorded_arguments": recorded_digest,
            "requested_arguments": requested,
        },
    )
    turn.nondeterminism = error
    raise error


def recorded_arguments(cp: Checkpoint) -> str:
    """What ``cp`` recorded its operation was called with, as text to
    digest: a timer's due time, else its input."""
    if cp.kind == "timer":
        return repr(cp.wake_at)
    return cp.input or ""


def timer_due(seconds: float | None, until: float | None) -> Arguments:
    """A timer's arguments: its due time, as the recorded timer computed it
    (``seconds`` after it was recorded, or ``until``)."""

    def due(cp: Checkpoint) -> str:
        if until is not None:
            return repr(until)
        return repr((cp.enqueued_at or 0.0) + float(seconds or 0.0))

    return due


_GENERATION: Final = re.compile(r"\.gen\.\d+$")


def chain_of(run_id: str) -> str:
    """The id of the first run of ``run_id``'s continue-as-new chain (a
    signal sent to a run is delivered to its latest generation)."""
    return _GENERATION.sub("", run_id)


def sent_signal(
    target: str, payload: Callable[[], str], key: str | None
) -> tuple[Arguments, Arguments]:
    """A signal sent to another run: what it now passes (its target's
    chain, its payload, its key: None for the default one) and what its
    checkpoint recorded."""

    def requested(cp: Checkpoint) -> str:
        return json.dumps([chain_of(target), payload(), key])

    def recorded(cp: Checkpoint) -> str:
        sent = json.loads(cp.output or "{}")
        sent_key = sent.get("key")
        if isinstance(sent_key, str) and sent_key.endswith(f":{cp.seq}"):
            # The default, ``<run id>:<seq>``: a fork's copy keeps the
            # original run's id in it.
            sent_key = None if key is None or key != sent_key else key
        return json.dumps([chain_of(str(sent.get("to", ""))), cp.input or "", sent_key])

    return requested, recorded
