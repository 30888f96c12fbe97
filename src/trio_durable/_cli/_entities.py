"""``trio-durable entities show|call``: one key of a keyed entity, its
state read (`Client.entity_state`) or a handler called (`Client.entity`;
see docs/entities.md).

Both need the App (``--app`` or ``TRIO_DURABLE_APP``): it says which
entities there are, their key type (a KEY on the command line is read as
an int for an entity keyed by int) and their handlers. A shared handler
runs here, on the state as stored; an exclusive one is a run that an
engine of the store takes, one call per key at a time, and the command
waits for its result.
"""

from __future__ import annotations

import json
import math
from typing import Any

import click
import trio

from .._front._app import App
from .._front._client import Client
from ._common import EXIT_USAGE, CommandError, print_json, store_option
from ._run_views import document
from ._runs import app_option, need_app, with_client
from ._values import JSONArguments


@click.group("entities", short_help="Read and call keyed entities.")
def entities_group() -> None:
    """Read the state of an entity's key, and call its handlers.

    Every command reads the store from --store or TRIO_DURABLE_STORE and
    takes the App from --app or TRIO_DURABLE_APP. An entity or a handler
    the App does not have is an error (exit status 1); a key not of the
    entity's key type, or arguments that do not fit, a usage error (exit
    status 2). Either writes nothing.
    """


def _entity_key(app: App, name: str, key: str) -> Any:
    """KEY as the entity takes it (an int for an entity keyed by int).

    Raises:
      UnknownEntityError: The App has no entity ``name`` (exit status 1).
      CommandError: (exit 2) KEY is no int for an entity keyed by int.
    """
    if app.get_entity(name).key_type is int:
        try:
            return int(key)
        except ValueError:
            raise CommandError(f"entity {name!r} takes int keys, not {key!r}", EXIT_USAGE) from None
    return key


@entities_group.command("show", short_help="The state of one key of an entity, as JSON.")
@click.argument("name")
@click.argument("key")
@store_option()
@app_option("The App that registers the entity (required).")
def show_command(name: str, key: str, store: str | None, app_spec: str | None) -> None:
    """Print the state of KEY of the entity NAME as stored now, one JSON
    document (a key no call changed yet has the state a new instance has).
    Nothing is called and nothing is written."""
    app = need_app(app_spec, f"registers the entity {name!r}")
    typed = _entity_key(app, name, key)

    async def read(client: Client) -> Any:
        state = await client.entity_state(name, typed)
        return json.loads(app.get_entity(name).dump_state(state))

    print_json(with_client(store, read, app))


@entities_group.command("call", short_help="Call a handler of one key of an entity.")
@click.argument("name")
@click.argument("key")
@click.argument("handler")
@store_option()
@app_option("The App that registers the entity (required).")
@click.option(
    "--args",
    type=JSONArguments(),
    default="[]",
    show_default=True,
    help="The handler's arguments, as one JSON array.",
)
@click.option(
    "--call-id",
    metavar="ID",
    help="An exclusive call's run id: called again with it, it runs once.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up waiting for an exclusive call's result after this long (exit status 1).",
)
def call_command(
    name: str,
    key: str,
    handler: str,
    store: str | None,
    app_spec: str | None,
    args: tuple[Any, ...],
    call_id: str | None,
    timeout: float | None,
) -> None:
    """Call HANDLER of KEY of the entity NAME with --args and print its
    result, one JSON document. A shared handler runs here on the state as
    stored; an exclusive one runs as a run (entity:NAME) that an engine of
    the store takes after the key's earlier exclusive calls, and the
    command waits for it."""
    app = need_app(app_spec, f"registers the entity {name!r}")
    typed = _entity_key(app, name, key)

    async def call(client: Client) -> tuple[bool, Any]:
        bound = getattr(client.entity(name, typed, call_id=call_id), handler)
        with trio.move_on_after(math.inf if timeout is None else timeout):
            return True, await bound(*args)
        return False, None

    done, result = with_client(store, call, app)
    if not done:
        again = f" (call it again with --call-id {call_id} for its result)" if call_id else ""
        raise CommandError(
            f"the call of {handler!r} on {name}[{key}] did not end within {timeout:g} s"
            f" (is an engine of the store running?){again}"
        )
    print_json(document(result))
