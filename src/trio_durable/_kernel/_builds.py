"""Builds: which deploy of the workers a run's tasks go to.

Every worker announces a build id (`WorkerDescriptor.build_id`; by default
its app's registration hash) and, besides each of its group routes'
queues, consumes the same queues of its build (`build_queue`):
``payments+B`` next to ``payments``. A run that keeps a `BUILD` record
(the deployments feature writes one when its workflow has a current
build) sends its remote steps' and its decisions' tasks to its build's
queues only, so no worker of another build takes them; a run without one
sends them to the plain queues, which every worker consumes.

Before sending to a build's queue, a turn asks whether a live worker of
that build serves the route (`build_gap`); if none does, the step (or the
decision task, whose record is parked likewise) is parked as ``blocked``
with the reason, as a step whose capabilities no live worker offers is,
and looked at again after ``blocked_recheck``. A query of the run goes to
its build's queue too, and fails at once while the gap lasts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from .._base._exceptions import UsageError
from .._base._run_records import RunRecord, value_record
from .._brokers._base import WorkerDescriptor, is_broker_safe

BUILD: Final = "build"
"""The kind of the run record that holds the build a run's tasks go to."""

BUILD_SEPARATOR: Final = "+"
"""What joins a group route and a build id in a build's queue name."""


def check_build_id(build_id: object, what: str = "build_id") -> str:
    """``build_id`` if it is a usable build id: a broker-safe token (it is
    part of queue names).

    Raises:
      UsageError: It is not.
    """
    if not isinstance(build_id, str) or not is_broker_safe(build_id):
        raise UsageError(
            f"{what} must be a broker-safe token (letters, digits, '_', '.', '-', at most"
            f" 100 characters, not starting with '.' or '-'), not {build_id!r}"
        )
    return build_id


def build_queue(route: str, build: str | None) -> str:
    """The queue of ``route`` that only workers of ``build`` consume (the
    route itself for no build)."""
    return route if build is None else f"{route}{BUILD_SEPARATOR}{build}"


@final
@attrs.define(frozen=True, kw_only=True)
class Placement:
    """What a run's `BUILD` record holds.

    Attributes:
      build: The build its tasks go to.
      versioning: How it follows its workflow's builds (``pinned`` or
        ``auto_upgrade``), as it was when the run was first given a
        build: it keeps it until it ends.
      listed: Whether it is listed among its build's open runs. A run's
        end takes it off the list and clears this, so that a run made
        active again (a retry) is listed again at its next turn.
    """

    build: str
    versioning: str
    listed: bool = True


def placement(records: Mapping[str, RunRecord]) -> Placement | None:
    """The run's placement on a build, from its records; None: it has none
    (any worker takes its tasks)."""
    record = records.get(BUILD)
    if record is None or record.output is None:
        return None
    data = json.loads(record.output)
    build = data.get("build")
    if not isinstance(build, str):
        return None
    return Placement(
        build=build,
        versioning=str(data.get("versioning", "auto_upgrade")),
        listed=data.get("listed", True) is not False,
    )


def run_build(records: Mapping[str, RunRecord]) -> str | None:
    """The build a run's tasks go to, from its records; None: any worker."""
    placed = placement(records)
    return None if placed is None else placed.build


def build_record(run_id: str, placed: Placement, now: float) -> RunRecord:
    """The record that sends a run's tasks to ``placed.build``'s workers."""
    data: dict[str, object] = {"build": placed.build, "versioning": placed.versioning}
    if not placed.listed:
        data["listed"] = False
    return value_record(run_id, BUILD, json.dumps(data, sort_keys=True), now)


def build_gap(descriptors: Sequence[WorkerDescriptor], route: str, build: str | None) -> str | None:
    """Why no live worker of ``build`` serves ``route``, given the live
    workers of the route, or None if one does (or there is no build)."""
    if build is None or any(d.build_id == build for d in descriptors):
        return None
    return f"blocked: no live worker of build {build!r} serves group {route!r}"
