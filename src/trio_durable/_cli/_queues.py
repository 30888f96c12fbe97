"""``trio-durable queues list``: each flow-control queue (`App.queue`), the
steps and runs holding its slots and waiting in its line, fleet-wide, as
the store counts them (`Client.queue_depths`); with ``--app``, each queue's
limit and priority too, and its queues that nothing holds now.

These are the queues of flow control, kept in the store. With
``--broker``, the broker's own backlog per worker group route is listed
too: the messages waiting on the route's queues, not yet delivered (the
routes live workers serve, and with ``--app`` its remote steps' groups).
"""

from __future__ import annotations

from typing import Any

import click
import trio

from .._front._client import Client
from .._front._fleet_report import group_loads
from ._apps import load_app
from ._common import (
    broker_option,
    json_option,
    print_json,
    print_tables,
    store_option,
    table,
    wide_option,
)
from ._runs import app_option, with_client


@click.group("queues", short_help="Flow-control queues: admitted and waiting.")
def queues_group() -> None:
    """The flow-control queues of a store (steps and runs declared with
    queue=, and each entity key's exclusive calls)."""


@queues_group.command("list", short_help="Each queue: its limit, admitted and waiting.")
@store_option()
@app_option("Also show each of this App's queues' limit and priority, held or not.")
@broker_option("Also show the broker's backlog per worker group route.")
@click.option(
    "--listen",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="With --broker, seconds to gather workers' announcements first.",
)
@wide_option
@json_option
def list_command(
    store: str | None, app_spec: str | None, broker: str | None, listen: float, as_json: bool
) -> None:
    """List each flow-control queue by name: how many hold one of its
    slots (admitted) and how many wait in its line, fleet-wide. A queue
    neither held nor waited for is listed only when --app registers it,
    with its limit (concurrency) and priority.

    With --broker, also each worker group route's backlog at the broker:
    messages waiting on its queues, not yet delivered to a worker ("-"
    where the broker cannot count them), for the routes live workers serve
    (a broker that keeps no store of announcements, RabbitMQ, learns them
    within --listen) and, with --app, its remote steps' groups."""
    app = None if not app_spec else load_app(app_spec)

    async def backlogs(client: Client) -> list[dict[str, Any]] | None:
        if client.broker is None:
            return None
        await trio.sleep(listen)
        workers = await client.broker.worker_descriptors()
        return [
            {"group": g.route, "workers": len(g.workers), "backlog": g.backlog}
            for g in await group_loads(client.broker, workers, app)
        ]

    async def read(client: Client) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return await depths(client), await backlogs(client)

    async def depths(client: Client) -> list[dict[str, Any]]:
        depths = {depth.queue: depth for depth in await client.queue_depths()}
        registered = {} if app is None else {queue.name: queue for queue in app.queues}
        rows = []
        for name in sorted(registered.keys() | depths.keys()):
            queue, depth = registered.get(name), depths.get(name)
            rows.append(
                {
                    "queue": name,
                    "limit": None if queue is None else queue.concurrency,
                    "priority": None if queue is None else queue.priority,
                    "admitted": 0 if depth is None else depth.admitted,
                    "waiting": 0 if depth is None else depth.waiting,
                }
            )
        return rows

    rows, groups = with_client(store, read, app, broker or None)
    if as_json:
        print_json({"queues": rows, **({} if groups is None else {"group_backlogs": groups})})
        return
    sections: list[Any] = []
    if not rows:
        sections.append(
            "No queue holds or awaits a slot." + ("" if app else " (--app lists them all.)")
        )
    else:
        columns = ["queue", "limit", "priority", "admitted", "waiting"]
        sections.append(
            table(
                "Flow-control queues",
                columns,
                [[row[column] for column in columns] for row in rows],
                no_wrap=columns,
            )
        )
    if groups is not None:
        columns = ["group", "workers", "backlog"]
        sections.append(
            table(
                "Broker backlog per group (waiting, not yet delivered)",
                columns,
                [
                    [g["group"], g["workers"], "-" if g["backlog"] is None else g["backlog"]]
                    for g in groups
                ],
                no_wrap=columns,
            )
            if groups
            else "No group is served (nor known from --app)."
        )
    print_tables(*sections)
