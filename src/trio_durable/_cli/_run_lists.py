"""``trio-durable runs list`` and ``runs count``: the runs that match one
set of filters (`run_filters`), a page of them newest first or their
number per status, both through `Client.list_runs` and `Client.count_runs`.

The filters are declared once here, so the two commands take the same
flags with the same meaning: ``--status``, ``--workflow``, ``--namespace``,
``--tag``, ``--created-after``/``--created-before``, ``--parent``,
``--top-level`` (runs that are no child, fan member or on-error handler's
run), ``--id-prefix`` (runs whose id starts with it) and ``--where``
(search attributes).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Final, cast, get_args

import attrs
import click

from .._base._records import RunStatus
from .._base._search_values import parse_where
from .._features.search._search_attributes import stored_types
from .._front._client import Client
from .._front._queries import handed_to
from .._kernel._views import RunPage
from ._common import json_option, names, print_json, print_tables, store_option, table, wide_option
from ._run_views import document, facets_table, runs_table
from ._runs import with_client
from ._values import PointInTime, at

STATUSES: Final = get_args(RunStatus)


@attrs.define(frozen=True, kw_only=True)
class RunFilters:
    """What the filter flags of ``runs list`` and ``runs count`` say."""

    statuses: tuple[RunStatus, ...]
    workflow: str | None
    namespace: str | None
    tags: tuple[str, ...]
    created_after: datetime | timedelta | None
    created_before: datetime | timedelta | None
    parent: str | None
    top_level: bool
    id_prefix: str | None
    where: tuple[str, ...]

    async def arguments(self, client: Client) -> dict[str, Any]:
        """The keyword arguments of `Client.list_runs` and
        `Client.count_runs` these filters give (ages counted back from the
        client's durable time, search attributes typed as the store records
        them)."""
        search = parse_where(self.where, await stored_types(client.store)) if self.where else None
        now = client.clock.now()
        return {
            "status": self.statuses or None,
            "workflow": self.workflow,
            "namespace": self.namespace,
            "tags": self.tags,
            "created_after": at(self.created_after, now),
            "created_before": at(self.created_before, now),
            "parent_id": self.parent,
            "top_level": self.top_level,
            "id_prefix": self.id_prefix,
            "search_attributes": search,
        }


_FILTER_OPTIONS: Final = (
    click.option(
        "--status",
        multiple=True,
        metavar="STATUS",
        help="Only runs in this status (repeat it, or separate with commas):"
        f" {', '.join(STATUSES)}.",
    ),
    click.option("--workflow", metavar="NAME", help="Only runs of this workflow."),
    click.option("--namespace", metavar="NAMESPACE", help="Only runs of this namespace."),
    click.option(
        "--tag", "tags", multiple=True, metavar="TAG", help="Only runs with all these tags."
    ),
    click.option("--created-after", type=PointInTime(), help="Only runs created at or after WHEN."),
    click.option("--created-before", type=PointInTime(), help="Only runs created before WHEN."),
    click.option("--parent", metavar="RUN", help="Only the children of this run."),
    click.option(
        "--top-level",
        is_flag=True,
        help="Only runs without a parent: no child run, fan member or on-error handler's run.",
    ),
    click.option("--id-prefix", metavar="PREFIX", help="Only runs whose id starts with PREFIX."),
    click.option(
        "--where",
        multiple=True,
        metavar="NAME=VALUE",
        help="Only runs whose search attribute matches (repeat for more): NAME=VALUE, or for"
        " int, float and datetime attributes NAME>VALUE, >=, <, <=.",
    ),
)


def run_filters(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The filter flags, given to the command as one ``filters`` argument
    (a `RunFilters`), checked: an unknown status, or ``--top-level`` with
    ``--parent``, is a usage error."""

    @functools.wraps(fn)
    def command(**options: Any) -> Any:
        statuses = cast(tuple[RunStatus, ...], names(options.pop("status")))
        unknown = [s for s in statuses if s not in STATUSES]
        if unknown:
            raise click.BadParameter(
                f"{unknown[0]!r} is not a status ({', '.join(STATUSES)})", param_hint="'--status'"
            )
        if options["top_level"] and options["parent"] is not None:
            raise click.UsageError("--top-level lists runs without a parent: drop --parent")
        if options["id_prefix"] == "":
            raise click.BadParameter(
                "give a prefix of one character or more", param_hint="'--id-prefix'"
            )
        filters = RunFilters(
            statuses=statuses,
            tags=names(options.pop("tags")),
            **{name: options.pop(name) for name in _FILTER_NAMES},
        )
        return fn(filters=filters, **options)

    for option in reversed(_FILTER_OPTIONS):
        command = option(command)
    return command


_FILTER_NAMES: Final = (
    "workflow",
    "namespace",
    "created_after",
    "created_before",
    "parent",
    "top_level",
    "id_prefix",
    "where",
)


@click.command("list", short_help="List runs, newest first, with filters.")
@store_option()
@run_filters
@click.option(
    "--limit",
    type=click.IntRange(min=1, max=500),
    default=50,
    show_default=True,
    help="Runs per page.",
)
@click.option("--cursor", metavar="CURSOR", help="The page after the one that printed it.")
@click.option("--facets", is_flag=True, help="Also count the runs per status.")
@wide_option
@json_option
def list_command(
    store: str | None,
    filters: RunFilters,
    limit: int,
    cursor: str | None,
    facets: bool,
    as_json: bool,
) -> None:
    """List the runs that match every filter, newest first, a page at a time.

    WHEN is an ISO 8601 date or time (UTC unless it has an offset), seconds
    since the epoch, or an age like 2h (that long ago). A page that is not
    the last ends with the --cursor of the next. --id-prefix finds a run
    from the start of its id (case-sensitive); --top-level leaves out the
    runs that other runs started (children, fan members, on-error
    handlers). --where filters by search attributes, typed as the store
    records them: a keyword list matches if it holds VALUE, a bool is true
    or false, a datetime is ISO 8601 with an offset.
    """

    async def read_page(client: Client) -> tuple[RunPage, dict[str, str]]:
        page = await client.list_runs(
            **await filters.arguments(client), limit=limit, cursor=cursor, facets=facets
        )
        return page, {} if as_json else await handed_to(client.store, page.runs)

    page, handed = with_client(store, read_page)
    if as_json:
        print_json(document(page))
        return
    sections: list[Any] = [
        runs_table(page, f"Runs ({len(page.runs)}, newest first)", handed)
        if page.runs
        else "No runs match."
    ]
    if page.facets is not None:
        sections.append(facets_table(page.facets))
    if page.next_cursor is not None:
        sections.append(f"More: add --cursor {page.next_cursor}")
    print_tables(*sections)


@click.command("count", short_help="Count the runs that match filters, per status.")
@store_option()
@run_filters
@json_option
def count_command(store: str | None, filters: RunFilters, as_json: bool) -> None:
    """Count the runs that match every filter (those of runs list), per
    status, in the store: no run is read into this process. Prints the
    total and a row per status that has runs."""

    async def count(client: Client) -> dict[RunStatus, int]:
        return await client.count_runs(**await filters.arguments(client))

    counts = with_client(store, count)
    total = sum(counts.values())
    if as_json:
        print_json({"total": total, "by_status": counts})
        return
    if not total:
        print_tables("No runs match.")
        return
    print_tables(
        table(
            f"{total} runs match",
            ["status", "runs"],
            [[status, number] for status, number in counts.items()],
        )
    )
