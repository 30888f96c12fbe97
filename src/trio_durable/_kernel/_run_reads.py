"""Reading one run as a caller names it, and what a caller writes along
with a control's batch (`Also`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._base._exceptions import RunNotFoundError, UsageError
from .._base._index_text import refuse_nul
from .._base._records import Run
from .._stores._ops import Op
from ._options import check_id

if TYPE_CHECKING:
    from .._stores._base import Store

Also = Callable[[Sequence[Run]], Sequence[Op]]
"""What a caller writes with a control's batch, given the runs it wakes."""


def write_nothing(runs: Sequence[Run]) -> Sequence[Op]:
    return ()


async def read_run(store: Store, run_id: str, namespace: str | None) -> Run:
    """The run as stored now (`Engine.get`, `Client.get`).

    Raises:
      RunNotFoundError: No run has this id (in ``namespace``).
      UsageError: ``namespace`` is malformed.
    """
    if namespace is not None:
        check_id("namespace", namespace)
    if not isinstance(run_id, str):
        raise UsageError(f"run_id must be a string, not {run_id!r}")
    refuse_nul("run_id", run_id)
    run = await store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(f"no run {run_id!r}")
    if namespace is not None and run.namespace != namespace:
        # Worded as for a missing run: another tenant's run stays unseen.
        raise RunNotFoundError(f"no run {run_id!r} in namespace {namespace!r}")
    return run
