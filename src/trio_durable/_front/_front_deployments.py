"""The deployment methods `Engine` and `Client` share: setting a
workflow's current build (`_deployments`), and the view of the builds
(`DeploymentReport`) that ``trio-durable deployments list`` prints and the
console shows."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, final

import attrs

from .._brokers._base import Broker, BrokerError, WorkerDescriptor
from .._features.deployments._deployments import (
    Deployment,
    list_deployments,
    open_runs,
    set_current,
)
from .._kernel._views import plain
from .._stores._base import Store
from ._front_core import FrontPart

logger: Final = logging.getLogger("trio_durable")


@final
@attrs.define(frozen=True, kw_only=True)
class BuildStatus:
    """One build as `DeploymentReport` shows it.

    Attributes:
      build: The build id.
      workers: The live workers announcing it, by instance id.
      pinned_runs: Its open runs of ``pinned`` workflows.
      upgrading_runs: Its open runs of ``auto_upgrade`` workflows (they
        move to their workflow's current build at their next turn).
      current_for: The workflows it is the current build of.
      ramping_for: The workflows it is ramped for, with the share of new
        runs (percent) it takes.
    """

    build: str
    workers: tuple[str, ...] = ()
    pinned_runs: int = 0
    upgrading_runs: int = 0
    current_for: tuple[str, ...] = ()
    ramping_for: dict[str, float] = attrs.field(factory=dict)

    @property
    def drained(self) -> bool:
        """Whether no open run is on it any more: its workers may stop."""
        return self.pinned_runs == 0 and self.upgrading_runs == 0


@final
@attrs.define(frozen=True, kw_only=True)
class DeploymentReport:
    """Every workflow's deployment, and every build that has live workers,
    open runs or a workflow that names it.

    Attributes:
      deployments: Each workflow's deployment, by workflow.
      builds: Each build, by id.
    """

    deployments: tuple[Deployment, ...]
    builds: tuple[BuildStatus, ...]

    def to_json(self) -> dict[str, Any]:
        """As plain JSON values (``deployments list --json``, the console's
        ``GET /api/deployments``)."""
        return {
            "deployments": [plain(d) for d in self.deployments],
            "builds": [{**plain(b), "drained": b.drained} for b in self.builds],
        }


async def live_workers_of(broker: Broker | None, build: str) -> int | None:
    """How many live workers announce ``build``; None if that is not
    known (no broker, or its announcements cannot be read)."""
    if broker is None:
        return None
    try:
        descriptors = await broker.worker_descriptors()
    except BrokerError:
        return None
    return sum(1 for d in descriptors if d.build_id == build)


def build_of(descriptor: WorkerDescriptor) -> str:
    """The build a worker announces (its registration hash, for a worker
    older than build ids)."""
    return descriptor.build_id or descriptor.registration_hash


async def deployment_report(store: Store, broker: Broker | None) -> DeploymentReport:
    """Read the deployments and open runs from ``store``, and the live
    workers from ``broker`` (none without one).

    Raises:
      BrokerError: The announcements cannot be read.
    """
    deployments = await list_deployments(store)
    runs = await open_runs(store)
    workers: dict[str, list[str]] = {}
    for d in [] if broker is None else await broker.worker_descriptors():
        workers.setdefault(build_of(d), []).append(d.instance_id)
    names = set(workers) | set(runs)
    for deployment in deployments:
        names.update(b for b in (deployment.current, deployment.ramping) if b is not None)
    builds = []
    for name in sorted(names):
        counts = runs.get(name, {})
        builds.append(
            BuildStatus(
                build=name,
                workers=tuple(sorted(workers.get(name, ()))),
                pinned_runs=counts.get("pinned", 0),
                upgrading_runs=counts.get("auto_upgrade", 0),
                current_for=tuple(d.workflow for d in deployments if d.current == name),
                ramping_for={d.workflow: d.ramp for d in deployments if d.ramping == name},
            )
        )
    return DeploymentReport(deployments=tuple(deployments), builds=tuple(builds))


class DeploymentActions(FrontPart):
    """Deployments, for a front end (docs/deployments.md)."""

    async def set_current_build(
        self, workflow: str, build: str, *, ramp: float | None = None
    ) -> Deployment:
        """Make ``build`` the current build of ``workflow``: its new runs
        go to that build's workers, and runs of it declared
        ``versioning="auto_upgrade"`` move there at their next turn. With
        ``ramp`` (a percentage), ``build`` takes only that share of new
        runs instead (those whose `ramp_share` is below it), and the
        current build keeps the rest.

        A build no live worker announces is taken (its workers may start
        next), with a warning logged: the runs given it wait, blocked,
        until one does.

        Raises:
          DeploymentError: ``workflow`` is neither the app's nor announced
            by a live worker, ``build`` is not a broker-safe token, or
            ``ramp`` is not above 0 and at most 100; nothing is stored.
        """
        core = self._core
        core.check_open()
        known = await self._known_workflows()
        try:
            found = await set_current(
                core.store, core.clock.now(), core.origin, workflow, build, ramp, known
            )
        finally:
            # Even if the write raised: it may have been applied, and this
            # front end's own watch skips the announcement it carried.
            core.waker.changed("builds")
        if await live_workers_of(core.broker, build) == 0:
            # Allowed (the workers may start next), but a misspelt build
            # would strand every new run: say so.
            logger.warning(
                "no live worker announces build %r: runs of %r given it wait, blocked,"
                " until one does",
                build,
                workflow,
            )
        return found

    async def deployments(self) -> DeploymentReport:
        """Every workflow's deployment, and per build its live workers and
        open runs (a build with none left is drained).

        Raises:
          BrokerError: The workers' announcements cannot be read.
        """
        self._core.check_open()
        return await deployment_report(self._core.store, self._core.broker)

    async def _known_workflows(self) -> Sequence[str]:
        core = self._core
        known = {wf.name for wf in core.app.workflows} if core.app is not None else set()
        if core.broker is not None:
            try:
                for d in await core.broker.worker_descriptors():
                    known.update(d.workflows)
            except BrokerError:
                pass  # what the app knows, then
        return sorted(known)
