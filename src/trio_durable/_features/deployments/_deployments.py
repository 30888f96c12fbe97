"""Deployments: which build of the workers each run of a workflow goes to.

A workflow's `Deployment` (a keyed value of scope `DEPLOYMENTS`, one per
workflow) names its current build and, while one is ramped, the build that
takes a share of new runs. A run is given its build at its first turn
(`Deployment.build_for`: the ramped build for a new run whose `ramp_share`
is below the ramp, else the current one) and keeps it in a `BUILD` record
(a `Placement`), which sends its remote steps, decisions and queries to
that build's workers only (see `_builds`). A run of a ``pinned`` workflow
keeps that build until it ends; one of an ``auto_upgrade`` workflow is
given its workflow's build again at each turn, so it moves when the
current build changes (a ramp never moves a run in flight). A run keeps
the versioning it was first placed with. A workflow with no deployment
runs as before: its runs keep no build, and any worker takes their tasks.

Each run on a build is listed under it (a keyed value of scope
`BUILD_RUNS`, key ``<build>/<run id>``, pruned with the run), so that
`open_runs` counts them without a scan of runs: a build with no open run
left is drained. A run's end deletes its listing and marks its placement
unlisted, so the next turn of a run made active again (a retry, a retry
from a seq, a fork of a pinned run, which carries the placement) lists
it again.

Engines keep the deployments in memory (`Deployments`): read at the first
turn that needs them, again after an announcement (kind ``builds``) says
they changed or the watch may have missed one, never once per turn.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from ..._base._exceptions import UsageError
from ..._base._policies import Versioning
from ..._base._records import ErrorInfo, Run, RunStatus, StoredValue
from ..._brokers._base import WorkerDescriptor
from ..._kernel._builds import Placement, build_record, check_build_id, placement
from ..._kernel._definitions import Registry, Workflow, remote_body
from ..._kernel._hooks import Feature
from ..._stores._base import RunWatch, offers
from ..._stores._ops import Announce, Op, PutValue
from ..._stores._record_ops import PutRecord

if TYPE_CHECKING:
    from ..._kernel._runtime import Runtime
    from ..._kernel._turn import Turn
    from ..._stores._base import Store

DEPLOYMENTS: Final = "deployments"
"""The scope of the workflows' deployments (key: the workflow's name)."""

BUILD_RUNS: Final = "build-runs"
"""The scope of the open runs on each build (key: ``<build>/<run id>``)."""

_UNWATCHED_REFRESH: Final = 5.0
"""Seconds an engine keeps the deployments it read from a store that
announces nothing (not a `RunWatch`) before reading them again."""

_PAGE: Final = 1000


@final
class DeploymentError(UsageError):
    """A deployment change was refused: the workflow is unknown (neither
    the app nor a live worker has it), the build id is not a broker-safe
    token, or the ramp is not a share of new runs above 0 and at most 100
    percent. Raised before anything is stored; not raised for a build no
    live worker announces yet (runs pinned to it wait, blocked)."""


@final
@attrs.define(frozen=True, kw_only=True)
class Deployment:
    """Which build a workflow's new runs go to.

    Attributes:
      workflow: The workflow's name.
      current: The build its new runs go to (None: any worker, until one
        is set), but the share that ``ramping`` takes.
      ramping: The build being ramped up, or None.
      ramp: The percentage of new runs that go to ``ramping`` (above 0, at
        most 100); 0 when nothing is ramped.
      updated_at: When it was last set (durable time).
    """

    workflow: str
    current: str | None
    ramping: str | None = None
    ramp: float = 0.0
    updated_at: float = 0.0

    def build_for(self, run_id: str, on: str | None = None) -> str | None:
        """The build run ``run_id`` goes to, given the build it is ``on``
        (None: it is given its first). A new run goes to ``ramping`` if
        its `ramp_share` is below ``ramp``; a run on the ramped build stays
        there while it is ramped, whatever the ramp becomes; every other
        goes to ``current``. So a ramp only ever takes new runs, and a
        change of it moves no run in flight, either way."""
        if self.ramping is not None and (
            on == self.ramping or (on is None and ramp_share(self.workflow, run_id) < self.ramp)
        ):
            return self.ramping
        return self.current

    def dump(self) -> str:
        return json.dumps(attrs.asdict(self), sort_keys=True)


def ramp_share(workflow: str, run_id: str) -> float:
    """Where a run falls in ``[0, 100)``: the first 8 bytes of the SHA-256
    of ``workflow``, a newline and ``run_id``, as a share of 2**64. Runs
    below a ramp go to the ramped build; a run's share never changes, so
    its build does not flip between turns, and neither does the share of
    many runs stray far from the ramp."""
    digest = hashlib.sha256(f"{workflow}\n{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") * 100.0 / 2.0**64


def read_deployment(stored: StoredValue | None) -> Deployment | None:
    """The deployment a stored value holds, or None."""
    if stored is None or stored.value is None:
        return None
    data: dict[str, Any] = json.loads(stored.value)
    return Deployment(**data)


def check_ramp(ramp: object) -> float | None:
    """``ramp`` as a float, or None for none.

    Raises:
      DeploymentError: It is not a number above 0 and at most 100.
    """
    if ramp is None:
        return None
    if (
        isinstance(ramp, bool)
        or not isinstance(ramp, int | float)
        or not math.isfinite(ramp)
        or not 0 < ramp <= 100
    ):
        raise DeploymentError(
            f"ramp must be a percentage of new runs above 0 and at most 100, not {ramp!r}"
        )
    return float(ramp)


def versioning_of(app: Registry, workflow: str, version: str) -> Versioning:
    """How runs of ``workflow`` follow its builds, as ``app`` declares it
    (``auto_upgrade`` for a workflow it lacks)."""
    declared = _declared(app, workflow, version)
    return "auto_upgrade" if declared is None else declared.versioning


def _declared(app: Registry, workflow: str, version: str) -> Workflow[..., Any] | None:
    if app.has_workflow(workflow, version):
        return app.get_workflow(workflow, version)
    for wf in app.workflows:
        if wf.name == workflow:
            return wf
    return None


def announced_versioning(
    descriptors: Sequence[WorkerDescriptor], workflow: str
) -> Versioning | None:
    """``pinned`` if a live worker announces ``workflow`` pinned, else None."""
    for descriptor in descriptors:
        entry = descriptor.workflows.get(workflow)
        if isinstance(entry, dict) and entry.get("versioning") == "pinned":
            return "pinned"
    return None


async def set_current(
    store: Store,
    now: float,
    origin: str,
    workflow: str,
    build: str,
    ramp: object,
    known: Sequence[str],
) -> Deployment:
    """Make ``build`` the current build of ``workflow`` (or, with ``ramp``,
    the build that takes that share of its new runs, the current one
    staying), and announce the change to the engines.

    Raises:
      DeploymentError: ``workflow`` is not in ``known``, ``build`` is not a
        usable build id, or ``ramp`` is out of range; nothing is written.
    """
    if not isinstance(workflow, str) or workflow not in known:
        raise DeploymentError(
            f"unknown workflow {workflow!r}: neither the app nor a live worker has it"
            f" (known: {', '.join(sorted(known)) or 'none'})"
        )
    try:
        check_build_id(build, "build")
    except UsageError as exc:
        raise DeploymentError(str(exc)) from None
    share = check_ramp(ramp)
    before = read_deployment(await store.get_value(DEPLOYMENTS, workflow))
    if share is None:
        deployment = Deployment(workflow=workflow, current=build, updated_at=now)
    else:
        current = None if before is None else before.current
        deployment = Deployment(
            workflow=workflow, current=current, ramping=build, ramp=share, updated_at=now
        )
    ops: list[Op] = [PutValue(DEPLOYMENTS, workflow, deployment.dump(), now)]
    if offers(store, RunWatch):
        ops.append(Announce(run_id=workflow, kind="builds", origin=origin))
    await store.apply(ops)
    return deployment


async def list_deployments(store: Store) -> list[Deployment]:
    """Every workflow's deployment, by workflow."""
    found: list[Deployment] = []
    after: str | None = None
    while True:
        page = await store.list_values(DEPLOYMENTS, after=after, limit=_PAGE)
        found.extend(d for d in map(read_deployment, page) if d is not None)
        if len(page) < _PAGE:
            return found
        after = page[-1].key


async def current_builds(store: Store) -> dict[str, str]:
    """Each workflow's current build, where it has one."""
    return {d.workflow: d.current for d in await list_deployments(store) if d.current is not None}


async def open_runs(store: Store) -> dict[str, dict[str, int]]:
    """For each build with open runs, how many of them per versioning
    (``pinned``, ``auto_upgrade``)."""
    counts: dict[str, dict[str, int]] = {}
    after: str | None = None
    while True:
        page = await store.list_values(BUILD_RUNS, after=after, limit=_PAGE)
        for stored in page:
            if stored.value is None:
                continue
            build = stored.key.partition("/")[0]
            versioning = json.loads(stored.value).get("versioning", "auto_upgrade")
            per = counts.setdefault(build, {})
            per[versioning] = per.get(versioning, 0) + 1
        if len(page) < _PAGE:
            return counts
        after = page[-1].key


@final
class Deployments(Feature):
    """An engine's copy of the store's deployments, and the hooks that give
    runs their builds."""

    def __init__(self) -> None:
        self._by_workflow: dict[str, Deployment] = {}
        self._stale = True
        self._read_at = 0.0
        self._lock = trio.Lock()

    def announced(self, kind: str, run_id: str | None) -> None:
        if kind == "builds":
            self._stale = True

    def missed(self) -> None:
        self._stale = True

    async def of(self, store: Store, workflow: str) -> Deployment | None:
        """``workflow``'s deployment, from memory unless it changed since
        it was read."""
        if not offers(store, RunWatch) and (
            trio.current_time() - self._read_at > _UNWATCHED_REFRESH
        ):
            self._stale = True
        if self._stale:
            async with self._lock:
                if self._stale:
                    # Cleared before reading: a change announced during the
                    # read makes the next turn read again.
                    self._stale = False
                    try:
                        found = await list_deployments(store)
                    except BaseException:
                        self._stale = True
                        raise
                    self._by_workflow = {d.workflow: d for d in found}
                    self._read_at = trio.current_time()
        elif self._lock.locked():
            async with self._lock:
                pass
        return self._by_workflow.get(workflow)

    async def take_turn(self, turn: Turn, now: float) -> bool:
        rt, state = turn.runtime, turn.state
        run = state.run
        placed = placement(state.records)
        had = None if placed is None else placed.build
        if placed is not None and placed.versioning == "pinned":
            build: str | None = had
            versioning = placed.versioning
        else:
            # A run keeps the versioning it was first given a build with.
            versioning = await self._versioning(rt, run) if placed is None else placed.versioning
            deployment = await self.of(rt.store, run.workflow)
            build = None if deployment is None else deployment.build_for(run.id, had)
        if build is None:
            # No deployment (left): it stays where it is, if anywhere.
            build = had
        if build is None or (build == had and placed is not None and placed.listed):
            return False
        # Given a build, moved to another, or made active again after its
        # end (a retry): on the list of its build's open runs again.
        state.put_record(build_record(run.id, Placement(build=build, versioning=versioning), now))
        listed = json.dumps({"workflow": run.workflow, "versioning": versioning})
        if had is not None and had != build:
            state.ops.append(PutValue(BUILD_RUNS, f"{had}/{run.id}", None, now))
        state.ops.append(PutValue(BUILD_RUNS, f"{build}/{run.id}", listed, now, run_id=run.id))
        return False

    async def _versioning(self, rt: Runtime, run: Run) -> Versioning:
        """How a run that has no build yet follows its workflow's builds:
        as the app declares it, if the app holds the body; else ``pinned``
        if the app or a live worker (which holds the body) says so."""
        declared = _declared(rt.app, run.workflow, run.version)
        if declared is not None and (
            declared.fn is not remote_body or declared.versioning == "pinned"
        ):
            return declared.versioning
        announced = announced_versioning(await rt.catalogue.descriptors(), run.workflow)
        return announced or "auto_upgrade"

    def end_ops(
        self,
        turn: Turn,
        status: RunStatus,
        output: str | None,
        error: ErrorInfo | None,
        returned_by: tuple[str, str] | None,
    ) -> Sequence[Op]:
        state = turn.state
        placed = placement(state.records)
        if placed is None or not placed.listed:
            return ()
        now = turn.runtime.clock.now()
        # Off the list, and marked so: a retry lists it again.
        unlisted = attrs.evolve(placed, listed=False)
        return (
            PutValue(BUILD_RUNS, f"{placed.build}/{state.run.id}", None, now),
            PutRecord(build_record(state.run.id, unlisted, now)),
        )
