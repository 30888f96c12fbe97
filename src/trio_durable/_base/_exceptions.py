"""The errors trio-durable raises.

The set is small and flat. Errors that describe a failed piece of work
(`FatalError`, `StepFailed`, `RunFailed`, `GatherError`) carry a ``code`` and
JSON ``details`` that survive the store and the wire unchanged. Errors that
describe bad input from the caller are raised before anything is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import attrs

from ._frames import folded_text

JSON = Any
"""A value that `json.dumps` accepts (dicts, lists, strings, numbers, bools, None)."""


class TrioDurableError(Exception):
    """Base class of every error trio-durable defines."""


class FatalError(TrioDurableError):
    """A failure that must not be retried.

    Raise it from a step or a workflow body to stop retries at once. Its
    ``code`` and JSON ``details`` travel with the failure: to the run's stored
    error, to `RunFailed`, to a parent's `all_settled` item and to a
    `GatherError` failure.

    Args:
      message: What went wrong, for people.
      code: A short machine-readable code, such as ``"card_declined"``.
      details: Any JSON-able value with more context.
    """

    retryable = False

    def __init__(self, message: str, code: str | None = None, details: JSON = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code!r})"


@final
class NonDeterminismError(FatalError):
    """Replay found a different operation than the one recorded at a seq.

    The workflow's code changed under a run in flight (a broken deploy), or it
    depends on something that is not deterministic. The run fails with code
    ``non_determinism``; such failures are never retried automatically.
    """

    def __init__(self, message: str, details: JSON = None) -> None:
        super().__init__(message, code="non_determinism", details=details)


@final
class SignalTimeout(TrioDurableError):
    """Raised inside a workflow when `Context.wait_signal` timed out.

    Attributes:
      name: The signal's name.
      timeout: The timeout, in seconds, that passed.
    """

    code = "signal_timeout"

    def __init__(self, name: str, timeout: float) -> None:
        super().__init__(f"signal {name!r} did not arrive within {timeout} s")
        self.name = name
        self.timeout = timeout


class _StepFailure(TrioDurableError):
    """What `StepFailed` and `RemoteStepError` share: a step's final error,
    with its code, JSON details and attempt count."""

    _kind = "step"

    def __init__(
        self,
        step: str,
        message: str,
        *,
        code: str | None = None,
        details: JSON = None,
        attempts: int = 1,
        traceback: str | None = None,
    ) -> None:
        super().__init__(f"{self._kind} {step!r} failed: {message}")
        self.step = step
        self.message = message
        self.code = code
        self.details = details
        self.attempts = attempts
        self.traceback = traceback


@final
class StepFailed(_StepFailure):
    """Raised inside a workflow when a step failed for good.

    The step either raised a non-retryable error or ran out of attempts. On
    replay the same error is raised again from the record, so a workflow sees
    the same exception every time it runs. The step's original exception is
    the ``__cause__`` on the first execution only.

    Attributes:
      step: The step's name.
      message: The last attempt's error message.
      code: The error's code (the `FatalError` code, ``"timeout"`` for a step
        that timed out, or None).
      details: The error's JSON details.
      attempts: How many attempts ran.
      traceback: The last attempt's recorded traceback, or None.
    """


@final
class RemoteStepError(_StepFailure):
    """Raised inside a workflow when a remote step failed for good.

    The worker's error (or the engine's, such as code ``"lost"`` for a step
    no worker answered) with its code and JSON details, exactly as it came
    back; raised again from the record on every replay.

    Attributes:
      step: The step's name.
      message: The error message.
      code: The error code, or None.
      details: The error's JSON details, or None.
      attempts: How many attempts were dispatched.
      traceback: The traceback the worker recorded for the last attempt, or
        None.
    """

    _kind = "remote step"


class RunFailed(TrioDurableError):
    """A run ended in failure.

    Raised by `Engine.result` for a failed run, and inside a parent workflow by
    `Context.child` when the awaited child failed. The child's `FatalError`
    code and details reach the parent through this exception.

    The exception that failed the run was raised in another turn, maybe in
    another process, so it cannot be the ``__cause__``. When the run's error
    recorded a traceback, `Engine.result` raises this exception from a
    stand-in whose message is that traceback (as `concurrent.futures` does
    for an exception from a worker process): an uncaught `RunFailed` prints
    where the run really failed.

    Attributes:
      run_id: The run that failed.
      message: Its error message.
      code: Its error code, or None.
      details: Its error details (JSON), or None.
      step: The step whose failure failed the run, or None (the body itself
        raised, or the run was cancelled).
      traceback: The traceback recorded with the run's error (cut to the
        engine's ``traceback_limit``), or None. `folded_traceback` is the
        same with trio-durable's own frames folded; an uncaught `RunFailed`
        prints that one (its ``__cause__``'s message).
    """

    def __init__(
        self,
        run_id: str,
        message: str,
        code: str | None = None,
        details: JSON = None,
        *,
        step: str | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(f"run {run_id!r} failed: {message}")
        self.run_id = run_id
        self.message = message
        self.code = code
        self.details = details
        self.step = step
        self.traceback = traceback

    @property
    def folded_traceback(self) -> str | None:
        """`traceback` with each run of trio-durable's own frames (and its
        adapters') folded into one line, so that your code's frames are
        what you read first; None without a traceback. `traceback` keeps
        every frame."""
        return None if self.traceback is None else folded_text(self.traceback)


@final
class RunCancelled(RunFailed):
    """The run was cancelled (code ``"cancelled"``)."""


@final
class RunTerminated(RunFailed):
    """The run was terminated (code ``"terminated"``; the message is the
    reason given to `Engine.terminate`): it ended at once, without
    compensation or cleanup."""


@final
class RecordedTraceback(Exception):
    """Stands in, as a ``__cause__``, for an exception raised in another turn
    or process: its message is that exception's recorded traceback."""

    def __init__(self, traceback: str) -> None:
        super().__init__(traceback)
        self.traceback = traceback

    def __str__(self) -> str:
        # On a line of its own, so the traceback reads as it was printed;
        # with trio-durable's own frames folded (``traceback`` keeps them).
        return "\n" + folded_text(self.traceback.rstrip("\n"))


@final
@attrs.define(frozen=True, kw_only=True)
class GatherFailure:
    """One failed member of a fan, as carried by `GatherError`."""

    index: int
    id: str
    error: str
    code: str | None = None
    details: JSON = None


@final
class GatherError(TrioDurableError):
    """Raised by `Context.all` when members of the fan failed.

    Attributes:
      failures: The failed members, in input order.
      total: How many members the fan had.
    """

    def __init__(self, failures: Sequence[GatherFailure], total: int) -> None:
        super().__init__(f"{len(failures)} of {total} fan members failed")
        self.failures = tuple(failures)
        self.total = total

    code = "gather_failed"

    @property
    def details(self) -> JSON:
        return {
            "total": self.total,
            "failures": [attrs.asdict(failure) for failure in self.failures],
        }


class UsageError(TrioDurableError, ValueError):
    """Base class of errors about bad input from the caller.

    Every one is raised before anything is written to the store.
    """


@final
class RegistrationError(UsageError):
    """A workflow or step registration is invalid: a duplicate name and
    version, a bad name, or a bad option."""


@final
class UnknownWorkflowError(UsageError):
    """No workflow is registered under the given name (and version)."""


@final
class SerializationError(UsageError, TypeError):
    """A value cannot be converted to JSON, or a stored value cannot be
    converted back to the declared type."""


@final
class InvalidArgumentsError(UsageError, TypeError):
    """The inputs given to a workflow or a step do not fit its signature.

    Raised by `Engine.start`, and inside a workflow by `Context.step`,
    `Context.child`, `Context.start_child`, `Context.all` and
    `Context.all_settled`, when there are too few or too many inputs, or an
    input cannot be read back as the parameter's declared type (as replay
    would read it, and stricter for ``str``, ``int``, ``float`` and ``bool``,
    which take only the JSON value of their kind). Nothing is written: no
    run is created, and no checkpoint is recorded for the call. Inside a
    workflow it fails the run (code ``invalid_arguments``) unless the body
    catches it. A value that cannot be serialized at all raises
    `SerializationError` instead.

    Attributes:
      target: The workflow or step, as ``"workflow 'name'"`` or
        ``"step 'name'"``.
      parameter: The parameter whose input does not fit, or None when the
        count of inputs is wrong.
    """

    code = "invalid_arguments"

    def __init__(self, message: str, *, target: str, parameter: str | None = None) -> None:
        super().__init__(message)
        self.target = target
        self.parameter = parameter


@final
class RunNotFoundError(UsageError, LookupError):
    """No run has the given id."""


@final
class InvalidRunStateError(UsageError):
    """The operation does not apply to the run in its current status: a retry
    of a run that is not failed or dead, a cancel or a signal of a run that
    already ended. Nothing was changed."""


@final
class RunConflictError(UsageError):
    """`Engine.start` was given a ``run_id`` that already belongs to a run of
    another workflow. The existing run is left untouched."""


class WebhookError(UsageError):
    """A webhook token could not be delivered (see `Context.webhook`).
    Nothing was changed."""


@final
class WebhookNotFoundError(WebhookError, LookupError):
    """No webhook has this token (or its run was pruned)."""


@final
class WebhookUsedError(WebhookError):
    """The webhook was delivered already: a token is good for one delivery."""


@final
class BreakpointNotFoundError(UsageError, LookupError):
    """No breakpoint has this id."""


@final
class InvalidURLError(UsageError):
    """A store or broker URL is malformed or names an unknown scheme."""


class ScheduleError(UsageError):
    """A schedule is invalid (its cron expression, timezone or an option),
    or cannot be changed as asked. Nothing is written."""


@final
class ScheduleNotFoundError(ScheduleError, LookupError):
    """No schedule has the given name."""


@final
class ContinueAsNewError(UsageError):
    """`Context.continue_as_new` was called where a run cannot end: inside a
    step, or with inputs that do not fit the workflow. Nothing is written."""


class EntityError(UsageError):
    """An entity call is invalid. Nothing is written."""


@final
class UnknownEntityError(EntityError, LookupError):
    """No entity, or no handler of the entity, has the given name."""


@final
class EntityKeyError(EntityError, TypeError):
    """An entity was called with a key of a type it does not take."""


@final
class UnsubscribedEventWarning(UserWarning):
    """An event was sent that no workflow subscribes to. The event is kept
    all the same, so a workflow that subscribes later can be started for it
    by hand."""


class EventConflictError(UsageError):
    """An event was sent with the id of a stored event of another name
    (`Engine.send_event`). Sending the same event again is no conflict: it
    returns the first send's receipt."""


class StoreError(TrioDurableError):
    """The store failed to read or write. The operation may be retried."""


@final
class SchemaVersionError(StoreError):
    """The store's schema is older than this trio-durable's, and what
    opened it does not change a store's schema: a client, a command that
    only reads, or ``trio-durable engine`` without ``--migrate``. Nothing
    was written. Upgrade it with ``trio-durable migrate`` (engines of the
    release before cannot open it after), or open an engine from Python,
    which migrates the store it opens (docs/operations.md, "Upgrading the
    schema").

    Attributes:
      found: The version the store holds.
      newest: The version this trio-durable reads and writes.
    """

    def __init__(self, message: str, *, found: int, newest: int) -> None:
        super().__init__(message)
        self.found = found
        self.newest = newest


@final
class LeaseLostError(StoreError):
    """A write was fenced off because this engine no longer holds the run's
    lease: another engine took the run over. The write changed nothing."""


@final
class EngineClosedError(TrioDurableError):
    """The engine was used after `open_engine` exited."""


@final
class SignalTargetNotFoundError(UsageError, LookupError):
    """`Context.signal` was given a run id that no run of the sender's
    namespace has. Raised in the sending body; nothing was written, and the
    key is not claimed."""


@final
class UnknownHandlerError(UsageError, LookupError):
    """`Engine.query` or `Engine.update` named no handler the run registered
    where it stands (a body registers its handlers as it runs). Nothing was
    written."""


class _HandlerError(TrioDurableError):
    """An update or query handler's failure, or a validator's rejection."""

    _kind = "handler"
    _outcome = "failed"

    def __init__(
        self, run_id: str, name: str, message: str, code: str | None = None, details: JSON = None
    ) -> None:
        super().__init__(f"{self._kind} {name!r} of run {run_id!r} {self._outcome}: {message}")
        self.run_id = run_id
        self.name = name
        self.message = message
        self.code = code
        self.details = details


@final
class UpdateRejected(_HandlerError):
    """An update's validator rejected it (`Engine.update`): raised by the
    caller's own validation, and nothing was written; or by the validation
    again in the run's turn, when the run's state changed meanwhile (then
    the update is recorded as rejected, and its handler never ran).

    Attributes:
      run_id: The run.
      name: The update's name.
      message: The validator's error message.
      code: Its code (a `FatalError`'s), or None.
      details: Its JSON details, or None.
    """

    _kind = "update"
    _outcome = "was rejected"


@final
class UpdateFailed(_HandlerError):
    """An update's handler raised in the run's turn (`Engine.update`). The
    run goes on; what the handler changed before it raised stays changed.

    Attributes:
      run_id: The run.
      name: The update's name.
      message: The handler's error message.
      code: Its code (a `FatalError`'s), or None.
      details: Its JSON details, or None.
    """

    _kind = "update"


@final
class QueryFailed(_HandlerError):
    """A query handler raised (`Engine.query`); its ``__cause__`` is what it
    raised, in the caller's process, which replayed the run to answer.

    Attributes:
      run_id: The run.
      name: The query's name.
      message: The handler's error message.
      code: Its code (a `FatalError`'s), or None.
      details: Its JSON details, or None.
    """

    _kind = "query"


@final
class ForkPointError(UsageError):
    """`Engine.fork` or `Engine.retry` was given a ``from_seq`` the run
    cannot be run again from: not a whole number between 1 and one past the
    run's last body seq, inside a fan (fork from its first seq instead),
    after an operation that has not settled, or, for a retry in place, at or
    before a child run (which would start again under the id its first run
    holds: fork instead). Nothing was written."""


@final
class BlobNotFound(StoreError):
    """A payload's blob cannot be read for the row that refers to it.

    Raised when a stored row or a broker message refers to a blob that was
    deleted or never written (by `BlobStore.get`, and by every read of the
    engine, the client and the worker that resolves a reference), when a
    reference is met and no blob store was configured to read it, or when
    a row refers to a blob its run's own blob-reference record does not
    list (a reference copied from another run is never honoured). A remote
    step whose input blob is missing fails with code ``blob_not_found``;
    an engine's turn that meets one reports it on the run (code
    ``payload_undecodable``) and leaves the run for an engine that can
    read it.

    Attributes:
      key: The blob's key.
    """

    code = "blob_not_found"

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(message or f"blob {key!r} is not in the blob store")
        self.key = key


@final
class BlobCorrupted(StoreError):
    """A blob's bytes do not match its key, the SHA-256 of what was written.

    Raised by `LocalBlobStore.get` (and by every blob store that passes the
    conformance suite) when a blob kept under a content address
    (``sha256-<hex>``) was altered where it is kept: edited, truncated, or
    written partly. Nothing altered is ever served as a payload. Writing
    the same payload again (`BlobStore.put`, which every engine and worker
    does when it offloads it) repairs the blob. A remote step whose input
    blob is corrupted fails with code ``blob_corrupted``; a turn that meets
    one reports it on the run (code ``payload_undecodable``).

    Attributes:
      key: The blob's key.
    """

    code = "blob_corrupted"

    def __init__(self, key: str, message: str | None = None) -> None:
        super().__init__(
            message or f"blob {key!r} does not match its key: it was altered in the blob store"
        )
        self.key = key


@final
class CodecError(StoreError):
    """A stored payload cannot be decoded: it was encrypted with a key the
    codec's keyring lacks (``key_id`` names it), or its ciphertext fails
    authentication (a wrong key under that id, or altered bytes).

    A `StoreError`, so an engine treats it as a store it cannot read yet:
    the run is never failed for it; the turn that meets it reports it once
    on the run (code ``payload_undecodable``) and leaves the run for an
    engine whose ring has the key."""

    def __init__(self, message: str, *, key_id: str | None = None) -> None:
        super().__init__(message)
        self.key_id = key_id


@final
class Cancelled(BaseException):
    """Raised inside a workflow body when its run was cancelled
    (`Engine.cancel`, `Client.cancel`, a parent's cancel, the run's
    deadline), so that the body can clean up: ``except td.Cancelled:``.

    It is raised at the first durable operation the body reaches that has
    no recorded outcome (where the run was waiting, or would have gone on),
    on every replay at the same place, and again at every durable operation
    after that, but for those inside ``with ctx.shield():``, which run. The
    run ends ``cancelled`` once the body ends, whether it re-raises, returns
    or raises another error; compensation, if asked for, runs after it. It
    derives from BaseException, as `trio.Cancelled` does, so ``except
    Exception`` does not catch it. See docs/determinism.md.

    Attributes:
      seq: The seq of the operation it was raised at.
    """

    def __init__(self, seq: int) -> None:
        super().__init__(f"the run was cancelled (delivered at seq {seq})")
        self.seq = seq


@final
class SearchAttributeError(UsageError, TypeError):
    """A search attribute's name, type or value is not valid: a name not
    declared (`App.search_attribute`), a value not of the attribute's
    declared type, a declaration that disagrees with the type the store
    already holds for that name, or a filter that cannot apply to the
    attribute. Raised before anything is written (see
    docs/search-attributes.md)."""


@final
class HistoryError(UsageError):
    """An exported history cannot be read: a path that is no file or folder
    (or a folder without histories), a file that is not JSON, or no history
    of the format and version this release reads (or a field is missing or
    of the wrong type). Raised by `trio_durable.testing.replay`,
    `replay_all` and ``trio-durable replay`` before any body runs; never
    for a history the code does not fit (`NonDeterminismError`)."""


@final
class EncryptedHistoryError(UsageError):
    """A history's payloads are encrypted and no codec decodes them: raised by
    `Engine.export_history` and `Client.export_history` unless ``encrypted=True``
    (``trio-durable runs export`` then writes nothing), and by `trio_durable.testing.replay`
    for such an export replayed without the codec (a key it lacks: `CodecError`)."""
