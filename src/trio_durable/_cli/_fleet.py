"""``trio-durable workers``: the live fleet as its announcements tell it.

Reads the workers' announcements from the broker and aggregates them as
`Engine.fleet` does (`aggregate`): the live workers with their heartbeat
age and load, each group route's workers, tasks in flight, completed per
minute and the broker's backlog, their deploys, where they disagree. On
top of that it lists two kinds of gaps:

- capability gaps: a remote step that requires capabilities no live worker
  of its group route offers (the engine parks such a step as ``blocked``);
- unserved on-error routes: a route whose handler workflow no live worker
  knows, nor the App given with ``--app`` (as `Engine.unserved_on_error_routes`
  reports them for an engine's own App).
"""

from __future__ import annotations

from typing import Any

import click
import trio

from .._brokers import open_broker
from .._brokers._base import WorkerDescriptor
from .._features.deployments._deployments import current_builds
from .._front._app import App
from .._front._fleet_report import (
    FleetReport,
    fleet_report,
)
from ._apps import load_app
from ._common import (
    broker_option,
    json_option,
    need_broker,
    print_json,
    print_tables,
    shown,
    table,
    wide_option,
)
from ._runs import opened_client

# -- output --------------------------------------------------------------------


def report_json(report: FleetReport, broker_url: str) -> dict[str, Any]:
    """The JSON document of ``trio-durable workers --json``."""
    return {"broker": shown(broker_url), **report.to_json()}


def _announced(worker: WorkerDescriptor, now: float) -> str:
    # The time itself is in --json (announced_at); people read the age. A
    # held announcement (no heartbeat) is as old as the worker's last
    # change, and says so: its age is no sign of a dead worker.
    age = f"{max(0.0, now - worker.announced_at):.1f} s ago"
    return f"{age}, held" if worker.held else age


def _deploy(worker: WorkerDescriptor) -> str:
    # The registration hash, and the build where it is named otherwise
    # (--build-id).
    deploy = worker.registration_hash[:12]
    build = worker.build_id
    return deploy if build in ("", worker.registration_hash) else f"{deploy} (build {build})"


def _shown(value: float | None, form: str = "{}") -> str:
    # "-": not reported (a held announcement, an older worker, a broker
    # that cannot count its backlog).
    return "-" if value is None else form.format(value)


def _groups_table(report: FleetReport) -> Any:
    return table(
        "Groups",
        ["group", "live workers", "in flight", "completed/min", "backlog"],
        [
            [
                g.route,
                len(g.workers),
                _shown(g.in_flight),
                _shown(g.completed_per_minute, "{:.1f}"),
                _shown(g.backlog),
            ]
            for g in report.groups
        ],
        no_wrap=["group", "live workers", "in flight", "completed/min", "backlog"],
    )


def print_report(report: FleetReport, broker_url: str) -> None:
    """``report`` as tables for people."""
    fleet = report.fleet
    if not fleet.workers:
        sections: list[Any] = [f"No live worker announces itself on {shown(broker_url)}."]
        if report.groups:
            sections.append(_groups_table(report))
        print_tables(*sections)
        return
    sections = [
        table(
            f"Live workers on {shown(broker_url)}",
            [
                "worker",
                "app",
                "groups",
                "capabilities",
                "deploy",
                "heartbeat",
                "in flight",
                "completed/min",
                "runtime",
            ],
            [
                [
                    d.instance_id,
                    f"{d.app} {d.app_version}",
                    d.groups,
                    d.capabilities,
                    _deploy(d),
                    _announced(d, report.now),
                    _shown(None if d.load is None else d.load.in_flight),
                    _shown(None if d.load is None else d.load.completed_per_minute, "{:.1f}"),
                    f"python {d.runtime.get('python', '?')}, trio {d.runtime.get('trio', '?')}",
                ]
                for d in fleet.workers
            ],
            no_wrap=["heartbeat", "in flight", "completed/min"],
        ),
        _groups_table(report),
    ]
    if len(fleet.deploys) > 1:
        sections.append(
            table(
                "Deploys (a rollout is in progress)",
                ["registration hash", "workers"],
                [[h[:12], who] for h, who in fleet.deploys.items()],
            )
        )
    sections.append(
        table(
            "Disagreements",
            ["kind", "subject", "value", "workers"],
            [
                [d.kind, d.subject, v, who]
                for d in fleet.disagreements
                for v, who in d.values.items()
            ],
        )
        if fleet.disagreements
        else "No disagreements."
    )
    sections.append(
        table(
            "Capability gaps (these steps wait as blocked)",
            ["route", "step", "requires", "offered by the route's live workers"],
            [[g.route, g.step, g.requires, g.offered] for g in report.capability_gaps],
        )
        if report.capability_gaps
        else "No capability gaps."
    )
    sections.append(
        table(
            "Unserved on-error routes (their failures go unhandled)",
            ["workflow", "code", "handler", "declared by"],
            [[u.workflow, u.code or "*", u.handler, u.declared_by] for u in report.unserved],
        )
        if report.unserved
        else "No unserved on-error routes."
    )
    print_tables(*sections)


@click.command("workers", short_help="Show the live workers, their disagreements and gaps.")
@broker_option("The broker's URL (required).")
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help="Also check this App's steps and on-error routes against the fleet.",
)
@click.option(
    "--listen",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds to gather announcements before reporting.",
)
@click.option(
    "--store",
    metavar="URL",
    help="Compare new builds with each workflow's current build in this store (breaking"
    " changes); without it, a change counts that breaks both ways.",
)
@wide_option
@json_option
def workers_command(
    broker: str | None, app_spec: str | None, listen: float, store: str | None, as_json: bool
) -> None:
    """Show the live workers, where they disagree, and what nothing serves.

    A broker that keeps no store of announcements (RabbitMQ) learns them as
    they arrive: when it connects, it asks every live worker to announce
    itself again, and the answers come within a round trip. --listen is how
    long to gather them.
    """
    broker = need_broker(broker)
    app = None if app_spec is None else load_app(app_spec)
    report = trio.run(_read_report, broker, app, listen, store)
    if as_json:
        print_json(report_json(report, broker))
    else:
        print_report(report, broker)


async def _read_report(
    broker_url: str, app: App | None, listen: float, store: str | None = None
) -> FleetReport:
    current = None
    if store is not None:
        async with opened_client(store) as client:
            current = await current_builds(client.store)
    async with open_broker(broker_url) as broker:
        await trio.sleep(listen)
        return await fleet_report(broker, app, current)
