"""What a worker announces of itself (its descriptor), and the group routes
it may serve."""

from __future__ import annotations

import platform
import sys
from collections.abc import Sequence
from typing import Any

import trio

from ._app import App
from ._brokers._base import WorkerDescriptor, is_broker_safe
from ._dispatch import split_group_route
from ._exceptions import UsageError


def check_group_routes(app: App, routes: Sequence[str], what: str) -> tuple[str, ...]:
    """Validate group routes to serve against the app's remote steps.

    Raises:
      UsageError: A route is malformed or names a group no step of the app has.
    """
    if isinstance(routes, str):
        raise UsageError(f"{what} must be a list of group names, not the string {routes!r}")
    known = set(app.groups) | {wf.decision_group for wf in app.workflows}
    checked: list[str] = []
    for route in routes:
        if not isinstance(route, str):
            raise UsageError(f"{what} entries must be strings, not {route!r}")
        group, namespace = split_group_route(route)
        if not is_broker_safe(group) or (namespace is not None and not is_broker_safe(namespace)):
            raise UsageError(f"{what} entry {route!r} is not a broker-safe group[@namespace]")
        if group not in known:
            raise UsageError(
                f"{what} names the group {group!r}, which no step of app {app.name!r} has "
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


def describe(
    app: App, instance_id: str, routes: Sequence[str], capabilities: Sequence[str], at: float
) -> WorkerDescriptor:
    """The descriptor a worker announces for ``app``."""
    workflows: dict[str, dict[str, Any]] = {}
    for wf in app.workflows:
        entry = workflows.setdefault(wf.name, {"versions": [], "on_error": []})
        entry["versions"].append(wf.version)
        for on_error in wf.on_error:
            if on_error.to_json() not in entry["on_error"]:
                entry["on_error"].append(on_error.to_json())
    for entry in workflows.values():
        entry["on_error"].sort(key=lambda r: (r["code"] or "", r["workflow"]))
    groups = {split_group_route(route)[0] for route in routes}
    return WorkerDescriptor(
        instance_id=instance_id,
        app=app.name,
        app_version=app.version,
        runtime=runtime_info(),
        groups=tuple(routes),
        steps={
            s.name: {"group": s.group, "requires": list(s.requires)}
            for s in app.steps
            if s.group in groups
        },
        workflows=workflows,
        capabilities=tuple(sorted(set(capabilities))),
        registration_hash=app.registration_hash(),
        announced_at=at,
    )
