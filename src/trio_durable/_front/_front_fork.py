"""`ForksRuns`: the `fork` that `Engine` and `Client` share; how a fork is
made is `_fork`'s, and how it is woken the front end's `Waker`'s."""

from __future__ import annotations

from typing import Any

from .._features.fork._fork import fork_run
from ._front_core import FrontPart
from ._handle import RunHandle


class ForksRuns(FrontPart):
    """`fork`, shared by `Engine` and `Client`."""

    async def fork(
        self,
        run_id: str,
        *,
        from_seq: int,
        new_run_id: str | None = None,
        namespace: str | None = None,
    ) -> RunHandle[Any]:
        """Start a new run that reuses ``run_id``'s recorded results before
        ``from_seq`` and executes from there (see docs/fork-and-retry.md).

        The fork runs the same workflow and version, in the same namespace,
        with the same input and tags (on-error tags aside). Its replay
        returns what the original recorded at each seq before ``from_seq``
        (a recorded failure raises again), but for steps whose undo ran,
        which run again; from ``from_seq`` on, it runs anew: steps run
        again, timers sleep their whole duration from the fork's turn,
        signal waits wait for new signals (sent to the fork), children start
        as new runs under the fork's ids. Children started before
        ``from_seq`` stay the original's: the fork reads their recorded
        outcome and never cancels them. The original run, whatever its
        status (it may still be running), is not written; the fork records
        where it came from (`forked_from`).

        Args:
          run_id: The run to fork.
          from_seq: The first seq to execute anew, from 1 (everything) to one
            past the run's last body seq (nothing: the fork replays the
            whole recorded history, then goes on).
          new_run_id: The fork's id; derived if not given
            (``<run_id>.fork.<n>``, the first ``n`` not taken).
          namespace: If given, a run of another namespace counts as missing.

        Returns:
          A `RunHandle` of the fork, created ``pending``: an engine serving
          its workflow runs it at once.

        Raises:
          RunNotFoundError: No run has this id (in ``namespace``).
          ForkPointError: ``from_seq`` is out of range, inside a fan, or
            after an operation that has not settled; nothing is written.
          RunConflictError: ``new_run_id`` belongs to a run already; nothing
            is written.
          UsageError: ``new_run_id`` or ``namespace`` is malformed.
        """
        core = self._core
        core.check_open()
        fork = await fork_run(
            core.store,
            core.app,
            core.clock.now(),
            run_id,
            from_seq,
            new_run_id,
            namespace,
            core.origin,
            core.waker.wake_ops,
        )
        core.waker.started(fork)
        return RunHandle.of(fork, self)
