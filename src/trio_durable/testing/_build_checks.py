"""The invariant of deployments: no run's work runs on a build it is not
allowed on.

`BuildWatch` sees what the fleet publishes (through the simulation's
broker): each task an engine sends, on the queue its run's build picked
(``work+B``, or the plain ``work`` for a run on no build), and each result
a worker sends back, which names the worker, whose build the harness
knows. From these alone, after the fleet drained, `build_violations`
checks every remote step and every decision (a remote workflow's body,
run on a worker) that a worker ran and answered:

- it was sent to a queue of one build and ran on a worker of another;
- its run is ``auto_upgrade`` and it was sent to, or ran on, a build that
  no deployment of its workflow the workload had set by then gives the
  run (`Deployment.build_for`), or to no build while one did: a turn
  gives the run the build its engine reads, which may lag a change;
- its run is ``pinned`` and it was sent to, or ran on, a build other than
  the one its run started on (its first task's, given at its first turn),
  or that build is not one the deployments set by then give the run.

And a pinned run's ``build`` record must name the build it started on.

Runs the workload started before their workflow had a deployment are
left out: they may have sent work to any worker before it got one. So
are queries: the simulation's engines hold every body, and answer them
themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from .._base._policies import Versioning
from .._features.deployments._deployments import Deployment, versioning_of
from .._kernel._builds import BUILD_SEPARATOR, run_build
from .._kernel._definitions import Registry
from .._stores._base import Store
from .._wire._messages import Result, Task

_REQUIRES: Final = "~"
"""What starts the capabilities' part of a broker queue's name."""


def queue_build(queue: str) -> str | None:
    """The build whose workers consume ``queue`` (None: any worker), the
    inverse of `broker_queue`'s naming: ``route[+build][~caps]``."""
    return queue.split(_REQUIRES, 1)[0].partition(BUILD_SEPARATOR)[2] or None


@final
@attrs.define(frozen=True, kw_only=True)
class _Sent:
    at: float
    build: str | None


@final
@attrs.define(frozen=True, kw_only=True)
class _Ran:
    run_id: str
    workflow: str
    seq: int
    kind: str
    execution: str | None
    worker: str


_Key = tuple[str, int, str | None]


@final
class BuildWatch:
    """What the fleet's messages say of builds: each task sent and the
    build of its queue, each result and the worker that ran its task.

    Attributes:
      worker_builds: Each worker's build, by instance id.
    """

    def __init__(self, trace: list[str]) -> None:
        self._trace = trace
        self.worker_builds: dict[str, str] = {}
        self._sent: dict[_Key, list[_Sent]] = {}
        self._ran: list[_Ran] = []
        # The build of each run's first task: the build it started on.
        self.first_builds: dict[str, str | None] = {}

    def task_sent(self, task: Task, queue: str, at: float) -> None:
        """An engine sent ``task`` on ``queue``."""
        if task.kind == "query":
            return
        build = queue_build(queue)
        key = (task.run_id, task.seq, task.execution)
        self._sent.setdefault(key, []).append(_Sent(at=at, build=build))
        self.first_builds.setdefault(task.run_id, build)
        self._trace.append(
            f"{at:.6f} task {task.run_id} {task.seq} {task.kind} to build {build or '-'}"
        )

    def result_sent(self, result: Result, at: float) -> None:
        """A worker sent ``result`` back: it ran the task."""
        if result.kind == "query":
            return
        self._ran.append(
            _Ran(
                run_id=result.run_id,
                workflow=result.workflow,
                seq=result.seq,
                kind=result.kind,
                execution=result.execution,
                worker=result.worker,
            )
        )
        build = self.worker_builds.get(result.worker, "?")
        self._trace.append(
            f"{at:.6f} ran {result.run_id} {result.seq} {result.kind}"
            f" on {result.worker} of build {build}"
        )

    def sends(self, ran: _Ran) -> Sequence[_Sent]:
        return self._sent.get((ran.run_id, ran.seq, ran.execution), ())

    @property
    def ran(self) -> Sequence[_Ran]:
        return self._ran


def _allowed(history: Sequence[tuple[float, Deployment]], run_id: str, at: float) -> set[str]:
    """The builds the deployments set by ``at`` give ``run_id``."""
    return {
        build
        for since, deployment in history
        if since <= at and (build := deployment.build_for(run_id)) is not None
    }


async def build_violations(
    store: Store,
    watch: BuildWatch,
    deployments: Mapping[str, Sequence[tuple[float, Deployment]]],
    app: Registry,
    wall_start: float,
) -> list[str]:
    """Where a worker ran a run's step or decision on a build the run was
    not allowed on (see the module's docstring).

    Args:
      store: The simulation's store, read as the engines read it.
      watch: What the fleet published.
      deployments: Each deployment the workload set, by workflow, with the
        virtual time it began setting it.
      app: The app, which says how each workflow's runs follow builds.
      wall_start: The durable time at virtual time 0.
    """
    violations: list[str] = []
    judged: dict[str, tuple[Versioning, str | None, Sequence[tuple[float, Deployment]]]] = {}
    for run_id in sorted({ran.run_id for ran in watch.ran if ran.workflow in deployments}):
        run = await store.get_run(run_id)
        history = () if run is None else deployments.get(run.workflow, ())
        if run is None or not history or run.created_at - wall_start < history[0][0]:
            continue
        versioning = versioning_of(app, run.workflow, run.version)
        started_on = watch.first_builds.get(run_id)
        judged[run_id] = (versioning, started_on, history)
        build = run_build({r.kind: r for r in await store.get_records(run_id)})
        if versioning == "pinned" and build != started_on:
            violations.append(
                f"the pinned run {run_id} started on build {started_on or '-'}"
                f" and is on build {build or '-'}"
            )
    for ran in watch.ran:
        sends = watch.sends(ran)
        what = f"the {ran.kind} {ran.run_id}@{ran.seq}"
        worker_build = watch.worker_builds.get(ran.worker)
        if not sends or worker_build is None:
            continue  # a task the watch did not see go out
        sent_to = sorted({s.build or "-" for s in sends})
        if "-" not in sent_to and worker_build not in sent_to:
            violations.append(
                f"{what}, sent to build {'/'.join(sent_to)}, ran on {ran.worker}"
                f" of build {worker_build}"
            )
        if ran.run_id not in judged:
            continue
        versioning, started_on, history = judged[ran.run_id]
        anywhere: set[str] = set()
        for sent in sends:
            allowed = _allowed(history, ran.run_id, sent.at)
            if versioning == "pinned":
                allowed &= set() if started_on is None else {started_on}
            anywhere |= allowed
            if sent.build not in allowed:
                violations.append(
                    f"{what} ({versioning}, allowed on {_names(allowed)}) was sent at"
                    f" {sent.at:.6f} to build {sent.build or '-'}"
                    f" and ran on {ran.worker} of build {worker_build}"
                )
        if worker_build not in anywhere:
            violations.append(
                f"{what} ({versioning}, allowed on {_names(anywhere)}) ran on {ran.worker}"
                f" of build {worker_build}"
            )
    return sorted(set(violations))


def _names(builds: set[str]) -> str:
    return "/".join(sorted(builds)) or "none"
