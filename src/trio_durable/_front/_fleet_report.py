"""The fleet as its announcements tell it, with its load and its gaps: what
``trio-durable workers`` prints and the console's ``GET /api/fleet`` answers.

On top of `aggregate` (the live workers, their deploys, where they
disagree) it sums each group route's load (`GroupLoad`: its live workers,
their tasks in flight and completed per minute from their heartbeats, and
the broker's backlog of its queues) and lists what breaks or waits:

- breaking changes: among the disagreements, a new build announcing a
  workflow version's or a step's parameters so that inputs recorded under
  the current build no longer bind (see `breaking_changes`);
- capability gaps: a remote step that requires capabilities no live worker
  of its group route offers (the engine parks such a step as ``blocked``);
- unserved on-error routes: a route whose handler workflow no live worker
  knows, nor the given App (as `Engine.unserved_on_error_routes` reports
  them for an engine's own App).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._base._clock import Clock
from .._brokers._base import Broker, WorkerDescriptor, backlog
from .._features.on_error._handoff import unserved_on_error_routes
from .._kernel._dispatch import broker_queue, split_group_route
from .._kernel._fleet import Fleet, aggregate
from .._kernel._views import plain

if TYPE_CHECKING:
    from .._kernel._definitions import Registry

APP_DECLARER = "--app"
"""Who declares an on-error route of the App given (``--app`` on the
command line)."""


@final
@attrs.define(frozen=True, kw_only=True)
class CapabilityGap:
    """A remote step no live worker of its route can run.

    Attributes:
      route: The group route (``group`` or ``group@namespace``).
      step: The step's name.
      requires: The capabilities it requires.
      offered: What the route's live workers offer, all together.
    """

    route: str
    step: str
    requires: tuple[str, ...]
    offered: tuple[str, ...]


@final
@attrs.define(frozen=True, kw_only=True)
class UnservedHandler:
    """An on-error route whose handler workflow nothing known runs.

    Attributes:
      workflow: The workflow declaring the route.
      code: The route's code (None for the catch-all).
      handler: The handler's name.
      declared_by: The live workers announcing the route, and ``--app`` if
        the App given declares it.
    """

    workflow: str
    code: str | None
    handler: str
    declared_by: tuple[str, ...]


@final
@attrs.define(frozen=True, kw_only=True)
class GroupLoad:
    """One group route's load: its live workers, what they reported at
    their last heartbeat, and the broker's backlog.

    Attributes:
      route: The group route (``group`` or ``group@namespace``).
      workers: The live workers serving it, by instance id.
      reporting: Those of them whose announcement carries a load (not
        held, not from a worker older than `WorkerDescriptor.load`).
      in_flight: Tasks in flight on the reporting workers (a worker that
        serves several routes counts toward each); None if none reports.
      completed_per_minute: Their completed tasks per minute, summed (as
        ``in_flight``); None if none reports.
      backlog: Messages waiting on its queues (see `SupportsBacklog`);
        None where the broker cannot tell.
      queues: The broker queues counted: the route's own, and one per
        set of capabilities its steps require.
    """

    route: str
    workers: tuple[str, ...]
    reporting: tuple[str, ...]
    in_flight: int | None
    completed_per_minute: float | None
    backlog: int | None
    queues: tuple[str, ...]


@final
@attrs.define(frozen=True, kw_only=True)
class FleetReport:
    """What ``trio-durable workers`` shows.

    Attributes:
      fleet: The aggregated announcements.
      capability_gaps: Steps no live worker of their route can run.
      unserved: On-error routes whose handler nothing known runs.
      now: Durable time when it was read (for the announcements' ages).
      groups: Each group route's load, by route: those live workers
        serve, and with an App the groups of its remote steps.
    """

    fleet: Fleet
    capability_gaps: tuple[CapabilityGap, ...]
    unserved: tuple[UnservedHandler, ...]
    now: float
    groups: tuple[GroupLoad, ...] = ()

    def heartbeat_age(self, worker: WorkerDescriptor) -> float:
        """Seconds from ``worker``'s last announcement to when the report
        was read (for a held announcement: since it announced what it
        serves, no sign of whether it is alive)."""
        return max(0.0, self.now - worker.announced_at)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values: what ``trio-durable workers
        --json`` prints and ``GET /api/fleet`` answers."""
        fleet = self.fleet
        document: dict[str, Any] = plain(
            {
                "workers": [
                    {**plain(d), "heartbeat_age": self.heartbeat_age(d)} for d in fleet.workers
                ],
                "group_loads": self.groups,
                "workflows": fleet.workflows,
                "steps": fleet.steps,
                "deploys": fleet.deploys,
                "disagreements": [
                    {
                        "kind": d.kind,
                        "subject": d.subject,
                        "values": [
                            {"value": json.loads(value), "workers": list(who)}
                            for value, who in d.values.items()
                        ],
                    }
                    for d in fleet.disagreements
                ],
                "capability_gaps": self.capability_gaps,
                "unserved_on_error_routes": self.unserved,
            }
        )
        return document


def capability_gaps(
    workers: Sequence[WorkerDescriptor], app: Registry | None = None
) -> tuple[CapabilityGap, ...]:
    """The remote steps that require capabilities no live worker of their
    route offers: those the workers announce for each route they serve, and
    with ``app`` its own steps, for each live route of their group (or
    their bare group when no worker serves it)."""
    serving: dict[str, list[WorkerDescriptor]] = {}
    for d in workers:
        for route in d.groups:
            serving.setdefault(route, []).append(d)
    needed: set[tuple[str, str, tuple[str, ...]]] = set()
    for d in workers:
        for route in d.groups:
            group = split_group_route(route)[0]
            for step, info in d.steps.items():
                if info.get("group") == group and info.get("requires"):
                    needed.add((route, step, tuple(sorted(info["requires"]))))
    if app is not None:
        for s in app.steps:
            if s.group is None or not s.requires:
                continue
            routes = [r for r in serving if split_group_route(r)[0] == s.group] or [s.group]
            needed.update((route, s.name, tuple(sorted(s.requires))) for route in routes)
    gaps: list[CapabilityGap] = []
    for route, step, requires in sorted(needed):
        live = serving.get(route, [])
        if any(set(requires) <= set(d.capabilities) for d in live):
            continue
        offered = sorted({c for d in live for c in d.capabilities})
        gaps.append(
            CapabilityGap(route=route, step=step, requires=requires, offered=tuple(offered))
        )
    return tuple(gaps)


def unserved_handlers(fleet: Fleet, app: Registry | None = None) -> tuple[UnservedHandler, ...]:
    """The on-error routes live workers announce whose handler no live
    worker knows (nor ``app``, if given)."""
    known = set(fleet.workflows) | ({wf.name for wf in app.workflows} if app else set())
    declared: dict[tuple[str, str, str], list[str]] = {}
    for d in fleet.workers:
        for workflow, info in d.workflows.items():
            for route in info.get("on_error", []):
                handler = route.get("workflow")
                if handler and handler not in known:
                    key = (workflow, route.get("code") or "", handler)
                    who = declared.setdefault(key, [])
                    if d.instance_id not in who:
                        who.append(d.instance_id)
    return tuple(
        UnservedHandler(workflow=wf, code=code or None, handler=handler, declared_by=tuple(who))
        for (wf, code, handler), who in sorted(declared.items())
    )


def group_queues(
    workers: Sequence[WorkerDescriptor], app: Registry | None = None
) -> dict[str, tuple[str, ...]]:
    """Each group route's broker queues, by route: the routes live workers
    serve (and with ``app`` the groups of its remote steps), each with its
    own queue and one per set of capabilities its steps require (as the
    workers announce them, and ``app``'s)."""
    requires: dict[str, set[tuple[str, ...]]] = {}
    for d in workers:
        for route in d.groups:
            requires.setdefault(route, set())
    if app is not None:
        for step in app.steps:
            if step.group is not None:
                requires.setdefault(step.group, set())
    for route, needed in requires.items():
        group = split_group_route(route)[0]
        for d in workers:
            for info in d.steps.values():
                if info.get("group") == group and info.get("requires"):
                    needed.add(tuple(sorted(info["requires"])))
        for step in app.steps if app is not None else ():
            if step.group == group and step.requires:
                needed.add(tuple(sorted(step.requires)))
    return {
        route: tuple(dict.fromkeys([route, *(broker_queue(route, r) for r in sorted(needed))]))
        for route, needed in sorted(requires.items())
    }


async def group_loads(
    broker: Broker, workers: Sequence[WorkerDescriptor], app: Registry | None = None
) -> tuple[GroupLoad, ...]:
    """Each group route's load (see `GroupLoad`), its queues' backlogs read
    from ``broker`` concurrently.

    Raises:
      BrokerError: A backlog cannot be read.
    """
    queues = group_queues(workers, app)
    counts: dict[str, int | None] = {}

    async def count(queue: str) -> None:
        counts[queue] = await backlog(broker, queue)

    async with trio.open_nursery() as nursery:
        for queue in sorted({q for qs in queues.values() for q in qs}):
            nursery.start_soon(count, queue)
    loads: list[GroupLoad] = []
    for route, its_queues in queues.items():
        serving = [d for d in workers if route in d.groups]
        reporting = [d for d in serving if d.load is not None]
        waiting = [counts[q] for q in its_queues]
        loads.append(
            GroupLoad(
                route=route,
                workers=tuple(d.instance_id for d in serving),
                reporting=tuple(d.instance_id for d in reporting),
                in_flight=sum(d.load.in_flight for d in reporting if d.load) if reporting else None,
                completed_per_minute=sum(d.load.completed_per_minute for d in reporting if d.load)
                if reporting
                else None,
                backlog=None if None in waiting else sum(n for n in waiting if n is not None),
                queues=its_queues,
            )
        )
    return tuple(loads)


async def fleet_report(
    broker: Broker, app: Registry | None = None, current: Mapping[str, str] | None = None
) -> FleetReport:
    """Read the live announcements from ``broker`` and report on them, with
    each group route's load and backlog; ``current``: each workflow's
    current build, where known (for ``breaking`` disagreements: see
    `breaking_changes`).

    Raises:
      BrokerError: The announcements or a backlog cannot be read.
    """
    fleet = aggregate(await broker.worker_descriptors(), current)
    unserved = {(u.workflow, u.code or "", u.handler): u for u in unserved_handlers(fleet, app)}
    if app is not None:
        # The App's own routes, checked as its engine checks them when it opens.
        for route in await unserved_on_error_routes(broker, app):
            key = (route.workflow, route.code or "", route.handler)
            before = unserved.get(key)
            unserved[key] = UnservedHandler(
                workflow=route.workflow,
                code=route.code,
                handler=route.handler,
                declared_by=(*(before.declared_by if before else ()), APP_DECLARER),
            )
    return FleetReport(
        fleet=fleet,
        capability_gaps=capability_gaps(fleet.workers, app),
        unserved=tuple(unserved[key] for key in sorted(unserved)),
        now=Clock().now(),
        groups=await group_loads(broker, fleet.workers, app),
    )
