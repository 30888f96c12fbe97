"""Large payloads on the broker: a remote step's task carries the reference
to an input over the threshold, and its result the reference to such an
output (see `_blobs`). The engine offloads inputs as it sends and resolves
outputs as results arrive; the worker resolves inputs and offloads outputs.
A decision task (a remote workflow's turn) is treated alike: its input is
the run's history, its result's output the decision.
"""

from __future__ import annotations

import json
import logging

import attrs

from ._blobs import BlobNotFound, Blobs, is_reference, is_reference_value
from ._exceptions import StoreError
from ._wire import Result, Task

logger = logging.getLogger("trio_durable")


async def offload_tasks(blobs: Blobs, tasks: list[Task]) -> list[Task]:
    """``tasks`` with their inputs over the threshold replaced by references.

    A task whose input cannot be written to the blob store is left out, with
    an error in the log: its checkpoint stays pending, as when the broker
    refuses it (``remote_redispatch`` sends it again if enabled).
    """
    sent: list[Task] = []
    for task in tasks:
        if not blobs.offloads(task.input):
            sent.append(task)
            continue
        try:
            reference, _ = await blobs.offload(task.input)
        except StoreError as exc:
            logger.error(
                "step %r of run %s (seq %d) is not sent: its input cannot be written"
                " to the blob store: %s",
                task.step,
                task.run_id,
                task.seq,
                exc,
            )
            continue
        sent.append(attrs.evolve(task, input=reference))
    return sent


async def resolve_result(blobs: Blobs | None, result: Result) -> Result:
    """``result`` with a referenced output read back from the blob store.

    A missing blob (or no blob store to read it from) makes it a failure of
    code ``blob_not_found`` that may be retried: the next attempt writes
    the output again.
    """
    if result.output is None or not is_reference(result.output):
        return result
    if blobs is None and not well_formed(result.output):
        # No blob store here, and no reference either: a step's own value.
        return result
    try:
        if blobs is None:
            raise BlobNotFound(
                result.output[:100], "the output is kept in a blob store, but none is configured"
            )
        return attrs.evolve(result, output=await blobs.resolve(result.output))
    except StoreError as exc:
        code = exc.code if isinstance(exc, BlobNotFound) else None
        return attrs.evolve(
            result,
            status="failed",
            output=None,
            error=f"the output of {result.kind} {result.step!r} cannot be read: {exc}",
            code=code,
            details=None,
            retryable=True,
        )


def well_formed(text: str) -> bool:
    """Whether ``text`` is a reference's JSON text."""
    try:
        return is_reference_value(json.loads(text))
    except ValueError:
        return False


async def offload_result(blobs: Blobs | None, result: Result) -> Result:
    """``result`` with an output over the threshold replaced by its
    reference (the worker's side). If the blob store fails, a failure in
    its place that may be retried (code ``blob_store_failed``)."""
    if blobs is None or result.output is None or not blobs.offloads(result.output):
        return result
    try:
        reference, _ = await blobs.offload(result.output)
    except StoreError as exc:
        return attrs.evolve(
            result,
            status="failed",
            output=None,
            error=f"the output of {result.kind} {result.step!r} cannot be written: {exc}",
            code="blob_store_failed",
            retryable=True,
        )
    return attrs.evolve(result, output=reference)
