"""Large payloads on the broker: a remote step's task carries the reference
to an input over the threshold, and its result the reference to such an
output (see `_blobs`). The engine offloads inputs as it sends and resolves
outputs as results arrive; the worker resolves inputs and offloads outputs.
A decision task (a remote workflow's turn) is treated alike: its input is
the run's history, its result's output the decision.

A task's input is a reference exactly when it is a JSON object: arguments
are always a list. A result says whether its output is a reference out of
band (`Result.output_blob`), since a step may return any value, one shaped
like a reference included; only a result from a worker of a release before
that field is read by its output's shape (docs/large-payloads.md, rolling
upgrades).
"""

from __future__ import annotations

import logging
from typing import Final

import attrs

from .._base._exceptions import BlobCorrupted, BlobNotFound, StoreError
from .._payloads._blobs import Blobs, referenced_key, wire_reference
from ._messages import Result, Task

logger = logging.getLogger("trio_durable")

_LEGACY_REFERENCE: Final = '{"$blob":'
"""What the output of a result from a worker before `Result.output_blob`
begins with when it is a reference."""


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
            key, size = await blobs.offload(task.input)
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
        sent.append(attrs.evolve(task, input=wire_reference(key, size)))
    return sent


async def resolve_task_input(blobs: Blobs | None, text: str) -> str:
    """A task's input: its arguments' JSON text, read from the blob store
    if ``text`` is a reference (the worker's side).

    Raises:
      BlobNotFound: The blob is missing, or there is no blob store to read
        it from.
      BlobCorrupted: The blob does not match its key.
      StoreError: The blob store failed.
    """
    key = referenced_key(text)
    if key is None:
        return text
    if blobs is None:
        raise BlobNotFound(
            key,
            f"a task's input is kept in a blob store ({text[:100]}), but none was configured"
            " (blobs=) to read it",
        )
    return await blobs.resolve(key)


def output_in_blob(result: Result) -> bool:
    """Whether ``result``'s output is a reference to a blob."""
    if result.output is None:
        return False
    if result.output_blob is not None:
        return result.output_blob
    # A worker before `output_blob`: what has the shape of a reference is one.
    return result.output.startswith(_LEGACY_REFERENCE) and referenced_key(result.output) is not None


async def resolve_result(blobs: Blobs | None, result: Result) -> Result:
    """``result`` with a referenced output read back from the blob store.

    A missing or corrupted blob (or no blob store to read it from) makes it
    a failure of code ``blob_not_found`` (``blob_corrupted``) that may be
    retried: the next attempt writes the output again.
    """
    if result.output is None or not output_in_blob(result):
        return attrs.evolve(result, output_blob=False)
    try:
        key = referenced_key(result.output)
        if key is None:
            raise BlobNotFound(
                result.output[:100], f"not a blob reference: {result.output[:100]!r}"
            )
        if blobs is None:
            raise BlobNotFound(key, "the output is kept in a blob store, but none is configured")
        return attrs.evolve(result, output=await blobs.resolve(key), output_blob=False)
    except StoreError as exc:
        code = exc.code if isinstance(exc, BlobNotFound | BlobCorrupted) else None
        return attrs.evolve(
            result,
            status="failed",
            output=None,
            output_blob=False,
            error=f"the output of {result.kind} {result.step!r} cannot be read: {exc}",
            code=code,
            details=None,
            retryable=True,
        )


async def offload_result(blobs: Blobs | None, result: Result) -> Result:
    """``result`` with an output over the threshold replaced by its
    reference, and marked as one or not (the worker's side). If the blob
    store fails, a failure in its place that may be retried (code
    ``blob_store_failed``)."""
    if blobs is None or result.output is None or not blobs.offloads(result.output):
        return attrs.evolve(result, output_blob=False)
    try:
        key, size = await blobs.offload(result.output)
    except StoreError as exc:
        return attrs.evolve(
            result,
            status="failed",
            output=None,
            output_blob=False,
            error=f"the output of {result.kind} {result.step!r} cannot be written: {exc}",
            code="blob_store_failed",
            retryable=True,
        )
    return attrs.evolve(result, output=wire_reference(key, size), output_blob=True)
