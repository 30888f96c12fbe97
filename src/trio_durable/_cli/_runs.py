"""``trio-durable runs ...``: find, read and control runs from outside the
processes that run them, through `open_client` (which runs no workflow and
takes no lease; an engine serving a run learns of a write at once).

Every command reads the store from ``--store`` or ``TRIO_DURABLE_STORE``.
It refuses a SQL store that has no schema yet (a mistyped path or database
would otherwise get an empty store created) and the memory store (which
lives inside one process). Commands that need the App's code (``start``
without live workers that announce the workflow, ``query``, ``update``,
...) take it from ``--app`` or ``TRIO_DURABLE_APP`` (`app_option`), so
that an unknown name or inputs that do not fit are refused before anything
is written.

This module holds the group, the client the commands share
(`with_client`) and ``show``, ``history``, ``result``, ``cancel``,
``retry`` and ``prune``; the other ``runs`` commands are in
``_run_lists``, ``_run_starts``, ``_calls``, ``_fork`` and ``_hooks``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from typing import Any, Final, TypeVar

import click
import trio
from rich.console import Console

from .._base._bounds import MAX_INTEGER
from .._base._exceptions import RunFailed
from .._base._records import TERMINAL_STATUSES, Run
from .._front._app import App
from .._front._client import Client, open_client
from .._kernel._views import FanPage, HistoryEntry, Retention, RunDetail
from .._stores._blob_store import with_blobs_from_env
from .._stores._versions import has_schema_versions, schema_version
from ._apps import load_app
from ._codec import env_codec
from ._common import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    CommandError,
    F,
    counting,
    interactive,
    json_option,
    need_store,
    print_json,
    print_tables,
    shown,
    store_option,
    wide_option,
)
from ._run_views import (
    detail_tables,
    document,
    fan_page_tables,
    history_tables,
    run_line,
)
from ._values import Age, whole

APP_ENV: Final = "TRIO_DURABLE_APP"

T = TypeVar("T")


@click.group("runs", short_help="List, read, start and control runs.")
def runs_group() -> None:
    """List, read, start and control the runs of a store.

    Every command reads the store from --store or TRIO_DURABLE_STORE, and
    prints tables, or one JSON document with --json.
    """


# -- the client ------------------------------------------------------------------


@asynccontextmanager
async def opened_client(
    store: str, app: App | None = None, broker: str | None = None
) -> AsyncIterator[Client]:
    """A client of the store ``store`` names, once it is known to hold one
    (and of ``broker``, if given).

    Raises:
      CommandError: (exit 2) ``store`` is the memory store; (exit 3) a SQL
        store without a schema.
      StoreError: The store cannot be reached.
    """
    if store.partition("://")[0].lower() == "memory":
        raise CommandError(
            "the memory store lives inside one process: give the store the engines use",
            EXIT_USAGE,
        )
    if has_schema_versions(store) and (await schema_version(store)).found == 0:
        raise CommandError(
            f"{shown(store)} holds no trio-durable store (it has no schema): check the URL,"
            " or create the store with `trio-durable migrate`",
            EXIT_UNREACHABLE,
        )
    async with open_client(
        store, app=app, broker=broker, codec=env_codec(), **with_blobs_from_env({})
    ) as client:
        yield client


def with_client(
    store: str | None,
    use: Callable[[Client], Awaitable[T]],
    app: App | None = None,
    broker: str | None = None,
) -> T:
    """Run ``use`` with a client of the store (and of ``broker``, if given),
    in a Trio run of its own."""
    url = need_store(store)

    async def main() -> T:
        async with opened_client(url, app, broker) as client:
            return await use(client)

    return trio.run(main)


def app_option(help_text: str) -> Callable[[F], F]:
    """``--app MODULE:APP``, read from ``TRIO_DURABLE_APP`` when not given;
    the command loads it with `need_app` (or does without it)."""
    return click.option(
        "--app",
        "app_spec",
        envvar=APP_ENV,
        show_envvar=True,
        metavar="MODULE:APP",
        help=help_text,
    )


def need_app(app_spec: str | None, what: str) -> App:
    """The App ``app_spec`` names, or a usage error saying what it is for
    (``what``: "registers 'approval'") and naming the flag and the variable.

    Raises:
      CommandError: (exit 2) It does not import or is no App.
    """
    if not app_spec:
        raise click.UsageError(f"give the App that {what}: --app MODULE:APP or set {APP_ENV}")
    return load_app(app_spec)


def namespace_option(fn: F) -> F:
    """``--namespace``: a run of another namespace counts as missing."""
    return click.option(
        "--namespace",
        metavar="NAMESPACE",
        help="Only a run of this namespace; one of another counts as missing.",
    )(fn)


# -- show, history ---------------------------------------------------------------


@runs_group.command("show", short_help="A run, its timeline with fans folded, its fans.")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@click.option(
    "--fan",
    type=whole(-MAX_INTEGER),
    metavar="FIRST_SEQ",
    help="Instead: a page of the fan starting at this seq.",
)
@click.option("--offset", type=whole(0), default=0, help="With --fan: members skipped.")
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=500),
    default=100,
    show_default=True,
    help="With --fan: members shown.",
)
@click.option("--failed", is_flag=True, help="With --fan: only its failed members.")
@wide_option
@json_option
def show_command(
    run_id: str,
    store: str | None,
    namespace: str | None,
    fan: int | None,
    offset: int,
    limit: int,
    failed: bool,
    as_json: bool,
) -> None:
    """Show a run: its fields, its timeline (each fan wider than 20 folded
    into one line of counts), its fans, children and handlers.

    It reads a page of each fan, not the whole fan; --fan FIRST_SEQ pages
    through one fan's members.
    """
    if fan is None:
        if offset or failed or limit != 100:
            raise click.UsageError("--offset, --limit and --failed page a fan: give --fan too")
        detail, positions, now = with_client(store, lambda c: _read_detail(c, run_id, namespace))
        if as_json:
            print_json(document(detail))
        else:
            print_tables(*detail_tables(detail, now, positions))
        return

    async def read_page(client: Client) -> tuple[FanPage, Run, float]:
        page = await client.fan_page(
            run_id, fan, offset=offset, limit=limit, failed=failed, namespace=namespace
        )
        return page, await client.get(run_id), client.clock.now()

    page, run, now = with_client(store, read_page)
    if as_json:
        print_json(document(page))
    else:
        print_tables(*fan_page_tables(page, run.created_at, now, failed=failed))


async def _read_detail(
    client: Client, run_id: str, namespace: str | None
) -> tuple[RunDetail, dict[int, int], float]:
    """A run's detail, the places of its steps that wait in a queue's line,
    and the client's durable time once it had read them."""
    detail = await client.run_detail(run_id, namespace=namespace)
    positions: dict[int, int] = {}
    for entry in detail.timeline:
        if isinstance(entry, HistoryEntry) and entry.queue is not None:
            place = await client.queue_position(entry.queue, detail.run.id, entry.seq)
            if place is not None:
                positions[entry.seq] = place
    return detail, positions, client.clock.now()


async def read_at_now(client: Client, reading: Awaitable[T]) -> tuple[T, float]:
    """What ``reading`` read, and the client's durable time once it had (the
    "now" that a table's "ago" columns count back from)."""
    return await reading, client.clock.now()


@runs_group.command("history", short_help="A run's timeline: every checkpoint and attempt.")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@wide_option
@json_option
def history_command(run_id: str, store: str | None, namespace: str | None, as_json: bool) -> None:
    """Show a run's whole timeline: each checkpoint with its kind, name,
    status, attempts and times, each failed attempt's error (with its
    traceback in --json), the run's children and handlers, and what each
    retry of the run replaced: the run's error then and the operations it
    deleted or reset, with the tracebacks of their failures."""
    history, now = with_client(
        store, lambda c: read_at_now(c, c.history(run_id, namespace=namespace))
    )
    if as_json:
        print_json(document(history))
    else:
        print_tables(*history_tables(history, now))


# -- result -----------------------------------------------------------------


@runs_group.command("result", short_help="A run's output (with --wait, once it ends).")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@click.option("--wait", is_flag=True, help="Wait for the run to end (progress on a terminal).")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="With --wait: give up after this long (exit status 1).",
)
@json_option
@click.pass_context
def result_command(
    ctx: click.Context,
    run_id: str,
    store: str | None,
    namespace: str | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Print a run's output; exit with status 1 if it failed, was cancelled
    or is dead (the error is printed), or has not ended (without --wait)."""
    if timeout is not None and not wait:
        raise click.UsageError("--timeout goes with --wait")

    async def read(client: Client) -> Any:
        if wait:
            with trio.move_on_after(float("inf") if timeout is None else timeout):
                async with trio.open_nursery() as nursery:
                    if interactive() and not as_json:
                        nursery.start_soon(_show_waiting, client, run_id, namespace)
                    # A failed run is printed below, as any other.
                    with suppress(RunFailed):
                        await client.result(run_id, namespace=namespace)
                    nursery.cancel_scope.cancel()
        return await client.get(run_id, namespace=namespace)

    run = with_client(store, read)
    if as_json:
        print_json(document(run))
    else:
        click.echo(run_line(run))
    if run.status == "completed":
        return
    if run.status in TERMINAL_STATUSES:
        ctx.exit(EXIT_FAILED)
    if wait:
        raise CommandError(f"run {run_id!r} did not end within {timeout:g} s (it is {run.status})")
    raise CommandError(f"run {run_id!r} has not ended (it is {run.status}): add --wait")


async def _show_waiting(client: Client, run_id: str, namespace: str | None) -> None:
    """A line on the terminal saying what the awaited run is doing, read
    again twice a second (for people only: the wait itself is woken by the
    store's change watching)."""
    console = Console(file=sys.stderr)
    started = trio.current_time()
    with console.status(f"waiting for run {run_id}") as status:
        while True:
            run = await client.get(run_id, namespace=namespace)
            waited = trio.current_time() - started
            status.update(f"waiting for run {run_id}: {run.status}, {waited:.0f} s")
            await trio.sleep(0.5)


# -- cancel, retry ---------------------------------------------------------


@runs_group.command("cancel", short_help="Cancel a run and the children it awaits.")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@click.option("--compensate", is_flag=True, help="Run the undos of its completed steps first.")
@json_option
def cancel_command(
    run_id: str, store: str | None, namespace: str | None, compensate: bool, as_json: bool
) -> None:
    """Cancel RUN: it ends cancelled once an engine of the store has
    interrupted it. A run that has ended cannot be cancelled (exit status 1)."""

    async def cancel(client: Client) -> Any:
        await client.cancel(run_id, compensate=compensate, namespace=namespace)
        return await client.get(run_id, namespace=namespace)

    run = with_client(store, cancel)
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"cancel requested: {run_line(run)}")


@runs_group.command("retry", short_help="Run a failed or dead run again from its checkpoints.")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@json_option
@click.option(
    "--from-seq", "from_seq", type=whole(-MAX_INTEGER), help="Run RUN, ended, again from this seq."
)
def retry_command(
    run_id: str, store: str | None, namespace: str | None, as_json: bool, from_seq: int | None
) -> None:
    """Retry RUN, which failed or is dead: its completed steps are kept,
    failed ones run again. RUN suspended waiting on remote steps sends
    them again at once, as new attempts (the way out when a broker lost
    them). Any other run is refused (exit status 1). With --from-seq, RUN,
    ended in any way, runs again from that seq in place (docs/fork-and-retry.md).
    What a retry replaces stays in RUN's history (runs history RUN)."""
    run = with_client(store, lambda c: c.retry(run_id, namespace=namespace, from_seq=from_seq))
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"retrying: {run_line(run)}")


# -- prune ---------------------------------------------------------------------------

_PRUNED: Final = ("completed", "failed", "cancelled", "terminated", "dead")


@runs_group.command("prune", short_help="Delete ended runs older than an age per status.")
@store_option()
@click.option("--completed", type=Age(), help="Delete completed runs not updated for AGE.")
@click.option("--failed", type=Age(), help="Delete failed runs not updated for AGE.")
@click.option("--cancelled", type=Age(), help="Delete cancelled runs not updated for AGE.")
@click.option("--terminated", type=Age(), help="Delete terminated runs not updated for AGE.")
@click.option("--dead", type=Age(), help="Delete dead runs not updated for AGE.")
@click.option("--events", type=Age(), help="Delete event records sent longer than AGE ago.")
@click.option(
    "--batch",
    type=click.IntRange(min=1, max=10_000),
    default=500,
    show_default=True,
    help="Runs deleted per transaction.",
)
@json_option
def prune_command(
    store: str | None,
    completed: timedelta | None,
    failed: timedelta | None,
    cancelled: timedelta | None,
    terminated: timedelta | None,
    dead: timedelta | None,
    events: timedelta | None,
    batch: int,
    as_json: bool,
) -> None:
    """Delete the runs that ended (completed, failed, cancelled, terminated, dead) and
    were last updated longer ago than the age given for their status, with
    their inputs, checkpoints, signals, queue entries, webhooks and the
    keyed values that go with them (claims, windows, published and stream
    values, updates). A status without an age is kept. With --events, the
    event records sent longer ago than its age go too (without it they are
    kept). AGE is like 90s, 15m, 12h, 7d or 2w (0: all of them).
    """
    ages = {
        "completed": completed,
        "failed": failed,
        "cancelled": cancelled,
        "terminated": terminated,
        "dead": dead,
    }
    if all(age is None for age in ages.values()) and events is None:
        raise click.UsageError(
            "give an age for at least one status: --completed, --failed, --cancelled,"
            " --terminated or --dead (or --events)"
        )
    retention = Retention(**ages, events=events, batch=batch)

    async def prune(client: Client) -> int:
        pruned = 0
        with counting("pruning runs", quiet=as_json) as advance:
            while True:
                # One batch at a time, so the count moves as it goes.
                deleted = await client.prune(retention, limit=batch)
                pruned += deleted
                advance(deleted)
                if deleted < batch:
                    return pruned

    pruned = with_client(store, prune)
    kept = [status for status in _PRUNED if ages[status] is None]
    if as_json:
        print_json(
            {
                "pruned": pruned,
                "ages": {
                    s: None if a is None else a.total_seconds()
                    for s, a in {**ages, "events": events}.items()
                },
            }
        )
    else:
        rules = ", ".join(
            f"{status} older than {_age_text(age)}"
            for status, age in {**ages, "events": events}.items()
            if age is not None
        )
        click.echo(f"pruned {pruned} runs ({rules}; kept: {', '.join(kept) or 'none'})")


def _age_text(age: timedelta) -> str:
    seconds = age.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size:g}{unit}"
    return f"{seconds:g}s"
