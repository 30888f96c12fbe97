"""Patch markers: what `Context.patched` records in a run's history.

A marker is a completed ``local`` checkpoint at a body seq, named
``patch:<change id>``. No step can have that name (a step name has no
``:``), so a marker is never mistaken for an operation. Replay steps over
markers for every operation but `Context.patched` (see `Replay.take_markers`).
"""

from __future__ import annotations

from typing import Final

from .._base._records import Checkpoint
from .._wire._wire_records import BODY_SEQ_LIMIT as BODY_SEQ_LIMIT

PATCH_PREFIX: Final = "patch:"


def patch_marker_name(change_id: str) -> str:
    """The checkpoint name of ``change_id``'s marker."""
    return PATCH_PREFIX + change_id


def is_patch_marker(cp: Checkpoint) -> bool:
    """Whether ``cp`` is a patch marker."""
    return cp.kind == "local" and cp.name.startswith(PATCH_PREFIX)


def marker_change_id(cp: Checkpoint) -> str:
    """The change id a marker records."""
    return cp.name[len(PATCH_PREFIX) :]


def body_seqs(checkpoints: dict[int, Checkpoint]) -> list[int]:
    """The seqs of ``checkpoints`` that body operations took."""
    return [seq for seq in checkpoints if 0 < seq < BODY_SEQ_LIMIT]


def record(run_id: str, seq: int, name: str, output: str | None, now: float) -> Checkpoint:
    """A completed record the replay keeps in a run's history."""
    return Checkpoint(
        run_id=run_id,
        seq=seq,
        name=name,
        kind="local",
        status="completed",
        output=output,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
    )
