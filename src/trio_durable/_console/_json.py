"""The JSON the API answers: runs, timelines, fans, lineage, the fleet.

Times are seconds since the epoch (floats), statuses strings, errors the
objects `ErrorInfo.to_json` makes. Every link to another run or page is an
id beside the API path that reads it (under the path the app is mounted at).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from .._base._on_error import lineage, parent_of
from .._base._records import Run
from .._base._search_values import plain_value
from .._front._fleet_report import FleetReport
from .._kernel._views import (
    FanPage,
    FanStats,
    HistoryEntry,
    RetriedHistory,
    RunDetail,
    RunHistory,
    RunPage,
)
from .._kernel._views import plain as views_plain
from .._payloads._stored_payloads import payload_for_people, sealed_for_people

_HANDLER_ID: Final = re.compile(r"\.onError\.\d+$")
"""How the id of an on-error handler run ends (see `parent_of`)."""


def plain(value: Any) -> Any:
    """``value`` as plain JSON values, errors as their JSON objects
    (encrypted ones shown as such: see `shown_error`)."""
    return views_plain(value, compact_errors=True)


class Paths:
    """The API's paths, under the path the app is mounted at."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def run(self, run_id: str) -> str:
        return f"{self.root}/api/runs/{quote(run_id, safe='')}"

    def history(self, run_id: str) -> str:
        return f"{self.run(run_id)}/history"

    def fan(self, run_id: str, fan: int) -> str:
        return f"{self.run(run_id)}/fans/{fan}"

    def link(self, run_id: str | None) -> dict[str, str] | None:
        """A link to a run: its id and its API path."""
        return None if run_id is None else {"id": run_id, "href": self.run(run_id)}


def _payload(text: str | None) -> Any:
    # A payload this console cannot read is shown as what its mark says.
    return payload_for_people(text)


def run_json(run: Run, paths: Paths, *, payloads: bool = False) -> dict[str, Any]:
    """A run; with ``payloads``, its input and output as JSON values."""
    data: dict[str, Any] = {
        "id": run.id,
        "href": paths.run(run.id),
        "workflow": run.workflow,
        "version": run.version,
        "namespace": run.namespace,
        "status": run.status,
        "error": plain(run.error),
        "tags": list(run.tags),
        "parent_id": run.parent_id,
        "parent_seq": run.parent_seq,
        "lease_owner": run.lease_owner,
        "lease_expiry": run.lease_expiry,
        "wake_at": run.wake_at,
        "compensate": run.compensate,
        "recoveries": run.recoveries,
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "search_attributes": {
            name: plain_value(value) for name, value in run.search_attributes.items()
        },
    }
    if payloads:
        data["input"] = _payload(run.input)
        data["output"] = _payload(run.output)
    return data


def run_page_json(page: RunPage, handled: Mapping[str, str], paths: Paths) -> dict[str, Any]:
    """``GET /api/runs``; ``handled`` maps each run handed to an on-error
    handler to that handler's run (its status is the handler's outcome)."""
    return {
        "runs": [run_json(run, paths) | {"handled_by": handled.get(run.id)} for run in page.runs],
        "next_cursor": page.next_cursor,
        "facets": None if page.facets is None else dict(page.facets),
    }


def entry_json(entry: HistoryEntry, paths: Paths) -> dict[str, Any]:
    """One operation of a timeline (``"type": "operation"``)."""
    data: dict[str, Any] = {"type": "operation", **plain(entry)}
    data["child"] = paths.link(entry.child_id)
    return data


def fan_json(fan: FanStats, run_id: str, paths: Paths) -> dict[str, Any]:
    """A fan summed up (``"type": "fan"``), with the path of its pages."""
    data: dict[str, Any] = {"type": "fan", **plain(fan)}
    data["counts"] = dict(fan.counts)
    data["first_failures"] = [entry_json(e, paths) for e in fan.first_failures]
    data["href"] = paths.fan(run_id, fan.first_seq)
    data["failed_href"] = f"{paths.fan(run_id, fan.first_seq)}?failed=true"
    return data


def retried_json(kept: RetriedHistory, paths: Paths) -> dict[str, Any]:
    """What one retry of a run replaced: the run's status and error then,
    and the operations it deleted or reset as they were; one read without
    its codec as ``{"encrypted_with": "k1"}`` (or ``{"encoded": true}``)."""
    data: dict[str, Any] = plain(kept)
    data["entries"] = [entry_json(entry, paths) for entry in kept.entries]
    sealed = data.pop("sealed")
    if sealed is not None:
        data.update(sealed_for_people(sealed))
    return data


def lineage_json(
    run: Run, children: tuple[str, ...], handlers: tuple[str, ...], paths: Paths
) -> dict[str, Any]:
    """Where a run stands among others: the run that started it, its
    ancestors, its children, the on-error handlers it was handed to, and
    for a handler, the run it handles."""
    handles = parent_of(run.id) if _HANDLER_ID.search(run.id) else None
    return {
        "parent": paths.link(run.parent_id),
        "ancestors": [paths.link(ancestor) for ancestor in lineage(run.id)[1:]],
        "children": [paths.link(child) for child in children],
        "handlers": [paths.link(handler) for handler in handlers],
        "handles": paths.link(handles),
    }


def detail_json(detail: RunDetail, paths: Paths) -> dict[str, Any]:
    """``GET /api/runs/{id}``."""
    run = detail.run
    return {
        "run": run_json(run, paths, payloads=True),
        "timeline": [
            fan_json(item, run.id, paths) if isinstance(item, FanStats) else entry_json(item, paths)
            for item in detail.timeline
        ],
        "fans": [fan_json(fan, run.id, paths) for fan in detail.fans],
        "lineage": lineage_json(run, detail.children, detail.handlers, paths),
        "retried": [retried_json(kept, paths) for kept in detail.retried],
        "waiting": detail.waiting,
        "links": {"history": paths.history(run.id)},
    }


def history_json(history: RunHistory, paths: Paths) -> dict[str, Any]:
    """``GET /api/runs/{id}/history``."""
    run = history.run
    return {
        "run": run_json(run, paths),
        "entries": [entry_json(entry, paths) for entry in history.entries],
        "lineage": lineage_json(run, history.children, history.handlers, paths),
        "retried": [retried_json(kept, paths) for kept in history.retried],
        "waiting": history.waiting,
    }


def fan_page_json(page: FanPage, failed: bool, paths: Paths) -> dict[str, Any]:
    """``GET /api/runs/{id}/fans/{group}``, with the paths of the pages
    before and after it (None at either end)."""
    base = paths.fan(page.run_id, page.fan)
    suffix = "&failed=true" if failed else ""

    def page_at(offset: int) -> str:
        return f"{base}?offset={offset}&limit={page.limit}{suffix}"

    following = page.offset + page.limit
    return {
        "run_id": page.run_id,
        "run": paths.run(page.run_id),
        "fan": page.fan,
        "failed": failed,
        "offset": page.offset,
        "limit": page.limit,
        "total": page.total,
        "members": [entry_json(member, paths) for member in page.members],
        "next": page_at(following) if following < page.total else None,
        "previous": page_at(max(page.offset - page.limit, 0)) if page.offset > 0 else None,
    }


def fleet_json(report: FleetReport) -> dict[str, Any]:
    """``GET /api/fleet``: the report (as ``trio-durable workers --json``
    prints it) with the live workers of each group and when it was read."""
    groups: dict[str, list[str]] = {}
    for worker in report.fleet.workers:
        for route in worker.groups:
            groups.setdefault(route, []).append(worker.instance_id)
    return {
        "groups": dict(sorted(groups.items())),
        **report.to_json(),
        "read_at": report.now,
    }
