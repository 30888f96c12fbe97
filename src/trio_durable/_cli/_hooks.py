"""``trio-durable breakpoints set|list|clear``, ``trio-durable runs
continue|skip`` and ``trio-durable hooks deliver``: breakpoints and
webhooks through a client of the store (see
docs/webhooks-and-breakpoints.md)."""

from __future__ import annotations

from typing import Any

import click

from .._front._client import Client
from ._common import (
    json_option,
    plain,
    print_json,
    print_tables,
    store_option,
    table,
    wide_option,
)
from ._run_views import document, run_line
from ._runs import runs_group, with_client
from ._values import JSONValue


@click.group("breakpoints", short_help="Set, list and clear breakpoints.")
def breakpoints_group() -> None:
    """Breakpoints pause the runs of a workflow before a step, until
    `trio-durable runs continue` or `runs skip` resumes them.

    Every command reads the store from --store or TRIO_DURABLE_STORE.
    """


@breakpoints_group.command("set", short_help="Pause runs of a workflow before a step.")
@store_option()
@click.option("--workflow", required=True, metavar="NAME", help="The workflow's name.")
@click.option("--step", required=True, metavar="NAME", help="The step's name.")
@json_option
def set_command(store: str | None, workflow: str, step: str, as_json: bool) -> None:
    """Pause every run of --workflow before each --step it has not run yet
    (setting one that is set prints it again)."""
    found = with_client(store, lambda c: c.set_breakpoint(workflow=workflow, step=step))
    if as_json:
        print_json(plain(found))
    else:
        click.echo(f"breakpoint {found.id}: {found.workflow} before {found.step}")


@breakpoints_group.command("list", short_help="List breakpoints and the runs paused at them.")
@store_option()
@wide_option
@json_option
def list_command(store: str | None, as_json: bool) -> None:
    """The breakpoints, oldest first, and the runs paused at one."""

    async def read(client: Client) -> tuple[Any, Any]:
        return await client.breakpoints(), await client.paused_steps()

    found, paused = with_client(store, read)
    if as_json:
        print_json({"breakpoints": plain(found), "paused": plain(paused)})
        return
    print_tables(
        table(
            "breakpoints",
            ["id", "workflow", "step"],
            [(bp.id, bp.workflow, bp.step) for bp in found],
            no_wrap=["id"],
        ),
        table(
            "paused runs",
            ["run", "seq", "workflow", "step", "breakpoint"],
            [(p.run_id, p.seq, p.workflow, p.step, p.breakpoint_id) for p in paused],
            no_wrap=["run", "breakpoint"],
        ),
    )


@breakpoints_group.command("clear", short_help="Remove a breakpoint.")
@click.argument("breakpoint_id", metavar="ID")
@store_option()
def clear_command(breakpoint_id: str, store: str | None) -> None:
    """Remove the breakpoint ID (exit status 1 if there is none). Runs
    paused at it stay paused until continued or skipped."""
    with_client(store, lambda c: c.clear_breakpoint(breakpoint_id))
    click.echo(f"breakpoint {breakpoint_id} cleared")


@runs_group.command("continue", short_help="Resume a run paused at a breakpoint.")
@click.argument("run_id", metavar="RUN")
@store_option()
@json_option
def continue_command(run_id: str, store: str | None, as_json: bool) -> None:
    """Resume RUN, paused at a breakpoint: the step runs. A run that is not
    paused is refused (exit status 1)."""

    async def resume(client: Client) -> Any:
        await client.continue_run(run_id)
        return await client.get(run_id)

    run = with_client(store, resume)
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"continued: {run_line(run)}")


@runs_group.command("skip", short_help="Resume a paused run without running the step.")
@click.argument("run_id", metavar="RUN")
@store_option()
@click.option(
    "--output",
    type=JSONValue(),
    default="null",
    show_default=True,
    help="What the step returns instead, as JSON.",
)
@json_option
def skip_command(run_id: str, store: str | None, output: Any, as_json: bool) -> None:
    """Resume RUN, paused at a breakpoint, without running the step: it is
    recorded as returning --output. A run that is not paused is refused
    (exit status 1)."""

    async def skip(client: Client) -> Any:
        await client.skip_step(run_id, output)
        return await client.get(run_id)

    run = with_client(store, skip)
    if as_json:
        print_json(document(run))
    else:
        click.echo(f"step skipped: {run_line(run)}")


@click.group("hooks", short_help="Deliver webhooks.")
def hooks_group() -> None:
    """Webhooks made by `ctx.webhook`, delivered by token."""


class TokenCommand(click.Command):
    """A command whose argument is a webhook token. Tokens made now never
    begin with ``-``, but older ones may (about 1 in 64), and the parser
    reads such a token as an unknown option: the error says to put it
    after ``--``, which ends the options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise click.UsageError(
                f"{exc.format_message().rstrip('.')} (a TOKEN that begins with '-' goes after '--':"
                f" {ctx.command_path} [OPTIONS] -- TOKEN)",
                ctx,
            ) from None


@hooks_group.command(
    "deliver", cls=TokenCommand, short_help="Deliver a webhook's payload to its run."
)
@click.argument("token")
@store_option()
@click.option(
    "--payload", type=JSONValue(), default="null", show_default=True, help="Its payload, as JSON."
)
def deliver_command(token: str, store: str | None, payload: Any) -> None:
    """Deliver --payload through the webhook TOKEN. An unknown or used
    token, or a run that has ended, is refused (exit status 1).

    Tokens never begin with '-'; one made by an older version may: give
    it after '--', which ends the options (hooks deliver --payload JSON --
    TOKEN).
    """
    with_client(store, lambda c: c.deliver_webhook(token, payload))
    click.echo("delivered")
