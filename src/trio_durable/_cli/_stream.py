"""``trio-durable stream RUN``: follow a run's stream (`Client.stream`),
one JSON value per line as the run emits it, until the run ends.

Each line is flushed as it is printed, so a pipe (``| jq``) sees every
value at once. With ``--offsets`` a line is ``{"offset": n, "value": v}``,
so a follower that stopped can go on with ``--from-offset n+1``.
"""

from __future__ import annotations

import json
from typing import Any

import click

from .._base._records import TERMINAL_STATUSES
from .._front._client import Client
from ._common import EXIT_FAILED, store_option
from ._runs import namespace_option, with_client
from ._values import whole


@click.command("stream", short_help="Follow a run's stream until the run ends.")
@click.argument("run_id", metavar="RUN")
@store_option()
@namespace_option
@click.option(
    "--from-offset",
    type=whole(0),
    default=0,
    show_default=True,
    help="The first offset to print (one past the last one seen, to go on).",
)
@click.option(
    "--offsets", is_flag=True, help='Print {"offset": n, "value": v} lines, not bare values.'
)
@click.pass_context
def stream_command(
    ctx: click.Context,
    run_id: str,
    store: str | None,
    namespace: str | None,
    from_offset: int,
    offsets: bool,
) -> None:
    """Print the values run RUN emits (ctx.emit), one JSON value per line,
    following the stream until the run ends. Exit status 0 if the run
    completed, 1 if it failed, was cancelled or is dead."""

    async def follow(client: Client) -> str:
        async for offset, value in client.stream(run_id, from_offset, namespace=namespace):
            line: Any = {"offset": offset, "value": value} if offsets else value
            click.echo(json.dumps(line))
        return (await client.get(run_id, namespace=namespace)).status

    status = with_client(store, follow)
    if status != "completed" and status in TERMINAL_STATUSES:
        click.echo(f"run {run_id!r} ended {status}", err=True)
        ctx.exit(EXIT_FAILED)
