"""Where a remote step's attempt is out: the broker that carries an engine's
tasks, and the marks a pending checkpoint carries about it.

A remote step's checkpoint (and a remote workflow's decision record: both
are an `Attempt`) is ``pending`` from the turn that records it until its
result settles it. While
its attempt is out (``started_at`` set), its ``mark`` is `OUT`,
whose details name the broker it went out on (its URL without a password),
whether that broker is durable (`Broker.durable`) and, for one that is not,
which broker object of which process holds it (``holder``). A broker that
keeps nothing across its own process (the embedded ``memory://`` broker)
loses every task it held when its process ends, or when it is dropped: an
engine that meets such an attempt, held by a broker that is not its own,
sends it again as a new attempt (see `_remote`). A broker is gone once no
engine of its process sends on it (in this process), once its process
ended (another process of this host), or if it is on another host, which
cannot be asked. Since an engine in another process cannot tell that the
last engine of a live process on such a broker closed, that engine says
so as it closes: the attempts still out on the broker then carry a mark
without ``holder`` (``closed`` names it instead), which every engine takes
for gone (see `_stranded.leave_nothing_stranded`).

A send the broker refused leaves the mark `BROKER_WAIT` instead, with
``started_at`` cleared and ``wake_at`` the time of the next try (see
`_dispatch`).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import socket
import weakref
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, final

import attrs
import trio

from .._base._records import Checkpoint, CheckpointStatus, ErrorInfo, Mark
from .._base._run_records import RunRecord
from .._base._urls import mask_url

if TYPE_CHECKING:
    from .._brokers._base import Broker
    from ._runtime import Runtime


class Attempt(Protocol):
    """What is sent as attempts, each a task to a worker, and waits for
    their result: a remote step's checkpoint, or a remote workflow's
    decision record."""

    @property
    def run_id(self) -> str: ...
    @property
    def status(self) -> CheckpointStatus: ...
    @property
    def attempts(self) -> int: ...
    @property
    def error(self) -> ErrorInfo | None: ...
    @property
    def errors(self) -> tuple[ErrorInfo, ...]: ...
    @property
    def mark(self) -> Mark | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def wake_at(self) -> float | None: ...
    @property
    def executions(self) -> tuple[str, ...]: ...


AttemptT = TypeVar("AttemptT", Checkpoint, RunRecord)
"""An `Attempt` of either kind, kept as what it is."""

OUT: Final = "out"
"""The mark (its code) of a pending remote step whose attempt is out."""

BROKER_WAIT: Final = "broker_unavailable"
"""The mark (its code) of a pending remote step whose send the broker
refused: it is sent again when its ``wake_at`` comes."""

BLOCKED: Final = "blocked"
"""The mark of a remote step, or a decision record, that no live worker can
take (none of its group offers what the step requires, or none is of its
run's build: see `_builds`): not sent, it is looked at again after
``blocked_recheck``."""

RESEND: Final = "resend"
"""The mark of a step to send again as a new attempt: its run was cancelled
while an attempt was out (its result was dropped), then retried, or it was
retried while suspended (see `resend_on_retry`)."""

REDISPATCHED: Final = "redispatched"
"""The error code, among a step's ``errors``, of an attempt sent again
because it counted as lost (``remote_redispatch``)."""


CONTINUED: Final = "continued"
"""The mark of a paused step told to run (`continue_step`)."""

LOST_WITH_BROKER: Final = "lost_with_broker"
"""The error code, among a step's ``errors``, of an attempt sent again
because the broker that held it keeps nothing across its process and is
not the sending engine's own."""

_names: Final[weakref.WeakKeyDictionary[Any, str]] = weakref.WeakKeyDictionary()
"""The holder names of the non-durable brokers of this process, by broker
object: engines of one process sharing a broker share its name."""
_counter: Final = itertools.count(1)
_open: Final[Counter[str]] = Counter()
"""How many engines of this process have each holder name open now."""
_used: Final[set[str]] = set()
"""The holder names of this process that some attempt was sent on (marked
`OUT`): only those can leave attempts out when their last engine closes."""


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, from Linux's
    ``/proc``), or None where that cannot be read. A zombie (killed, not
    yet reaped) counts as gone: "Z"."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return "Z" if fields[0] == "Z" else fields[19]


def _process_alive(pid: int, start: str) -> bool:
    """Whether the process ``pid`` that started at ``start`` still runs
    (on this host): a pid taken again by a newer process is not it."""
    found = _process_start(pid)
    if found is not None:
        return found == start
    # No /proc to ask: whether some process has that id, at least.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder_name(broker: Broker) -> str:
    """The name of a non-durable broker object of this process, unique
    across processes and restarts: ``<host>/<pid>/<process start>/<n>``
    (a restarted container may reuse a process id, never with the same
    start time)."""
    try:
        name = _names.get(broker)
    except TypeError:  # not weakly referable: named anew by each engine
        name = None
    if name is None:
        pid = os.getpid()
        name = f"{socket.gethostname()}/{pid}/{_own_start(pid)}/{next(_counter)}"
        with contextlib.suppress(TypeError):
            _names[broker] = name
    return name


def holder_alive(name: str) -> bool:
    """Whether the broker named ``name`` may still hold what it accepted:
    in this process, while an engine that sends on it is open; in another
    process of this host, while that process runs. One on another host
    cannot be asked, and counts as gone (a memory broker serves one
    process: a fleet of several processes needs a durable broker)."""
    host, _, rest = name.partition("/")
    pid_text, _, rest = rest.partition("/")
    start, _, _ = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid() and start == _own_start(pid):
        return _open[name] > 0
    return _process_alive(pid, start)


@functools.cache
def _own_start(pid: int) -> str:
    """When this process started (by its id: a forked child asks anew)."""
    return _process_start(pid) or ""


@final
@attrs.define(frozen=True, kw_only=True)
class Carrier:
    """The broker an engine sends its tasks on, as its marks name it.

    Attributes:
      broker: The broker's URL without a password (or its type's name,
        for a broker object given without a URL).
      durable: Whether it keeps what it accepted across its own process.
      holder: For a broker that is not durable, the name of this broker
        object in this process (None for a durable one).
    """

    broker: str
    durable: bool
    holder: str | None = None
    # Whether other holders were alive, when last asked (Trio time).
    _seen: dict[str, tuple[float, bool]] = attrs.field(factory=dict, init=False, eq=False)
    # The mark of every attempt sent on it: one object, not one per step.
    _mark: Mark = attrs.field(init=False, eq=False)

    def __attrs_post_init__(self) -> None:
        details: dict[str, Any] = {"broker": self.broker, "durable": self.durable}
        if self.holder is not None:
            details["holder"] = self.holder
        object.__setattr__(
            self, "_mark", Mark(code=OUT, message=f"out on {self.broker}", details=details)
        )

    @classmethod
    def of(cls, broker: Broker, url: str | None) -> Carrier:
        """The carrier of ``broker`` (opened from ``url``, if given)."""
        durable = bool(getattr(broker, "durable", True))
        if url is not None:
            shown = mask_url(url)
        elif type(broker).__name__ == "MemoryBroker":
            shown = "memory://"
        else:
            shown = type(broker).__name__
        return cls(broker=shown, durable=durable, holder=None if durable else _holder_name(broker))

    @contextlib.contextmanager
    def open(self) -> Iterator[Holding]:
        """While the block lasts (or until `Holding.release`), this
        process sends on the broker: what it holds counts as held (see
        `holder_alive`)."""
        holding = Holding(self.holder)
        try:
            yield holding
        finally:
            holding.release()

    def mark(self) -> Mark:
        """The mark of an attempt this engine sends now (shared: never
        change its details)."""
        if self.holder is not None:
            _used.add(self.holder)
        return self._mark

    def holds(self, cp: Attempt) -> bool:
        """Whether ``cp``'s attempt is out on this very broker object (of
        this process), as its mark says."""
        out = out_on(cp)
        return self.holder is not None and out is not None and out.get("holder") == self.holder

    def closed_mark(self) -> Mark:
        """The mark of an attempt out on this broker once the last engine
        of this process that sent on it closed: without ``holder``, so
        every engine counts it gone (see `lost`); ``closed`` names it."""
        return Mark(
            message=f"out on {self.broker}, closed since",
            code=OUT,
            details={"broker": self.broker, "durable": False, "closed": self.holder},
        )

    def lost(self, cp: Attempt) -> bool:
        """Whether ``cp``'s attempt is out on a broker that is not durable,
        not this engine's own, and gone (see `holder_alive`): it went with
        that broker's process, or the last engine of that process that
        sent on it closed (`closed_mark`), unless an engine of this process
        sends on that very broker again (it still holds the task)."""
        out = out_on(cp)
        if out is None or out.get("durable", True) is not False:
            return False
        holder = out.get("holder")
        if not isinstance(holder, str):
            closed = out.get("closed")
            return not (isinstance(closed, str) and (closed == self.holder or _open[closed] > 0))
        if holder == self.holder or _open[holder] > 0:
            return False
        # Another process asked once a second at most: a turn of a wide fan
        # asks per member.
        now = trio.current_time()
        seen = self._seen.get(holder)
        if seen is None or now - seen[0] >= 1.0:
            seen = self._seen[holder] = (now, holder_alive(holder))
        return not seen[1]

    def waiting(self, reason: str) -> Mark:
        """The mark of a send this broker refused, for ``reason``."""
        return Mark(
            message=f"waiting for the broker ({self.broker}): {reason}",
            code=BROKER_WAIT,
            details={"broker": self.broker},
        )


@final
class Holding:
    """One engine's use of a broker that is not durable, made by
    `Carrier.open`: while held, what the broker holds counts as held in
    this process."""

    def __init__(self, holder: str | None) -> None:
        self._holder = holder
        if holder is not None:
            _open[holder] += 1

    def release(self) -> bool:
        """Stop using the broker (once; later calls do nothing). True if
        this was the last engine of this process on it and an attempt was
        sent on it: what is still out on it went with it."""
        holder, self._holder = self._holder, None
        if holder is None:
            return False
        _open[holder] -= 1
        if _open[holder]:
            return False
        del _open[holder]
        if holder not in _used:
            return False
        _used.discard(holder)
        return True


def out_on(cp: Attempt) -> dict[str, Any] | None:
    """The details of ``cp``'s mark `OUT` (``broker``, ``durable``,
    ``holder``) if its attempt is out and marked so, else None (a step
    sent by an engine that did not mark it: its broker is not known)."""
    if cp.status != "pending" or cp.started_at is None or cp.mark is None:
        return None
    if cp.mark.code != OUT or not isinstance(cp.mark.details, dict):
        return None
    return cp.mark.details


def sent_now(
    cp: AttemptT,
    now: float,
    carrier: Carrier,
    redispatch: tuple[float, int] | None,
    execution: str,
) -> AttemptT:
    """``cp`` with its attempt out from ``now`` on ``carrier`` as the
    dispatch ``execution`` (a new execution id, see `_executions`), added
    to its ``executions``: marked `OUT`, due (with ``remote_redispatch``)
    when it counts as lost."""
    return attrs.evolve(
        cp,
        started_at=now,
        wake_at=None if redispatch is None else now + redispatch[0],
        mark=carrier.mark(),
        executions=(*cp.executions, execution),
    )


def out_verdict(rt: Runtime, cp: Attempt, now: float) -> ErrorInfo | float | None:
    """What becomes of an attempt that is out (a step's, or a remote
    workflow's decision task): why to send it again now, as the error its
    ``errors`` records, or else when it counts as lost (None: never).

    It is sent again at once if it went out on a broker that is not durable
    and not this engine's own (code `LOST_WITH_BROKER`); else, with this
    engine's ``remote_redispatch``, once its ``seconds`` passed since it was
    sent (code `REDISPATCHED`: the caller counts these against the
    maximum). The engine that sent it may have had other settings: these
    apply to attempts already out too.
    """
    assert cp.started_at is not None
    if rt.dispatcher.carrier.lost(cp):
        broker = (out_on(cp) or {}).get("broker", "a broker")
        return ErrorInfo(
            message=f"attempt {cp.attempts} went out on {broker}, which kept nothing"
            " across its process; sent again",
            code=LOST_WITH_BROKER,
            # The attempt's times, as this engine knows them: sent, given up.
            started_at=cp.started_at,
            finished_at=now,
        )
    policy = rt.options.remote_redispatch
    if policy is None:
        return None
    deadline = cp.started_at + policy[0]
    if deadline > now:
        return deadline
    return ErrorInfo(
        message=f"no result within {policy[0]} s; dispatched again",
        code=REDISPATCHED,
        started_at=cp.started_at,
        finished_at=now,
    )
