"""The layers an engine's tasks pass through on their way to the broker, and
its results on their way back, composed once when the engine opens.

Tracing (a dispatch span per task, see `_tracing`), large payloads (inputs
offloaded to the blob store, outputs read back, see `_blob_wire`) and
signing (each message sealed, each result checked, see `_signing`) cut
across every task and result. Each is a layer here, so the code that sends
tasks (`Dispatcher.send`) and settles results (`settle_batch`) names none of
them: it hands tasks to `WireLayers.outgoing` and results to
`WireLayers.incoming`, and opens and seals messages with the layers' seal.

A `TaskLayer` sees a batch at a time. Tasks go through the layers in order
(the first layer is the outermost: tracing sees a task before its input is
offloaded), results in the reverse order. A layer may leave a task out (it
could not do its part): the task is not sent, and the dispatcher treats it
as a send the broker refused, with the reason the layer gave.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Protocol, final

from .._base._records import DEFAULT_NAMESPACE
from ._blob_wire import offload_tasks, output_in_blob, resolve_result
from ._messages import Result, Task, WireError
from ._signing import MessageRole, SignatureRejected, count_rejection, open_signed, sign

if TYPE_CHECKING:
    from .._base._keyring import Keyring
    from .._base._observe import Metrics
    from .._payloads._blobs import Blobs
    from ._signing import RejectionCounts
    from ._tracing import Tracing

UNREADABLE: Final = (WireError, SignatureRejected)
"""What `WireLayers.open_result` raises for a message that is no result this
engine may settle: not one at all, or not sealed by a key it trusts."""


class TaskLayer(Protocol):
    """One layer over the tasks an engine sends and the results it settles."""

    async def outgoing(self, tasks: list[Task]) -> tuple[list[Task], str]:
        """``tasks`` as they go on to the next layer, and, if some are left
        out, why (they are not sent)."""
        ...

    async def incoming(self, results: list[Result]) -> list[Result]:
        """``results`` as they come back through this layer, one each."""
        ...

    def settled(self, result: Result) -> None:
        """``result`` was settled (or dropped as stale): nothing waits for
        its attempt any more."""
        ...


@final
class TracingLayer:
    """Opens a dispatch span per task sent (the task carries its trace
    context) and ends it when the task's result is settled."""

    def __init__(self, tracing: Tracing) -> None:
        self._tracing = tracing

    async def outgoing(self, tasks: list[Task]) -> tuple[list[Task], str]:
        traced = [
            # A route names its namespace after an "@" (none: the default).
            self._tracing.dispatched(task, task.route.partition("@")[2] or DEFAULT_NAMESPACE)
            for task in tasks
        ]
        return traced, ""

    async def incoming(self, results: list[Result]) -> list[Result]:
        return results

    def settled(self, result: Result) -> None:
        self._tracing.settled(result)


@final
class BlobLayer:
    """Offloads the inputs over the blob store's threshold as tasks go out,
    and reads back the outputs that came as references."""

    def __init__(self, blobs: Blobs) -> None:
        self._blobs = blobs

    async def outgoing(self, tasks: list[Task]) -> tuple[list[Task], str]:
        offloaded = await offload_tasks(self._blobs, tasks)
        if len(offloaded) < len(tasks):
            return offloaded, "the input could not be written to the blob store"
        return offloaded, ""

    async def incoming(self, results: list[Result]) -> list[Result]:
        if not any(output_in_blob(result) for result in results):
            return results
        return [await resolve_result(self._blobs, result) for result in results]

    def settled(self, result: Result) -> None:
        pass


@final
class WireLayers:
    """An engine's layers, in order, and the seal of its messages.

    Args:
      layers: The layers, outermost first.
      signing: The keys messages are sealed and checked with (see
        `_signing`), or None: messages go unsealed and results are read as
        they come.
    """

    def __init__(self, layers: Sequence[TaskLayer], signing: Keyring | None) -> None:
        self._layers = tuple(layers)
        self.signing = signing

    async def outgoing(self, tasks: list[Task]) -> tuple[list[Task], list[Task], str]:
        """The tasks to send, those a layer left out, and why."""
        passed, reason = tasks, ""
        for layer in self._layers:
            passed, why = await layer.outgoing(passed)
            reason = why or reason
        if len(passed) == len(tasks):
            return passed, [], ""
        kept = {(t.run_id, t.seq, t.attempt) for t in passed}
        left_out = [t for t in tasks if (t.run_id, t.seq, t.attempt) not in kept]
        return passed, left_out, reason

    async def incoming(self, results: list[Result]) -> list[Result]:
        """``results`` through the layers, innermost first."""
        for layer in reversed(self._layers):
            results = await layer.incoming(results)
        return results

    def settled(self, result: Result) -> None:
        """Tell the layers that ``result`` was settled (see
        `TaskLayer.settled`)."""
        for layer in self._layers:
            layer.settled(result)

    def seal(self, role: MessageRole, body: bytes) -> bytes:
        """``body``, sealed as a message of ``role``."""
        return sign(self.signing, role, body)

    def open_result(self, message: bytes) -> Result:
        """The result a message carries, its seal checked first: a forged
        result is never decoded.

        Raises:
          WireError: The message is no valid result.
          SignatureRejected: Its seal is missing, forged, or of an unknown
            key.
        """
        return Result.decode(open_signed(self.signing, "result", message))

    @staticmethod
    def count_unreadable(counts: RejectionCounts, metrics: Metrics, error: Exception) -> None:
        """Count a result message `open_result` refused (by why)."""
        count_rejection(counts, metrics, "result", error)


def engine_layers(tracing: Tracing, blobs: Blobs | None, signing: Keyring | None) -> WireLayers:
    """An engine's layers: tracing outermost (a task's span covers the
    offload of its input), then large payloads."""
    layers: list[TaskLayer] = []
    if tracing.enabled:
        layers.append(TracingLayer(tracing))
    if blobs is not None:
        layers.append(BlobLayer(blobs))
    return WireLayers(layers, signing)
