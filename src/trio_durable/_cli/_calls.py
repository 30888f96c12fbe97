"""``trio-durable runs query`` and ``runs update``: a run's query and update
handlers called from the command line, through `Client.query` and
`Client.update` (see docs/queries-and-updates.md).

Both need the App (``--app`` or ``TRIO_DURABLE_APP``): the client answers a
query by replaying the run in this process with the workflow's code, and
validates an update the same way before it stores it. A query writes
nothing and needs no engine. An accepted update is stored and applied by
the run's next turn, on whichever engine of the store takes it: the command
waits for that (``--timeout`` bounds the wait; the update stays stored, and
sending it again with its ``--update-id`` returns its outcome).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

import click
import trio

from .._front._client import Client
from ._common import CommandError, F, print_json, store_option
from ._run_views import document
from ._runs import app_option, namespace_option, need_app, with_client
from ._values import JSONArguments


def _args_option(fn: F) -> F:
    """``--args``: a handler's arguments."""
    return click.option(
        "--args",
        "args",
        type=JSONArguments(),
        default="[]",
        show_default=True,
        help="The handler's arguments, as one JSON array.",
    )(fn)


@click.command("query", short_help="Ask a run's query handler; print its answer as JSON.")
@click.argument("run_id", metavar="RUN")
@click.argument("name")
@store_option()
@namespace_option
@app_option("The App that registers the run's workflow (required: the run is replayed here).")
@_args_option
def query_command(
    run_id: str,
    name: str,
    store: str | None,
    namespace: str | None,
    app_spec: str | None,
    args: tuple[Any, ...],
) -> None:
    """Ask RUN's query handler NAME with --args and print its answer, one
    JSON document. The run is replayed in this process up to where its
    history stands (no step runs, nothing is written, no engine is
    needed). A handler the run has not registered by then, or that raises,
    is an error (exit status 1)."""
    app = need_app(app_spec, "registers the run's workflow")
    answer = with_client(store, lambda c: c.query(run_id, name, *args, namespace=namespace), app)
    print_json(document(answer))


@click.command("update", short_help="Apply an update to a run; print its result as JSON.")
@click.argument("run_id", metavar="RUN")
@click.argument("name")
@store_option()
@namespace_option
@app_option("The App that registers the run's workflow (required: the update is validated here).")
@_args_option
@click.option(
    "--update-id",
    metavar="ID",
    help="The update's id: sent again with it, it is not applied twice (made up if not given).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up waiting for an engine to apply it after this long (exit status 1).",
)
def update_command(
    run_id: str,
    name: str,
    store: str | None,
    namespace: str | None,
    app_spec: str | None,
    args: tuple[Any, ...],
    update_id: str | None,
    timeout: float | None,
) -> None:
    """Apply RUN's update handler NAME to --args and print its result, one
    JSON document.

    The update is validated here first (replaying the run): an unknown
    handler, arguments that do not fit or a validator that rejects it
    write nothing (exit status 1, or 2 for arguments). Accepted, it is
    stored and the run woken; an engine of the store applies it in the
    run's next turn, and the command waits for that.
    """
    app = need_app(app_spec, "registers the run's workflow")
    # Made here, so that a wait cut short can say how to get the outcome.
    ident = update_id or f"cli-{secrets.token_hex(8)}"

    async def update(client: Client) -> tuple[bool, Any]:
        with trio.move_on_after(math.inf if timeout is None else timeout):
            return True, await client.update(
                run_id, name, *args, namespace=namespace, update_id=ident
            )
        return False, None

    applied, result = with_client(store, update, app)
    if not applied:
        raise CommandError(
            f"update {ident!r} of run {run_id!r} was not applied within {timeout:g} s (is an"
            f" engine of the store running?); if it was accepted, it stays stored: send it"
            f" again with --update-id {ident} for its outcome"
        )
    print_json(document(result))
