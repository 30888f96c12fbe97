"""``trio-durable schedules list|show|create|pause|resume|trigger|delete``:
the store's schedules, read and changed through the client's schedule
calls (`Client.list_schedules`, `Client.create_schedule`, ...; see
docs/schedules.md). Engines of the store learn of a change at once.
"""

from __future__ import annotations

from typing import Any, get_args

import click

from .._features.schedules._schedule_spec import (
    DEFAULT_CATCHUP_WINDOW,
    DEFAULT_CRON,
    Overlap,
    ScheduleInfo,
)
from .._front._client import Client
from ._apps import load_app
from ._common import json_option, print_json, print_tables, store_option, table, wide_option
from ._run_views import document, run_line
from ._runs import app_option, with_client
from ._values import JSONArguments, when


@click.group("schedules", short_help="List, create, pause, resume, trigger, delete schedules.")
def schedules_group() -> None:
    """List, read, create and control the schedules of a store.

    Every command reads the store from --store or TRIO_DURABLE_STORE, and
    prints tables, or one JSON document with --json. A schedule that does
    not exist is an error (exit status 1); an option a schedule cannot take
    (a bad cron expression or timezone) a usage error (exit status 2), and
    nothing is written.
    """


def _rows(info: ScheduleInfo) -> list[tuple[str, Any]]:
    return [
        ("workflow", info.workflow),
        ("cron", f"{info.cron} ({info.timezone})"),
        ("overlap", info.overlap),
        ("catch-up window", f"{info.catchup_window:g} s"),
        ("jitter", f"{info.jitter:g} s"),
        ("paused", "yes" if info.paused else "no"),
        ("next tick", when(info.next_tick)),
        ("last tick", when(info.last_tick)),
        ("last run", info.last_run_id),
        ("buffered tick", when(info.buffered)),
        (
            "ticks",
            f"{info.started} started, {info.skipped} skipped, {info.missed} missed,"
            f" {info.triggered} triggered",
        ),
    ]


def _shown(info: ScheduleInfo, as_json: bool, verb: str | None = None) -> None:
    if as_json:
        print_json(document(info))
        return
    title = f"Schedule {info.name}" if verb is None else f"Schedule {info.name} ({verb})"
    print_tables(table(title, ["field", "value"], _rows(info), no_wrap=["field"]))


@schedules_group.command("list", short_help="Every schedule, by name.")
@store_option()
@wide_option
@json_option
def list_command(store: str | None, as_json: bool) -> None:
    """List every schedule of the store, by name, with its next tick, its
    last run and its counts of ticks."""
    found = with_client(store, lambda c: c.list_schedules())
    if as_json:
        print_json(document(found))
        return
    if not found:
        print_tables("No schedules.")
        return
    print_tables(
        table(
            f"Schedules ({len(found)})",
            ["schedule", "workflow", "cron", "paused", "next tick", "last run", "ticks"],
            [
                [
                    info.name,
                    info.workflow,
                    f"{info.cron} ({info.timezone})",
                    "yes" if info.paused else "no",
                    when(info.next_tick),
                    info.last_run_id,
                    f"{info.started} started, {info.skipped} skipped, {info.missed} missed",
                ]
                for info in found
            ],
            no_wrap=["cron", "paused", "next tick"],
        )
    )


@schedules_group.command("show", short_help="One schedule and its counts.")
@click.argument("name")
@store_option()
@wide_option
@json_option
def show_command(name: str, store: str | None, as_json: bool) -> None:
    """Show the schedule NAME: its options, its next and last ticks, its
    last run and how many ticks started, were skipped or missed."""
    _shown(with_client(store, lambda c: c.get_schedule(name)), as_json)


@schedules_group.command("create", short_help="Create a schedule, or change one.")
@click.argument("name")
@click.argument("workflow")
@store_option()
@click.option(
    "--cron", default=DEFAULT_CRON, show_default=True, help="When it ticks: a cron expression."
)
@click.option("--timezone", default="UTC", show_default=True, help="The IANA timezone of --cron.")
@click.option(
    "--args",
    type=JSONArguments(),
    default="[]",
    show_default=True,
    help="The inputs of each run, as one JSON array.",
)
@click.option(
    "--overlap",
    type=click.Choice(get_args(Overlap)),
    default="skip",
    show_default=True,
    help="A tick while the last run is open: skipped, kept for its end, or started.",
)
@click.option(
    "--catchup-window",
    type=click.FloatRange(min=0),
    default=DEFAULT_CATCHUP_WINDOW,
    show_default=True,
    metavar="SECONDS",
    help="How late a tick may still start its run.",
)
@click.option(
    "--jitter",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="The bound of each tick's delay.",
)
@app_option("The App that registers WORKFLOW: --args are checked against it.")
@json_option
def create_command(
    name: str,
    workflow: str,
    store: str | None,
    cron: str,
    timezone: str,
    args: tuple[Any, ...],
    overlap: Overlap,
    catchup_window: float,
    jitter: float,
    app_spec: str | None,
    as_json: bool,
) -> None:
    """Create the schedule NAME, which starts a run of WORKFLOW with --args
    at each tick of --cron; or change it if it exists (keeping its pause
    and counts). Its first tick is the first after now. With --app, --args
    are checked against WORKFLOW; without, they are taken as they are.
    A schedule declared in an App (App.schedule) is declared again as the
    App says when an engine of it opens."""
    app = None if not app_spec else load_app(app_spec)
    info = with_client(
        store,
        lambda c: c.create_schedule(
            name,
            workflow,
            cron=cron,
            timezone=timezone,
            args=args,
            overlap=overlap,
            catchup_window=catchup_window,
            jitter=jitter,
        ),
        app,
    )
    _shown(info, as_json, "created")


@schedules_group.command("pause", short_help="Pause a schedule: its ticks start nothing.")
@click.argument("name")
@store_option()
@json_option
def pause_command(name: str, store: str | None, as_json: bool) -> None:
    """Pause the schedule NAME: no tick starts a run (nor counts) until it
    is resumed. Pausing a paused schedule changes nothing."""
    _shown(with_client(store, lambda c: c.pause_schedule(name)), as_json, "paused")


@schedules_group.command("resume", short_help="Resume a paused schedule.")
@click.argument("name")
@store_option()
@json_option
def resume_command(name: str, store: str | None, as_json: bool) -> None:
    """Resume the schedule NAME: its next tick is the first after now.
    Resuming a schedule that is not paused changes nothing."""
    _shown(with_client(store, lambda c: c.resume_schedule(name)), as_json, "resumed")


@schedules_group.command("trigger", short_help="Start one run of a schedule now.")
@click.argument("name")
@store_option()
@json_option
def trigger_command(name: str, store: str | None, as_json: bool) -> None:
    """Start one run of the schedule NAME's workflow now, paused or not,
    whatever its overlap policy (its id: NAME@trigger-<n>-<time>)."""

    async def trigger(client: Client) -> Any:
        return await client.trigger_schedule(name)

    run = with_client(store, trigger)
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"triggered: {run_line(run)}")


@schedules_group.command("delete", short_help="Delete a schedule (its runs are kept).")
@click.argument("name")
@store_option()
@json_option
def delete_command(name: str, store: str | None, as_json: bool) -> None:
    """Delete the schedule NAME and its state; the runs it started are
    kept."""
    with_client(store, lambda c: c.delete_schedule(name))
    if as_json:
        print_json({"deleted": name})
    else:
        click.echo(f"deleted schedule {name!r}")
