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
that build serves the route (`build_gap`); if none does, the step is
parked as ``blocked`` with the reason, as a step whose capabilities no
live worker offers is, and looked at again after ``blocked_recheck``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

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


def run_build(records: Mapping[str, RunRecord]) -> str | None:
    """The build a run's tasks go to, from its records; None: any worker."""
    record = records.get(BUILD)
    if record is None or record.output is None:
        return None
    build = json.loads(record.output).get("build")
    return build if isinstance(build, str) else None


def build_record(run_id: str, build: str, versioning: str, now: float) -> RunRecord:
    """The record that sends a run's tasks to ``build``'s workers."""
    text = json.dumps({"build": build, "versioning": versioning}, sort_keys=True)
    return value_record(run_id, BUILD, text, now)


def build_gap(descriptors: Sequence[WorkerDescriptor], route: str, build: str | None) -> str | None:
    """Why no live worker of ``build`` serves ``route``, given the live
    workers of the route, or None if one does (or there is no build)."""
    if build is None or any(d.build_id == build for d in descriptors):
        return None
    return f"blocked: no live worker of build {build!r} serves group {route!r}"
