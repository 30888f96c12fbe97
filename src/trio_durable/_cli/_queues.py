"""``trio-durable queues list``: each flow-control queue (`App.queue`), the
steps and runs holding its slots and waiting in its line, fleet-wide, as
the store counts them (`Client.queue_depths`); with ``--app``, each queue's
limit and priority too, and its queues that nothing holds now.

These are the queues of flow control, kept in the store; a broker's own
backlog per worker group is not read here.
"""

from __future__ import annotations

from typing import Any

import click

from .._front._client import Client
from ._apps import load_app
from ._common import json_option, print_json, print_tables, store_option, table, wide_option
from ._runs import app_option, with_client


@click.group("queues", short_help="Flow-control queues: admitted and waiting.")
def queues_group() -> None:
    """The flow-control queues of a store (steps and runs declared with
    queue=, and each entity key's exclusive calls)."""


@queues_group.command("list", short_help="Each queue: its limit, admitted and waiting.")
@store_option()
@app_option("Also show each of this App's queues' limit and priority, held or not.")
@wide_option
@json_option
def list_command(store: str | None, app_spec: str | None, as_json: bool) -> None:
    """List each flow-control queue by name: how many hold one of its
    slots (admitted) and how many wait in its line, fleet-wide. A queue
    neither held nor waited for is listed only when --app registers it,
    with its limit (concurrency) and priority."""
    app = None if not app_spec else load_app(app_spec)

    async def read(client: Client) -> list[dict[str, Any]]:
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

    rows = with_client(store, read)
    if as_json:
        print_json({"queues": rows})
        return
    if not rows:
        print_tables(
            "No queue holds or awaits a slot." + ("" if app else " (--app lists them all.)")
        )
        return
    columns = ["queue", "limit", "priority", "admitted", "waiting"]
    print_tables(
        table(
            "Flow-control queues",
            columns,
            [[row[column] for column in columns] for row in rows],
            no_wrap=["queue", "limit", "priority", "admitted", "waiting"],
        )
    )
