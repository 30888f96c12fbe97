"""How a front end wakes the runs its writes give something to do.

`Engine` and `Client` write alike (`_control`, `_fork`, `_schedules`,
...); they differ only in who then runs the run. A `Waker` says that:
`SchedulerWaker`, an engine's, runs in its own scheduler the runs its app
serves and announces the rest, for an engine that has their workflow;
`AnnouncingWaker`, a client's, runs nothing and announces every run, so
that an engine sharing the store takes it at once (see docs/client.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, Protocol, final

from ._wakes import announce, serves

if TYPE_CHECKING:
    from .._base._records import Run
    from .._stores._base import Store
    from .._stores._ops import Op
    from ._runtime import Runtime


class Waker(Protocol):
    """What a front end does around a write that gives runs something to do."""

    def wake_ops(self, runs: Sequence[Run]) -> list[Op]:
        """What to write with a batch that gives ``runs`` something to do."""
        ...

    def cancel_ops(self, runs: Sequence[Run]) -> list[Op]:
        """What to write with a batch that cancels ``runs``."""
        ...

    def woke(self, run: Run) -> None:
        """``run`` has something to do (its batch committed)."""
        ...

    def started(self, run: Run) -> None:
        """``run`` was created by this front end (its batch committed)."""
        ...

    def cancelled(self, run: Run) -> None:
        """``run`` was cancelled (its batch committed)."""
        ...

    def changed(self, what: Literal["breakpoints", "schedules", "builds"]) -> None:
        """This front end set or cleared a breakpoint, or changed a schedule
        or a deployment."""
        ...

    def unended(self, run_id: str, namespace: str | None) -> bool:
        """Whether ``run_id`` certainly exists (in ``namespace``) and has
        not ended, so that waiting for its end needs no first read."""
        ...


@final
class SchedulerWaker:
    """An engine's `Waker`: a run its app serves is woken (or interrupted)
    in its scheduler; one it does not serve is announced, for an engine
    that has its workflow."""

    __slots__ = ("_rt",)

    def __init__(self, runtime: Runtime) -> None:
        self._rt = runtime

    def _serves(self, run: Run) -> bool:
        return serves(self._rt.app, run.workflow, run.version)

    def wake_ops(self, runs: Sequence[Run]) -> list[Op]:
        """Announce, with a write that wakes them, the runs this engine
        cannot run (its app lacks their workflow): an engine that has it
        takes them at once."""
        others = [run for run in runs if not self._serves(run)]
        return announce(self._rt.store, self._rt.engine_id, "wake", others)

    def cancel_ops(self, runs: Sequence[Run]) -> list[Op]:
        # A run this engine cannot run is announced, for an engine that
        # can; one it can run, it cancels itself (a turn in flight on
        # another engine then sees the cancel when it writes).
        others = [run for run in runs if not self._serves(run)]
        return announce(self._rt.store, self._rt.engine_id, "cancel", others)

    def woke(self, run: Run) -> None:
        if self._serves(run):
            self._rt.scheduler.wake(run.id)

    def started(self, run: Run) -> None:
        self._rt.telemetry.emit_run("run.started", run)
        self.woke(run)

    def cancelled(self, run: Run) -> None:
        if self._serves(run):
            self._rt.scheduler.interrupt(run.id)
            self._rt.scheduler.wake(run.id)

    def changed(self, what: Literal["breakpoints", "schedules", "builds"]) -> None:
        self._rt.features.announced(what, None)

    def unended(self, run_id: str, namespace: str | None) -> bool:
        # A run just started here, its first turn not begun, needs no read
        # before its result is waited for (a start then a result, the
        # commonest pair of calls, reads nothing).
        rt = self._rt
        run = rt.scheduler.untouched(run_id)
        return (
            run is not None
            and run.lease_owner == rt.engine_id
            and run.lease_expiry is not None
            and run.lease_expiry > rt.clock.now()
            and namespace in (None, run.namespace)
        )


@final
class AnnouncingWaker:
    """A client's `Waker`: it runs nothing, and announces every run its
    writes wake or cancel, for an engine to take at once."""

    __slots__ = ("_origin", "_store")

    def __init__(self, store: Store, origin: str) -> None:
        self._store = store
        self._origin = origin

    def wake_ops(self, runs: Sequence[Run]) -> list[Op]:
        """Announce, with a write that wakes them, runs for an engine to
        take at once."""
        return announce(self._store, self._origin, "wake", runs)

    def cancel_ops(self, runs: Sequence[Run]) -> list[Op]:
        return announce(self._store, self._origin, "cancel", runs)

    def woke(self, run: Run) -> None:
        pass

    def started(self, run: Run) -> None:
        pass

    def cancelled(self, run: Run) -> None:
        pass

    def changed(self, what: Literal["breakpoints", "schedules", "builds"]) -> None:
        pass

    def unended(self, run_id: str, namespace: str | None) -> bool:
        return False
