"""The fleet as its announcements tell it, with its gaps: what
``trio-durable workers`` prints and the console's ``GET /api/fleet`` answers.

On top of `aggregate` (the live workers, their deploys, where they
disagree) it lists two kinds of gaps:

- capability gaps: a remote step that requires capabilities no live worker
  of its group route offers (the engine parks such a step as ``blocked``);
- unserved on-error routes: a route whose handler workflow no live worker
  knows, nor the given App (as `Engine.unserved_on_error_routes` reports
  them for an engine's own App).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from .._base._clock import Clock
from .._brokers._base import Broker, WorkerDescriptor
from .._features.on_error._handoff import unserved_on_error_routes
from .._kernel._dispatch import split_group_route
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
class FleetReport:
    """What ``trio-durable workers`` shows.

    Attributes:
      fleet: The aggregated announcements.
      capability_gaps: Steps no live worker of their route can run.
      unserved: On-error routes whose handler nothing known runs.
      now: Durable time when it was read (for the announcements' ages).
    """

    fleet: Fleet
    capability_gaps: tuple[CapabilityGap, ...]
    unserved: tuple[UnservedHandler, ...]
    now: float

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values: what ``trio-durable workers
        --json`` prints and ``GET /api/fleet`` answers."""
        fleet = self.fleet
        document: dict[str, Any] = plain(
            {
                "workers": fleet.workers,
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


async def fleet_report(broker: Broker, app: Registry | None = None) -> FleetReport:
    """Read the live announcements from ``broker`` and report on them.

    Raises:
      BrokerError: The announcements cannot be read.
    """
    fleet = aggregate(await broker.worker_descriptors())
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
    )
