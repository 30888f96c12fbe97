"""``trio-durable console``: the console (JSON API and pages) over a store,
served by hypercorn until SIGTERM or SIGINT.

It opens a client of the store (and of the broker, for the fleet), serves
`console_app` over it, prints the URL it listens on (on stdout) and a
ready line (on stderr), and stops at the first SIGTERM or SIGINT with exit
status 0. It runs no workflow: engines sharing the store run what its
actions (signal, cancel, retry) ask for.
"""

from __future__ import annotations

import os
from functools import partial

import click
import trio

from .._base._exceptions import UsageError
from .._front._app import App
from .._front._client import open_client
from .._kernel._options import MAX_BODY_LIMIT, ConsoleOptions, token_problem
from .._payloads._codec import PayloadCodec
from .._stores._blob_store import with_blobs_from_env
from ._apps import load_app
from ._codec import CODEC_KEYS_ENV, codec_of
from ._common import (
    EXIT_FAILED,
    CommandError,
    broker_option,
    log_level_option,
    logging_to_stderr,
    need_store,
    say,
    shown,
    store_option,
)
from ._processes import STOP_SIGNALS, serve_until_signalled
from ._values import Seconds, whole

TOKEN_ENV = "TRIO_DURABLE_CONSOLE_TOKEN"
DEFAULTS = ConsoleOptions()


@click.command("console", short_help="Serve the web console and its JSON API over a store.")
@store_option("The store's URL (required).")
@broker_option("The broker's URL, for the fleet page and /api/fleet.")
@click.option(
    "--app", "app_spec", metavar="MODULE:APP", help="The App: queue limits, typed outputs."
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="The port (0: one the system picks).",
)
@click.option(
    "--token",
    metavar="TOKEN",
    help=f"The bearer token actions need (or {TOKEN_ENV}); without one, read-only.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="ORIGIN",
    help="An origin allowed to call the API from a browser (repeat it); none by default.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="HOST",
    help="A Host name (or address) requests may give (repeat it; '*': any); by default"
    " --host, localhost, 127.0.0.1 and ::1. Any other Host is answered 421.",
)
@click.option(
    "--max-body",
    type=whole(1, MAX_BODY_LIMIT),
    default=DEFAULTS.max_body,
    show_default=True,
    metavar="BYTES",
    help="The largest request body taken; a larger one is answered 413.",
)
@click.option(
    "--read-timeout",
    type=Seconds(),
    default=DEFAULTS.read_timeout,
    show_default=True,
    help="Seconds a request's body may take to arrive (then 408).",
)
@click.option(
    "--idle-timeout",
    type=Seconds(),
    default=DEFAULTS.idle_timeout,
    show_default=True,
    help="Seconds a connection may wait for the client: for a request, or within a body.",
)
@click.option(
    "--webhooks/--no-webhooks",
    default=None,
    help="Deliver webhooks (POST /hooks/TOKEN) or not; by default, only with a --token.",
)
@click.option(
    "--codec-keys",
    metavar="KEYRING",
    envvar=CODEC_KEYS_ENV,
    show_envvar=True,
    help="The keyring (id:base64,...) payloads are encrypted with, to show them"
    " decrypted; without it, encrypted payloads are shown as such.",
)
@log_level_option
def console_command(
    store: str | None,
    broker: str | None,
    app_spec: str | None,
    host: str,
    port: int,
    token: str | None,
    cors_origins: tuple[str, ...],
    allowed_hosts: tuple[str, ...],
    max_body: int,
    read_timeout: float,
    idle_timeout: float,
    webhooks: bool | None,
    codec_keys: str | None,
    log_level: str,
) -> None:
    """Serve the console over a store until SIGTERM or SIGINT.

    It prints the URL it listens on; an address it cannot listen on exits
    with status 1. Actions (signal, cancel, retry) need
    the bearer token given with --token or TRIO_DURABLE_CONSOLE_TOKEN;
    without one, the console is read-only (see docs/http-api.md), and
    delivers webhooks only with --webhooks. Only requests whose Host is
    allowed are answered, and bodies are bounded in size and time
    (docs/console.md).
    Payloads encrypted at rest are shown decrypted with --codec-keys or
    TRIO_DURABLE_CODEC_KEYS, and as "encrypted with <key id>" without.
    """
    store_url = need_store(store)
    given = "--token"
    if token is None:
        token = os.environ.get(TOKEN_ENV) or None
        given = TOKEN_ENV
    if token is not None and (problem := token_problem(token)) is not None:
        raise click.UsageError(f"{given} cannot be used: {problem}")
    try:
        options = ConsoleOptions(
            host=host,
            port=port,
            token=token,
            cors_origins=cors_origins,
            allowed_hosts=allowed_hosts or None,
            max_body=max_body,
            read_timeout=read_timeout,
            idle_timeout=idle_timeout,
            webhooks=webhooks,
        )
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None
    app = load_app(app_spec) if app_spec else None
    codec = codec_of(codec_keys, "--codec-keys")
    with logging_to_stderr(log_level):
        try:
            trio.run(partial(_serve, store_url, broker, app, options, codec=codec))
        except* OSError as group:
            # Binding failed (address not local, port taken): one line, not
            # hypercorn's traceback.
            first = _first(group)
            raise CommandError(
                f"cannot listen on {host}:{port}: {first.strerror or first}", EXIT_FAILED
            ) from None


def _first(group: BaseExceptionGroup[OSError]) -> OSError:
    found = group.exceptions[0]
    return _first(found) if isinstance(found, BaseExceptionGroup) else found


async def _serve(
    store: str,
    broker: str | None,
    app: App | None,
    options: ConsoleOptions,
    *,
    codec: PayloadCodec | None = None,
) -> None:
    from ..console import serve_console

    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with (
            open_client(
                store, broker=broker, app=app, codec=codec, **with_blobs_from_env({})
            ) as client,
            trio.open_nursery() as nursery,
        ):
            url = await nursery.start(serve_console, client, options)
            click.echo(url)
            # Nothing to drain: the first signal stops it.
            await serve_until_signalled(
                "console",
                f"{url} (store {shown(store)},"
                f" {'actions need the token' if options.token else 'read-only'},"
                f" webhooks {'on' if options.delivers_webhooks else 'off'})",
                trio.lowlevel.checkpoint,
                "",
                signals,
                1.0,
            )
            nursery.cancel_scope.cancel()
    say("console stopped")
