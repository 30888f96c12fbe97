"""``trio-durable events send|list|show``: sending an event (which starts
a run of each workflow that subscribes to it, or joins its debounce
window) and reading the events the store keeps, through `Client.send_event`,
`Client.list_events` and `Client.get_event_record` (see docs/events.md).

Sending needs the App (``--app`` or ``TRIO_DURABLE_APP``): its workflows'
``events=`` say which runs an event starts, and the payload is checked
against their inputs before anything is written. Reading needs none.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import click

from .._base._exceptions import UnsubscribedEventWarning
from .._features.events._events import EventReceipt, EventRecord
from .._front._client import Client
from ._common import (
    CommandError,
    json_option,
    print_json,
    print_tables,
    store_option,
    table,
    wide_option,
)
from ._run_views import document
from ._runs import app_option, need_app, with_client
from ._values import JSONValue, when


@click.group("events", short_help="Send events; list and show the events stored.")
def events_group() -> None:
    """Send events, and read the events a store keeps (until runs prune
    --events deletes them).

    Every command reads the store from --store or TRIO_DURABLE_STORE, and
    prints tables, or one JSON document with --json.
    """


@events_group.command("send", short_help="Send an event: start its subscribers' runs.")
@click.argument("name")
@store_option()
@app_option("The App whose workflows subscribe to events (required).")
@click.option(
    "--payload", type=JSONValue(), default="null", show_default=True, help="Its payload, as JSON."
)
@click.option("--key", metavar="KEY", help="The key debounce windows are kept per.")
@click.option(
    "--event-id", metavar="ID", help="The event's id: sending it again starts nothing more."
)
@json_option
def send_command(
    name: str,
    store: str | None,
    app_spec: str | None,
    payload: Any,
    key: str | None,
    event_id: str | None,
    as_json: bool,
) -> None:
    """Send the event NAME with --payload: each workflow of the App that
    subscribes to it (events=[NAME]) gets a run with the payload as its one
    input (a debounced one joins or opens its window for --key), written in
    one go with the event. Idempotent by --event-id. An event no workflow
    subscribes to is stored all the same (a warning says so); a payload
    that does not fit a subscriber's input is a usage error (exit status
    2), and nothing is written."""
    app = need_app(app_spec, "subscribes to events")

    async def send(client: Client) -> tuple[EventReceipt, bool]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnsubscribedEventWarning)
            receipt = await client.send_event(name, payload, key=key, event_id=event_id)
        unsubscribed = any(issubclass(w.category, UnsubscribedEventWarning) for w in caught)
        return receipt, unsubscribed

    receipt, unsubscribed = with_client(store, send, app)
    if unsubscribed:
        click.echo(
            f"warning: no workflow of app {app.name!r} subscribes to {name!r}:"
            " the event is stored, and starts nothing",
            err=True,
        )
    if as_json:
        print_json(document(receipt))
        return
    runs = ", ".join(receipt.run_ids) or "none"
    click.echo(f"sent: event {receipt.event_id} ({receipt.name}); runs: {runs}")


def _event_rows(events: list[EventRecord]) -> list[list[Any]]:
    return [
        [e.event_id, e.name, e.key, when(e.sent_at), list(e.run_ids), json.dumps(e.payload)]
        for e in events
    ]


_COLUMNS = ["event", "name", "key", "sent", "runs", "payload"]


@events_group.command("list", short_help="The events stored, by id.")
@store_option()
@click.option("--after", metavar="ID", help="Only events whose id comes after this one.")
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=1000),
    default=50,
    show_default=True,
    help="Events listed.",
)
@wide_option
@json_option
def list_command(store: str | None, after: str | None, limit: int, as_json: bool) -> None:
    """List the events the store keeps, by id, from the first after --after:
    each one's name, key, time, the runs it reached and its payload. A
    page that is not the last ends with the --after of the next."""

    async def read(client: Client) -> list[EventRecord]:
        # One more than the page tells whether another page follows.
        return await client.list_events(after=after, limit=limit + 1)

    found = with_client(store, read)
    page, more = found[:limit], len(found) > limit
    if as_json:
        print_json({"events": document(page), "next_after": page[-1].event_id if more else None})
        return
    if not page:
        print_tables("No events.")
        return
    sections: list[Any] = [
        table(f"Events ({len(page)}, by id)", _COLUMNS, _event_rows(page), no_wrap=["sent"])
    ]
    if more:
        sections.append(f"More: add --after {page[-1].event_id}")
    print_tables(*sections)


@events_group.command("show", short_help="One stored event.")
@click.argument("event_id", metavar="EVENT")
@store_option()
@wide_option
@json_option
def show_command(event_id: str, store: str | None, as_json: bool) -> None:
    """Show the event EVENT: its name, key, time, payload and the runs it
    reached. An event the store does not keep is an error (exit status 1)."""
    found = with_client(store, lambda c: c.get_event_record(event_id))
    if found is None:
        raise CommandError(f"no event {event_id!r}")
    if as_json:
        print_json(document(found))
        return
    print_tables(
        table(
            f"Event {found.event_id}",
            ["field", "value"],
            [
                ("name", found.name),
                ("key", found.key),
                ("sent", when(found.sent_at)),
                ("runs", list(found.run_ids)),
                ("payload", json.dumps(found.payload)),
            ],
            no_wrap=["field"],
        )
    )
