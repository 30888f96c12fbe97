"""The rows a store keeps: runs, checkpoints and the errors they carry.

Payloads (inputs, outputs, signal payloads, error details) are kept as JSON
text, so a record is immutable and a store never needs to understand what a
workflow passes around. Times are durable times: seconds since the Unix epoch
as read from the engine's `Clock`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, Literal, final

import attrs

from ._search_values import SearchCondition, SearchValue
from ._search_values import matches as search_matches

RunStatus = Literal[
    "pending",
    "running",
    "suspended",
    "completed",
    "failed",
    "cancelling",
    "cancelled",
    "terminated",
    "dead",
]
CheckpointKind = Literal["local", "remote", "timer", "signal", "child", "webhook", "decision"]
CheckpointStatus = Literal["pending", "running", "completed", "failed"]
FanMode = Literal["fail_fast", "wait_all", "settled"]

TERMINAL_STATUSES: Final[frozenset[RunStatus]] = frozenset(
    {"completed", "failed", "cancelled", "terminated", "dead"}
)
"""Run statuses that never change again (but by `Engine.retry`)."""

ACTIVE_STATUSES: Final[frozenset[RunStatus]] = frozenset(
    {"pending", "running", "suspended", "cancelling"}
)

DEFAULT_NAMESPACE: Final = "default"

LATEST_VERSION: Final = ""

"""The version of a run started by workflow name where no app tells the
versions (a `Client` without one): the engine that first runs it runs the
version registered last there, and writes it on the run. No workflow can be
registered under it (a version is never empty)."""

DEFAULT_TRACEBACK_LIMIT: Final = 8192
"""How many characters of a traceback an error keeps by default."""


@final
@attrs.define(frozen=True, kw_only=True)
class ErrorInfo:
    """A failure as stored and as carried across the wire.

    Attributes:
      message: What went wrong, for people.
      code: A machine-readable code, or None.
      details: JSON details, or None.
      type: The Python type name of the exception, for people.
      step: The step whose failure this is (for a run's error: the step
        whose failure failed the run), or None.
      traceback: The exception's traceback as text, cut to the engine's or
        worker's ``traceback_limit`` (see `bound_traceback`), or None. For
        people only: it takes no part in comparing errors (``==``), since
        it names files and lines that change from one deploy to the next.
      sealed: Set only in a store whose payloads a codec encodes
        (`trio_durable.stores.CodecStore`): the message, details and
        traceback as the codec encoded them, which ``message`` then only
        describes (``"encrypted with k1"``) and ``details`` and
        ``traceback`` leave out. None for an error in the clear. Kept apart
        from the details, so that no details of a user's can pass for it.
      started_at: For the error of one attempt of a step: when that attempt
        started (durable time; for a remote step, when the worker started
        it, by the worker's clock, or when the engine sent it, for an
        attempt no worker answered). None for an error that is no
        attempt's (a run's), and in rows written before attempts had times.
      finished_at: When that attempt ended (the worker's or the engine's
        durable time, as ``started_at``), or None likewise. Neither takes
        part in comparing errors (``==``).
    """

    message: str
    code: str | None = None
    details: Any = None
    type: str | None = None
    step: str | None = None
    traceback: str | None = attrs.field(default=None, eq=False)
    sealed: str | None = None
    started_at: float | None = attrs.field(default=None, eq=False)
    finished_at: float | None = attrs.field(default=None, eq=False)

    @property
    def duration(self) -> float | None:
        """How long the attempt took, if both of its times are known."""
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message": self.message}
        if self.code is not None:
            data["code"] = self.code
        if self.details is not None:
            data["details"] = self.details
        if self.type is not None:
            data["type"] = self.type
        if self.step is not None:
            data["step"] = self.step
        if self.traceback is not None:
            data["traceback"] = self.traceback
        if self.sealed is not None:
            data["sealed"] = self.sealed
        if self.started_at is not None:
            data["started_at"] = self.started_at
        if self.finished_at is not None:
            data["finished_at"] = self.finished_at
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ErrorInfo:
        # Rows written before a field existed lack it: it reads as None.
        return cls(
            message=str(data["message"]),
            code=data.get("code"),
            details=data.get("details"),
            type=data.get("type"),
            step=data.get("step"),
            traceback=data.get("traceback"),
            sealed=data.get("sealed"),
            started_at=_time_or_none(data.get("started_at")),
            finished_at=_time_or_none(data.get("finished_at")),
        )


def _time_or_none(value: Any) -> float | None:
    # A time only if it is a number: an attempt's times are for people, and
    # a row (or a message) that holds something else for one reads as
    # holding none, rather than failing to read.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


@final
@attrs.define(frozen=True)
class Mark:
    """What a pending checkpoint (or a run's record of a task out) waits for,
    as the feature that waits names it: its attempt is out on a broker
    (``out``, whose details name the broker), its send waits for the broker
    (``broker_unavailable``), it waits in a flow-control queue's line
    (``queued``), for the queue's rate limit (``rate_limited``), for a worker
    that offers what it requires (``blocked``), for a fan's window
    (``fan_window``), to be sent again (``resend``), at a breakpoint
    (``paused``), or was told to go on past one (``continued``).

    Attributes:
      code: Which wait it is.
      message: The wait, for people.
      details: JSON details, or None.
    """

    code: str
    message: str = ""
    details: Any = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
            data["details"] = self.details
        return data

    def as_error(self) -> ErrorInfo:
        """The mark as a pending checkpoint's ``error`` shows it."""
        return ErrorInfo(message=self.message, code=self.code, details=self.details)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Mark:
        return cls(
            code=str(data["code"]),
            message=str(data.get("message", "")),
            details=data.get("details"),
        )


def bound_traceback(text: str | None, limit: int) -> str | None:
    """``text`` cut to at most ``limit`` characters (None if ``limit`` is 0).

    A cut keeps the start, where the first exception of a chain (the root
    cause) begins, and the longer end, where the innermost frame and the
    exception raised last are, with a marker where the middle was.
    """
    if text is None or limit <= 0:
        return None
    if len(text) <= limit:
        return text
    marker = f"\n[... traceback cut to {limit} characters ...]\n"
    room = limit - len(marker)
    if room < 60:
        return text[-limit:]
    head = room // 3
    return text[:head] + marker + text[len(text) - (room - head) :]


@attrs.define(frozen=True, kw_only=True)
class Run:
    """A run of a workflow, as the store holds it.

    `RunHandle`, which `Engine.start` returns, is a `Run` too.

    Attributes:
      id: The run's id, unique in the store.
      workflow: The workflow's registered name.
      version: The workflow's version the run executes.
      namespace: The tenant the run belongs to.
      status: One of ``pending``, ``running``, ``suspended``, ``completed``,
        ``failed``, ``cancelling``, ``cancelled``, ``terminated``, ``dead``.
      input: The positional arguments, as JSON text of a list.
      output: The return value as JSON text, once completed.
      error: The failure, once failed or cancelled.
      tags: Free-form labels.
      parent_id: The run that started this one, if any.
      parent_seq: The seq of the parent's checkpoint this run settles when it
        ends (None for a child started with `Context.start_child`).
      lease_owner: The engine executing the run, if any.
      lease_expiry: When that lease lapses (durable time).
      wake_at: When a suspended run is due to resume (durable time).
      compensate: Whether a requested cancellation runs the saga's undos.
      recoveries: How many times the run was taken over from an engine whose
        lease had lapsed.
      created_at: When the run was created (durable time).
      updated_at: When the row last changed (durable time).
      search_attributes: The run's search attributes by name (see
        docs/search-attributes.md): str, int, float, bool, datetime (UTC)
        or a tuple of keywords.
    """

    id: str
    workflow: str
    version: str = "1"
    namespace: str = DEFAULT_NAMESPACE
    status: RunStatus = "pending"
    input: str = "[]"
    output: str | None = None
    error: ErrorInfo | None = None
    tags: tuple[str, ...] = ()
    parent_id: str | None = None
    parent_seq: int | None = None
    lease_owner: str | None = None
    lease_expiry: float | None = None
    wake_at: float | None = None
    compensate: bool = False
    recoveries: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    search_attributes: Mapping[str, SearchValue] = attrs.field(factory=dict, hash=False)

    @property
    def done(self) -> bool:
        """Whether the run is in a terminal status."""
        return self.status in TERMINAL_STATUSES


@final
@attrs.define(frozen=True, kw_only=True)
class Checkpoint:
    """One durable operation of a run, recorded under its seq.

    Attributes:
      run_id: The run the operation belongs to.
      seq: Its position in the run's sequence of durable operations. Body
        operations count up from 1; compensations sit at ``-seq`` of the step
        they undo.
      name: The step, workflow or signal name, or ``"sleep"`` for a timer.
      kind: ``local``, ``remote``, ``timer``, ``signal``, ``child``,
        ``webhook`` (its output holds the nonce its token derives from);
        ``decision`` is no longer written (the releases before kept a
        remote workflow's decision in a checkpoint; it is a run record
        now, and the store's migration moves it there).
      status: ``pending``, ``running``, ``completed`` or ``failed``.
      input: The operation's input as JSON text, if any.
      output: Its result as JSON text, once completed. For a child this is the
        completion ``{"ok": true, "value": ...}`` or
        ``{"ok": false, "error": ..., "code": ..., "details": ...}``.
      error: The final error, once failed (an on-error handoff's failure,
        while it is pending). While the operation has a `mark`, the mark as
        an error (its code and message: ``blocked``, ``queued``, ...), as
        the releases before showed it: made from the mark, never set apart
        from it.
      errors: Each failed attempt's error, in order.
      mark: What a pending operation waits for (a `Mark`), if it waits for
        more than its result or its due time; None once settled.
      attempts: How many attempts ran.
      group: The worker group of a remote step.
      child_id: The run id of a child operation.
      compensation: The name of the step that undoes this one, if any.
      parallel_group: The first seq of the fan this operation belongs to.
      parallel_size: How many members that fan has.
      parallel_mode: How that fan joins (``fail_fast``, ``wait_all``,
        ``settled``).
      wake_at: When a timer (or a signal's timeout) is due (durable time).
      enqueued_at: When the operation was recorded.
      started_at: When its last attempt started (a remote step's: when it
        was sent; None while it waits to be sent again). The attempts before
        keep their times on their errors (`ErrorInfo.started_at`). A local
        step recorded before attempts had times holds its first attempt's.
      finished_at: When it settled.
      executions: The execution ids of the dispatches of a remote step (or
        of a remote workflow's decision task) since the checkpoint was
        recorded, oldest first: each dispatch mints one, unique in the
        store, and adds it in the write that claims the dispatch. A
        result settles the checkpoint only if it carries one of them (see
        docs/failure-handling.md#which-result-settles-a-step).
      rerun: Whether a retry of the run deleted what an earlier execution
        of the run recorded at this seq, so that the step runs again here:
        a result that carries no execution id (from a worker older than
        execution ids) cannot tell the two apart, and never settles it.
    """

    run_id: str
    seq: int
    name: str
    kind: CheckpointKind
    status: CheckpointStatus = "pending"
    input: str | None = None
    output: str | None = None
    error: ErrorInfo | None = None
    errors: tuple[ErrorInfo, ...] = ()
    attempts: int = 0
    group: str | None = None
    child_id: str | None = None
    compensation: str | None = None
    parallel_group: int | None = None
    parallel_size: int | None = None
    parallel_mode: FanMode | None = None
    wake_at: float | None = None
    enqueued_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    executions: tuple[str, ...] = ()
    rerun: bool = False
    mark: Mark | None = None

    def __attrs_post_init__(self) -> None:
        if self.mark is not None and (self.error is None or self.error.sealed is None):
            # A marked operation shows its mark as its error (but one a codec
            # sealed in a release before, which the codec store reads the
            # mark from).
            object.__setattr__(self, "error", self.mark.as_error())


def signal_token(run_id: str, name: str) -> str:
    """The key under which a run's signal ``name`` is buffered and awaited."""
    return json.dumps([run_id, name], separators=(",", ":"))


def signal_token_prefix(run_id: str) -> str:
    """What every `signal_token` of ``run_id`` starts with (and no token of
    another run)."""
    return json.dumps([run_id], separators=(",", ":"))[:-1] + ","


@final
@attrs.define(frozen=True, kw_only=True)
class RunFilter:
    """Which runs a store query matches: every field given must hold.

    Attributes:
      statuses: The run's status is one of these.
      workflow: The run's workflow name.
      namespace: The run's namespace.
      tags: The run has every one of these tags (sorted, no repeats).
      created_after: ``created_at >= created_after``.
      created_before: ``created_at < created_before``.
      parent_id: The run's parent.
      search: Conditions on the run's search attributes, all of which hold.
      top_level: The run has no parent: it is neither a child run (nor a
        fan member) nor an on-error handler's run, which all record the
        run that started them as their parent. A run that continued as new
        keeps its first generation's parent, so a top-level chain stays one.
      id_prefix: The run's id starts with this (compared character by
        character, case-sensitive).
    """

    statuses: frozenset[RunStatus] | None = None
    workflow: str | None = None
    namespace: str | None = None
    tags: tuple[str, ...] = ()
    created_after: float | None = None
    created_before: float | None = None
    parent_id: str | None = None
    search: tuple[SearchCondition, ...] = ()
    top_level: bool = False
    id_prefix: str | None = None

    def matches(self, run: Run) -> bool:
        """Whether ``run`` passes the filter (for stores that test in Python)."""
        return (
            (self.statuses is None or run.status in self.statuses)
            and (self.workflow is None or run.workflow == self.workflow)
            and (self.namespace is None or run.namespace == self.namespace)
            and (self.parent_id is None or run.parent_id == self.parent_id)
            and (not self.top_level or run.parent_id is None)
            and (self.id_prefix is None or run.id.startswith(self.id_prefix))
            and (self.created_after is None or run.created_at >= self.created_after)
            and (self.created_before is None or run.created_at < self.created_before)
            and all(tag in run.tags for tag in self.tags)
            and search_matches(self.search, run.search_attributes)
        )


@final
@attrs.define(frozen=True, kw_only=True)
class FanCounts:
    """The members of one fan of a run in one checkpoint status, summed up
    (one row of `Store.fan_counts`).

    Attributes:
      fan: The fan's first seq (its members' ``parallel_group``).
      status: The checkpoint status counted.
      count: How many members have it.
      size: The fan's size (its members' ``parallel_size``).
      first_seq: The lowest seq among them.
      last_seq: The highest seq among them.
      attempts: Their attempts, summed.
      first_enqueued_at: The earliest ``enqueued_at`` among them.
      last_finished_at: The latest ``finished_at`` among them.
      kind: Their kind (a fan's members share one).
      name: Their name (a fan's members share one).
    """

    fan: int
    status: CheckpointStatus
    count: int
    size: int
    first_seq: int
    last_seq: int
    attempts: int
    first_enqueued_at: float | None
    last_finished_at: float | None
    kind: CheckpointKind
    name: str


@final
@attrs.define(frozen=True, kw_only=True)
class RunStamp:
    """What changes whenever a run or one of its checkpoints changes, read
    without a payload (one row of `Store.run_stamp`): the console's ETags.

    Attributes:
      run_id: The run.
      namespace: Its namespace.
      status: Its status.
      updated_at: When its row last changed.
      lease_owner: The engine holding its lease, if any.
      lease_expiry: When that lease lapses.
      wake_at: When it is due to resume.
      recoveries: How often it was taken over.
      checkpoints: How many checkpoints it has.
      pending: How many of them are ``pending``.
      running: How many are ``running``.
      completed: How many are ``completed``.
      failed: How many are ``failed``.
      attempts: Their attempts, summed.
      seq_sum: Their seqs, summed (a checkpoint replaced by another).
      last_enqueued_at: The latest ``enqueued_at`` among them.
      last_started_at: The latest ``started_at``.
      last_finished_at: The latest ``finished_at``.
    """

    run_id: str
    namespace: str
    status: RunStatus
    updated_at: float
    lease_owner: str | None = None
    lease_expiry: float | None = None
    wake_at: float | None = None
    recoveries: int = 0
    checkpoints: int = 0
    pending: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    attempts: int = 0
    seq_sum: int = 0
    last_enqueued_at: float | None = None
    last_started_at: float | None = None
    last_finished_at: float | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class QueueDepth:
    """How full one flow-control queue is, fleet-wide (one row of
    `Store.queue_depths`).

    Attributes:
      queue: The queue's name.
      admitted: Steps holding one of its slots.
      waiting: Steps waiting in its line (one whose run ended meanwhile
        is counted until a release drops it from the line).
    """

    queue: str
    admitted: int
    waiting: int


@final
@attrs.define(frozen=True, kw_only=True)
class Webhook:
    """A one-time callback of a run (`Context.webhook`), as the store keeps
    it: under the SHA-256 of its token, never the token itself.

    Attributes:
      token_hash: The token's SHA-256, in hex.
      run_id: The run it delivers to.
      name: The signal name its payload is delivered as.
      created_at: When the run created it.
      used_at: When it was delivered, or None while it is unused.
    """

    token_hash: str
    run_id: str
    name: str
    created_at: float
    used_at: float | None = None


@final
@attrs.define(frozen=True, kw_only=True)
class Breakpoint:
    """Runs of ``workflow`` pause before each step named ``step`` that has
    no recorded result, until someone continues them or skips the step
    (see docs/webhooks-and-breakpoints.md).

    Attributes:
      id: The breakpoint's id.
      workflow: The workflow's name.
      step: The step's name.
      created_at: When it was set (durable time).
    """

    id: str
    workflow: str
    step: str
    created_at: float


@final
@attrs.define(frozen=True, kw_only=True)
class PausedStep:
    """A run paused at a breakpoint, before the step at ``seq``.

    Attributes:
      run_id: The paused run.
      seq: The seq of the step it has not run yet.
      workflow: The run's workflow.
      step: The step's name.
      breakpoint_id: The breakpoint that paused it.
      paused_at: When it paused (durable time).
    """

    run_id: str
    seq: int
    workflow: str
    step: str
    breakpoint_id: str
    paused_at: float


@final
@attrs.define(frozen=True, kw_only=True)
class StoredValue:
    """A keyed value the store keeps apart from the runs' rows (schedules,
    admission queues, entities' state, claims, windows, ...), written with
    `PutValue` and read with `Store.get_value` and `Store.list_values`.
    Pruning runs deletes the values that go with them (``run_id``) and no
    other.

    Attributes:
      scope: The family of values it belongs to (``"schedule"``,
        ``"entity:cart"``, ...).
      key: Its key within the scope.
      value: JSON text.
      version: 1 when inserted, one more on every write since: a writer that
        read version n writes only if it is still n (``expect_version``).
      updated_at: When it was last written (durable time).
      run_id: The run it goes with (deleted when that run is pruned), or
        None.
    """

    scope: str
    key: str
    value: str
    version: int
    updated_at: float
    run_id: str | None = None
