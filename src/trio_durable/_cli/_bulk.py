"""``trio-durable runs cancel|retry|terminate|prune``: one run by its id
(for prune: the ended runs older than an age per status), or every run a
filter matches (a bulk action, `Client.cancel_many`, `retry_many`,
`terminate_many`, `prune_many`), with a dry run, a confirmation, progress,
and resumed when run again after an interruption.

`with_bulk` replaces ``runs cancel``, ``runs retry`` and ``runs prune`` of
``_runs`` with commands that take RUN (for prune: the ages) or the filters
(RUN or the ages given, the command of ``_runs`` runs as before) and adds
``runs terminate``.
"""

from __future__ import annotations

import copy
import hashlib
import inspect
import json
from collections.abc import Callable
from typing import Any, Final, cast

import click
import trio

from .._base._records import RunStatus
from .._base._search_values import parse_where
from .._features.search._search_attributes import stored_types
from .._front._client import Client
from .._front._front_bulk import BulkAction, BulkProgress, BulkReport, RunSelection
from ._common import (
    EXIT_FAILED,
    CommandError,
    json_option,
    names,
    need_store,
    print_json,
    progress,
    store_option,
)
from ._run_lists import STATUSES
from ._run_views import document, run_line
from ._runs import namespace_option, opened_client, with_client
from ._values import PointInTime, at

_FILTERS: Final = (
    "status",
    "workflow",
    "tags",
    "where",
    "created_after",
    "created_before",
    "code",
    "top_level",
    "id_prefix",
)
_PAST: Final[dict[BulkAction, str]] = {
    "cancel": "cancelled",
    "retry": "retried",
    "terminate": "terminated",
    "prune": "pruned",
}
_AGES: Final = ("completed", "failed", "cancelled", "terminated", "dead", "events")


def _filter_options(command: click.Command, *, batch: bool = True) -> click.Command:
    """``command`` with the filters of ``runs list`` that a bulk action
    takes, ``--code``, and the options of a bulk action (``--batch`` too,
    unless the command has its own)."""
    options = [
        click.option(
            "--status",
            multiple=True,
            metavar="STATUS",
            help=f"Only runs in this status (repeat it, or separate with commas): "
            f"{', '.join(STATUSES)}.",
        ),
        click.option("--workflow", metavar="NAME", help="Only runs of this workflow."),
        click.option(
            "--tag", "tags", multiple=True, metavar="TAG", help="Only runs with all these tags."
        ),
        click.option(
            "--where",
            multiple=True,
            metavar="NAME=VALUE",
            help="Only runs whose search attribute matches (as runs list --where).",
        ),
        click.option(
            "--created-after", type=PointInTime(), help="Only runs created at or after WHEN."
        ),
        click.option("--created-before", type=PointInTime(), help="Only runs created before WHEN."),
        click.option("--code", metavar="CODE", help="Only runs whose error has this code."),
        click.option(
            "--top-level",
            is_flag=True,
            help="Only runs without a parent: no child run, fan member or on-error handler's run.",
        ),
        click.option(
            "--id-prefix", metavar="PREFIX", help="Only runs whose id starts with PREFIX."
        ),
        click.option(
            "--dry-run", is_flag=True, help="Count the runs and show the first ids; change nothing."
        ),
        click.option("--yes", is_flag=True, help="Act without asking for a confirmation."),
        *(
            [
                click.option(
                    "--batch",
                    type=click.IntRange(min=1, max=1000),
                    default=100,
                    show_default=True,
                    help="Runs acted on per store write.",
                )
            ]
            if batch
            else []
        ),
        click.option(
            "--operation",
            metavar="NAME",
            help="The operation's name (default: one made of the action and the filters as"
            " given, so that the same command resumes it).",
        ),
    ]
    for option in options:
        command = option(command)
    return command


def _operation(action: BulkAction, given: dict[str, Any]) -> str:
    """The operation's name made of the action and the filters as typed
    (an age such as ``2h`` is kept as typed, so the same command names the
    same operation later)."""
    typed = json.dumps({"action": action, **given}, sort_keys=True, default=str)
    return f"{action}-{hashlib.sha256(typed.encode()).hexdigest()[:16]}"


def _run_bulk(
    action: BulkAction,
    store: str | None,
    namespace: str | None,
    filters: dict[str, Any],
    *,
    dry_run: bool,
    yes: bool,
    batch: int,
    operation: str | None,
    as_json: bool,
    options: dict[str, Any],
) -> None:
    statuses = cast(tuple[RunStatus, ...], names(filters["status"]))
    unknown = [s for s in statuses if s not in STATUSES]
    if unknown:
        raise click.BadParameter(
            f"{unknown[0]!r} is not a status ({', '.join(STATUSES)})", param_hint="'--status'"
        )
    if filters["id_prefix"] == "":
        raise click.BadParameter(
            "give a prefix of one character or more", param_hint="'--id-prefix'"
        )
    url = need_store(store)
    name = operation or _operation(action, {**filters, "namespace": namespace})

    async def main() -> tuple[BulkReport, BulkReport | None]:
        async with opened_client(url) as client:
            where = filters["where"]
            now = client.clock.now()
            selection = RunSelection(
                status=statuses or None,
                workflow=filters["workflow"],
                namespace=namespace,
                tags=names(filters["tags"]),
                created_after=at(filters["created_after"], now),
                created_before=at(filters["created_before"], now),
                search_attributes=(
                    parse_where(where, await stored_types(client.store)) if where else None
                ),
                code=filters["code"],
                top_level=filters["top_level"],
                id_prefix=filters["id_prefix"],
            )
            act = _bulk_method(client, action)
            preview = await act(selection, dry_run=True, operation=name, **options)
            if dry_run or preview.matched == 0:
                return preview, None
            if not yes:
                _show(preview, as_json=False, err=True)
                confirmed = await trio.to_thread.run_sync(
                    lambda: click.confirm(
                        f"{action} {preview.matched} runs?", default=False, err=True
                    )
                )
                if not confirmed:
                    raise CommandError("nothing changed", EXIT_FAILED)
            with progress(preview.matched, f"{action} runs", quiet=as_json) as advance:
                counted = 0

                def advanced(step: BulkProgress) -> None:
                    nonlocal counted
                    for _ in range(step.done - counted):
                        advance()
                    counted = step.done

                report = await act(
                    selection, operation=name, batch_size=batch, on_progress=advanced, **options
                )
            return preview, report

    preview, report = trio.run(main)
    _show(report or preview, as_json=as_json, err=False)


def _bulk_method(client: Client, action: BulkAction) -> Callable[..., Any]:
    return {
        "cancel": client.cancel_many,
        "retry": client.retry_many,
        "terminate": client.terminate_many,
        "prune": client.prune_many,
    }[action]


def _show(report: BulkReport, *, as_json: bool, err: bool) -> None:
    if as_json:
        print_json(
            {
                "action": report.action,
                "operation": report.operation,
                "dry_run": report.dry_run,
                "matched": report.matched,
                "acted": report.acted,
                "skipped": report.skipped,
                "refused": report.refused,
                "first_ids": list(report.first_ids),
                "finished": report.finished,
            }
        )
        return
    lines = []
    if report.dry_run:
        lines.append(f"{report.matched} runs to {report.action} (operation {report.operation})")
    else:
        lines.append(f"{_PAST[report.action]} {report.acted} runs (operation {report.operation})")
    if report.skipped and report.action == "prune":
        lines.append(f"{report.skipped} left alone: their parent has not ended")
    elif report.skipped:
        lines.append(f"{report.skipped} left alone: acted on already by this operation")
    if report.refused:
        lines.append(f"{report.refused} left alone: they changed meanwhile")
    if report.first_ids:
        more = report.matched - len(report.first_ids)
        lines.append(
            "first: " + " ".join(report.first_ids) + (f" (and {more} more)" if more > 0 else "")
        )
    for line in lines:
        click.echo(line, err=err)


def _bulk_command(
    action: BulkAction,
    params: list[click.Parameter],
    one: Callable[..., Any],
    short_help: str,
    doc: str,
) -> click.Command:
    """A command that calls ``one`` (RUN given) with its parameters, or
    does the bulk ``action``."""

    def callback(run_id: str | None, **params: Any) -> None:
        filters = {key: params.pop(key) for key in _FILTERS}
        bulk = {key: params.pop(key) for key in ("dry_run", "yes", "batch", "operation")}
        given = [key for key, value in filters.items() if value not in (None, (), False)]
        if run_id is not None:
            if given or bulk["dry_run"] or bulk["operation"]:
                raise click.UsageError("give RUN, or filters for a bulk action, not both")
            one(run_id=run_id, **params)
            return
        if not given:
            raise click.UsageError(
                f"give RUN, or at least one filter to {action} every run it matches"
                " (--status, --workflow, --tag, --where, --created-after, --created-before,"
                " --code, --top-level, --id-prefix)"
            )
        options: dict[str, Any] = {}
        if action == "cancel":
            options["compensate"] = params["compensate"]
        if action == "terminate":
            options["reason"] = params["reason"]
        if action == "retry" and params["from_seq"] is not None:
            raise click.UsageError("--from-seq retries one RUN; a bulk retry takes none")
        _run_bulk(
            action,
            params["store"],
            params["namespace"],
            filters,
            as_json=params["as_json"],
            options=options,
            **bulk,
        )

    command = click.Command(action, callback=callback, short_help=short_help, help=doc)
    command.params = [
        click.Argument(["run_id"], metavar="[RUN]", required=False),
        *(param for param in params if param.name != "run_id"),
    ]
    return _filter_options(command)


@store_option()
@namespace_option
@click.option("--reason", metavar="TEXT", help="Why, for people: the run's error message.")
@json_option
def _terminate_one(
    run_id: str, store: str | None, namespace: str | None, reason: str | None, as_json: bool
) -> None:
    """Terminate one run, as ``runs terminate RUN`` does."""

    async def terminate(client: Client) -> Any:
        await client.terminate(run_id, reason=reason, namespace=namespace)
        return await client.get(run_id, namespace=namespace)

    run = with_client(store, terminate)
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"terminate requested: {run_line(run)}")


def _prune_command(by_age: click.Command) -> click.Command:
    """``runs prune``: ``by_age`` (the command of ``_runs``) when given ages,
    or the bulk prune of the ended runs the filters match. The two are
    exclusive: an age is no filter, and a dry run or an operation of
    pruning by age would mislead."""

    def callback(**params: Any) -> None:
        filters = {key: params.pop(key) for key in _FILTERS}
        bulk = {key: params.pop(key) for key in ("dry_run", "yes", "operation")}
        namespace = params.pop("namespace")
        given = [key for key, value in filters.items() if value not in (None, (), False)]
        ages = [f"--{name}" for name in _AGES if params[name] is not None]
        if ages and (given or namespace is not None):
            raise click.UsageError(
                f"give ages per status ({', '.join(ages)}) or filters, not both: an age"
                " prunes every ended run of its status older than it; filters choose the"
                " ended runs to prune"
            )
        if ages or not given:
            if bulk["dry_run"] or bulk["operation"] or (namespace is not None and not ages):
                raise click.UsageError(
                    "--dry-run, --operation and --namespace go with filters (--status,"
                    " --workflow, ...); pruning by age has none of them"
                )
            if not ages:
                raise click.UsageError(
                    "give an age for at least one status: --completed, --failed, --cancelled,"
                    " --terminated or --dead (or --events); or filters to prune every ended"
                    " run they match (--status, --workflow, --tag, --where, --created-after,"
                    " --created-before, --code, --top-level, --id-prefix)"
                )
            # --yes is accepted and changes nothing: pruning by age never asks.
            del bulk["yes"]
            by_age.callback(**params)  # type: ignore[misc]
            return
        if params["batch"] > 1000:
            raise click.BadParameter(
                f"{params['batch']} runs per write is over 1000, the most with filters",
                param_hint="'--batch'",
            )
        _run_bulk(
            "prune",
            params["store"],
            namespace,
            filters,
            batch=params["batch"],
            as_json=params["as_json"],
            options={},
            **bulk,
        )

    command = click.Command(
        "prune",
        callback=callback,
        short_help="Delete ended runs older than an age per status, or that filters match.",
        help=inspect.cleandoc(by_age.help or "")
        + "\n\nWith filters instead of ages, it deletes every ended run they match (at"
        " least one filter; --namespace narrows them), with the same rows and blobs, but"
        " never a run whose parent has not ended, in batches (--batch, at most 1000),"
        " after showing the count and the first ids and asking (unless --yes); --dry-run"
        " only shows them. Ages and filters are exclusive. Interrupted (Ctrl-C), the same"
        " command run again deletes the runs that are left.",
    )
    command.params = [
        *(_batch_of_prune(param) if param.name == "batch" else param for param in by_age.params),
        click.Option(
            ["--namespace"], metavar="NAMESPACE", help="With filters: only runs of this namespace."
        ),
    ]
    return _filter_options(command, batch=False)


def _batch_of_prune(param: click.Parameter) -> click.Parameter:
    """``runs prune``'s ``--batch``, saying its bound with filters."""
    batch = copy.copy(param)
    assert isinstance(batch, click.Option)
    batch.help = "Runs deleted per transaction (with filters: at most 1000)."
    return batch


def _replaced(runs_group: click.Group, name: str) -> tuple[list[click.Parameter], Any]:
    command = runs_group.commands[name]
    return command.params, command.callback


def with_bulk(runs_group: click.Group) -> None:
    """Make ``runs cancel``, ``runs retry`` and ``runs prune`` take filters
    too, and add ``runs terminate``."""
    runs_group.add_command(
        _bulk_command(
            "cancel",
            *_replaced(runs_group, "cancel"),
            "Cancel a run, or every run a filter matches.",
            "Cancel RUN, or every pending, running or suspended run the filters match: each"
            " ends cancelled once an engine of the store has interrupted it. A run that has"
            " ended cannot be cancelled (exit status 1).\n\n" + _BULK_HELP,
        )
    )
    runs_group.add_command(
        _bulk_command(
            "retry",
            *_replaced(runs_group, "retry"),
            "Retry a failed or dead run, or every one a filter matches.",
            "Retry RUN, or every failed or dead run the filters match (--code CODE: those"
            " whose error has that code): completed steps are kept, failed ones run again."
            " With --from-seq, RUN, ended in any way, runs again from that seq in place. What"
            " a retry replaces stays in the run's history (runs history RUN).\n\n" + _BULK_HELP,
        )
    )
    runs_group.add_command(
        _bulk_command(
            "terminate",
            list(reversed(_terminate_one.__click_params__)),  # type: ignore[attr-defined]
            _terminate_one,
            "End a run now, or every run a filter matches: no cleanup.",
            "Terminate RUN, or every run the filters match that has not ended: it ends"
            " terminated at once, running nothing more of its body, no compensation and no"
            " cleanup (unlike cancel). The run is cancelling until an engine of the store"
            " ends it. A run that has ended cannot be terminated (exit status 1).\n\n" + _BULK_HELP,
        )
    )
    runs_group.add_command(_prune_command(runs_group.commands["prune"]))


_BULK_HELP: Final = (
    "Without RUN, it acts on every run the filters match (at least one filter), in"
    " batches, after showing the count and the first ids and asking (unless --yes);"
    " --dry-run only shows them. Interrupted (Ctrl-C), the same command run again"
    " resumes the same operation: no run is acted on twice, even one retried that failed"
    " again since. Once it finished, the same command is a new operation."
)
