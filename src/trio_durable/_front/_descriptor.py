"""What a worker announces of itself (its descriptor, with its load at
each heartbeat), and the group routes it may serve."""

from __future__ import annotations

import platform
import sys
from collections import deque
from collections.abc import Sequence
from typing import Any, Final, final

import trio

from .._base._exceptions import UsageError
from .._brokers._base import WorkerDescriptor, WorkerLoad, is_broker_safe
from .._kernel._dispatch import split_group_route
from ._app import App, Step, remote_body
from ._signatures import announced_params

RATE_WINDOW: Final = 60.0
"""Seconds of heartbeats a worker's completed-per-minute rate covers."""


@final
class LoadMeter:
    """A worker's `WorkerLoad` at each heartbeat: its counters, and its
    completed tasks per minute over the last `RATE_WINDOW` seconds, from
    the counts it had at its earlier heartbeats (readers keep no state of
    their own, so the rate travels in the announcement).

    Args:
      opened_at: When the worker opened (durable time), with nothing
        completed yet.
    """

    def __init__(self, opened_at: float) -> None:
        # (when, completed) at each reading, oldest first; the oldest kept
        # is the last one at least RATE_WINDOW seconds old.
        self._samples: deque[tuple[float, int]] = deque([(opened_at, 0)])

    def read(self, now: float, in_flight: int, completed: int, failed: int) -> WorkerLoad:
        """The load to announce at ``now``, remembered for later rates."""
        samples = self._samples
        samples.append((now, completed))
        while len(samples) > 2 and samples[1][0] <= now - RATE_WINDOW:
            samples.popleft()
        since, before = samples[0]
        window = max(now - since, 0.0)
        rate = (completed - before) * 60.0 / window if window > 0 else 0.0
        return WorkerLoad(
            in_flight=in_flight,
            completed=completed,
            failed=failed,
            completed_per_minute=rate,
            window=window,
        )


def check_group_routes(app: App, routes: Sequence[str], what: str) -> tuple[str, ...]:
    """Validate group routes to serve against the app: a group is known if
    a remote step has it or a workflow decides on it (its ``group``, else
    its name, see `Workflow.decision_group`).

    Raises:
      UsageError: A route is malformed or names a group the app does not know.
    """
    if isinstance(routes, str):
        raise UsageError(f"{what} must be a list of group names, not the string {routes!r}")
    known = set(app.groups) | set(app.workflow_groups)
    checked: list[str] = []
    for route in routes:
        if not isinstance(route, str):
            raise UsageError(f"{what} entries must be strings, not {route!r}")
        group, namespace = split_group_route(route)
        if not is_broker_safe(group) or (namespace is not None and not is_broker_safe(namespace)):
            raise UsageError(f"{what} entry {route!r} is not a broker-safe group[@namespace]")
        if group not in known:
            raise UsageError(
                f"{what} names the group {group!r}, which no step or workflow of app"
                f" {app.name!r} has "
                f"(known groups: {', '.join(sorted(known)) or 'none'})"
            )
        if route not in checked:
            checked.append(route)
    return tuple(checked)


def runtime_info() -> dict[str, str]:
    """The versions a worker reports about itself."""
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "trio": trio.__version__,
        "platform": platform.platform(terse=True),
    }


def _route_order(route: dict[str, str | None]) -> tuple[str, str]:
    return route["code"] or "", route["workflow"] or ""


def _step_entry(app: App, step: Step[..., Any]) -> dict[str, Any]:
    """What a worker announces of a remote step it serves: enough for an
    engine without the step's code to retry, time out and queue it."""
    flow = None if step.queue is None else app.get_queue(step.queue)
    return {
        "group": step.group,
        "requires": list(step.requires),
        "retry": {
            "attempts": step.retry.attempts,
            # Floats, as `App.registration_hash` counts them: equal
            # settings announce alike (``backoff=1`` or ``1.0``).
            "backoff": float(step.retry.backoff),
            "max_backoff": float(step.retry.max_backoff),
            "jitter": float(step.retry.jitter),
        },
        "timeout": None if step.timeout is None else float(step.timeout),
        "queue": None
        if flow is None
        else {"name": flow.name, "concurrency": flow.concurrency, "priority": flow.priority},
        "params": [param.to_json() for param in announced_params(step.fn, 0)],
    }


def describe(
    app: App,
    instance_id: str,
    routes: Sequence[str],
    capabilities: Sequence[str],
    at: float,
    *,
    held: bool = False,
    load: WorkerLoad | None = None,
    build_id: str | None = None,
) -> WorkerDescriptor:
    """The descriptor a worker announces for ``app``.

    For each workflow: its ``versions``; ``on_error``, the routes of all its
    versions together; ``routes``, each version's own routes; and ``group``,
    the group whose decision tasks this worker takes for it (the decision
    group of the version registered last), only when the worker serves that
    group; and ``params``, the parameters after the context of the version
    registered last (see `trio_durable._front._signatures`). For each remote step of a group it serves: its ``group``,
    ``requires``, ``retry``, ``timeout`` and ``queue`` (the flow-control
    queue's spec, or None). ``held``: announced until withdrawn, with no
    heartbeat (see `WorkerDescriptor.held`); ``load``: how busy it is.
    """
    groups = {split_group_route(route)[0] for route in routes}
    workflows: dict[str, dict[str, Any]] = {}
    for wf in app.workflows:
        if wf.fn is remote_body:
            # Declared by name (`App.remote_workflow`): other workers run it.
            continue
        entry = workflows.setdefault(wf.name, {"versions": [], "on_error": [], "routes": {}})
        entry["versions"].append(wf.version)
        entry["routes"][wf.version] = sorted(
            (on_error.to_json() for on_error in wf.on_error), key=_route_order
        )
        for on_error in wf.on_error:
            if on_error.to_json() not in entry["on_error"]:
                entry["on_error"].append(on_error.to_json())
        # Registration order: the version registered last says the group,
        # and the parameters (those of the version a run by name runs).
        entry["params"] = [param.to_json() for param in announced_params(wf.fn)]
        if wf.versioning != "auto_upgrade":
            entry["versioning"] = wf.versioning
        else:
            entry.pop("versioning", None)
        if wf.decision_group in groups:
            entry["group"] = wf.decision_group
        else:
            entry.pop("group", None)
    for entry in workflows.values():
        entry["on_error"].sort(key=_route_order)
    registration = app.registration_hash()
    return WorkerDescriptor(
        instance_id=instance_id,
        app=app.name,
        app_version=app.version,
        runtime=runtime_info(),
        groups=tuple(routes),
        steps={s.name: _step_entry(app, s) for s in app.steps if s.group in groups},
        workflows=workflows,
        capabilities=tuple(sorted(set(capabilities))),
        registration_hash=registration,
        announced_at=at,
        held=held,
        load=load,
        build_id=registration if build_id is None else build_id,
    )
