"""``trio-durable engine`` and ``trio-durable worker``: an engine or a worker
as a process of its own, until SIGTERM or SIGINT.

Both print one line on stderr when they are ready (``engine <id> ready``,
``worker <id> ready``), which supervisors and tests wait for. The first
SIGTERM or SIGINT makes the process drain: an engine waits for
`Engine.drain`, a worker until no step is in flight, each for at most
``--drain-timeout`` seconds; a second signal cuts the wait short. Then it
leaves its `open_engine` or `open_worker` block, which gives back the
leases of the runs still executing (an engine) or returns the unfinished
tasks to the broker and withdraws the announcement (a worker), and the
process exits with status 0.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import trio

from .._base._exceptions import UsageError
from .._base._records import DEFAULT_TRACEBACK_LIMIT
from .._front._app import App
from .._front._health import Readiness, engine_readiness, serve_http_face
from .._front._open_worker import open_worker
from .._kernel._builds import check_build_id
from .._kernel._definitions import remote_groups
from .._kernel._options import DEFAULT_MAX_DELIVERIES, ConsoleOptions, token_problem
from .._payloads._blobs import DEFAULT_BLOB_THRESHOLD
from .._process._open_engine import open_engine
from .._stores._blob_store import BLOBS_ENV
from .._stores._versions import refuse_older
from ._apps import load_app
from ._codec import env_codec
from ._collector import collector, gc_option
from ._common import (
    EXIT_USAGE,
    CommandError,
    F,
    broker_option,
    log_level_option,
    logging_to_stderr,
    names,
    need_broker,
    need_store,
    say,
    shown,
    store_option,
)
from ._config_file import config_option
from ._engine_flags import MAX_CONCURRENCY, default_id, engine_option_flags
from ._http_face import http_option
from ._log_lines import formatter, log_format_option
from ._signing_env import signing_from_env
from ._tracing_env import tracer_provider
from ._values import whole

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

STOP_SIGNALS = _STOP_SIGNALS
"""The signals that stop a process of the command (``console`` too)."""


async def _next_signal(signals: AsyncIterator[int]) -> str:
    async for signum in signals:
        return signal.Signals(signum).name
    raise AssertionError("a signal receiver never ends")  # pragma: no cover


async def _drain(
    wait: Callable[[], Awaitable[None]], signals: AsyncIterator[int], seconds: float
) -> str | None:
    """Wait for ``wait`` for at most ``seconds`` or until the next signal;
    returns None if it finished, else why it was cut short."""
    cut_short: str | None = f"it did not finish within {seconds:g} s"
    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:

            async def finish() -> None:
                nonlocal cut_short
                await wait()
                cut_short = None
                nursery.cancel_scope.cancel()

            async def interrupt() -> None:
                nonlocal cut_short
                cut_short = f"{await _next_signal(signals)} came while draining"
                nursery.cancel_scope.cancel()

            nursery.start_soon(finish)
            nursery.start_soon(interrupt)
    return cut_short


def drain_timeout_option(help_text: str) -> Callable[[F], F]:
    """``--drain-timeout SECONDS`` (default 30): how long the first SIGTERM
    or SIGINT waits for `_drain` before the process stops anyway."""
    return click.option(
        "--drain-timeout",
        type=click.FloatRange(min=0),
        default=30.0,
        show_default=True,
        help=help_text,
    )


def _list(values: Sequence[str]) -> str:
    return ", ".join(values) or "none"


def tracing_option(fn: F) -> F:
    """``--tracing``: OpenTelemetry spans, the SDK configured from the
    ``OTEL_*`` environment variables (`_tracing_env`)."""
    option = click.option(
        "--tracing",
        is_flag=True,
        help="Send OpenTelemetry spans, the SDK configured from the OTEL_* environment"
        " variables (OTEL_TRACES_EXPORTER otlp, console or none; OTEL_EXPORTER_OTLP_ENDPOINT;"
        " OTEL_SERVICE_NAME). Needs the otel-sdk extra.",
    )
    wrapped: F = option(fn)
    return wrapped


@contextmanager
def traced(tracing: bool, service: str) -> Iterator[TracerProvider | bool]:
    """The ``tracing`` option of `open_engine` or `open_worker`: an SDK
    tracer provider from the environment with ``--tracing``, else False."""
    if not tracing:
        yield False
        return
    with tracer_provider(service) as provider:
        yield provider


# -- engine --------------------------------------------------------------------


def unserved_groups(app: App, broker: str, serve: Sequence[str]) -> list[str]:
    """The groups of ``app``'s remote steps and remote workflows that no
    process can run: on the in-process ``memory://`` broker, those the
    engine does not ``--serve`` itself (on any other broker, workers of
    other processes may serve them: none)."""
    if broker.partition("://")[0].lower() != "memory":
        return []
    return list(remote_groups(app, serve))


def _refuse_unserved(app: App, broker: str, serve: Sequence[str]) -> None:
    missing = unserved_groups(app, broker, serve)
    if missing:
        groups = ",".join(missing)
        raise CommandError(
            f"app {app.name!r} has remote steps or remote workflows of the groups {groups},"
            f" and nothing runs them on the broker {broker}, which lives inside this process:"
            f" serve them in the engine (--serve {groups}), or give the broker their workers"
            " use (--broker amqp://... or nats://...)",
            EXIT_USAGE,
        )


@click.command("engine", short_help="Run an engine process until SIGTERM or SIGINT.")
@config_option("engine")
@click.argument("app_spec", metavar="MODULE:APP")
@store_option("The store's URL (required).")
@broker_option("The broker's URL, for remote steps.", default="memory://")
@engine_option_flags
@drain_timeout_option("Seconds to drain after SIGTERM or SIGINT before stopping.")
@click.option(
    "--migrate",
    is_flag=True,
    help="Upgrade a store whose schema is older than this trio-durable's (as `trio-durable"
    " migrate` does) instead of refusing it; each step is logged at WARNING.",
)
@http_option("its store and broker answer, and it is not draining")
@click.option(
    "--console",
    "with_console",
    is_flag=True,
    help="Serve the console (its pages and JSON API) on the --http address too.",
)
@click.option(
    "--token",
    "console_token",
    metavar="TOKEN",
    envvar="TRIO_DURABLE_CONSOLE_TOKEN",
    show_envvar=True,
    help="The bearer token the console's actions need (with --console); without one, read-only.",
)
@tracing_option
@gc_option
@log_level_option
@log_format_option
def engine_command(
    app_spec: str,
    store: str | None,
    broker: str,
    drain_timeout: float,
    migrate: bool,
    http_address: tuple[str, int] | None,
    with_console: bool,
    console_token: str | None,
    tracing: bool,
    gc_thresholds: tuple[int, ...] | None,
    log_level: str,
    log_format: str,
    **options: Any,
) -> None:
    """Run an engine for the App MODULE:APP until SIGTERM or SIGINT.

    MODULE is a dotted module name (found from the current directory first)
    or a path to a .py file; APP is the name of its td.App (default: app).
    With TRIO_DURABLE_CODEC_KEYS set (a keyring, id:base64 pairs, current
    key first), payloads are kept encrypted in the store.

    With TRIO_DURABLE_SIGNING_KEYS set (id:base64 pairs, the current key
    first), tasks and results on the broker are signed and checked.

    A SQLite or PostgreSQL store whose schema is older than this
    trio-durable's is refused (exit status 3) unless --migrate is given:
    upgrade it on purpose, with `trio-durable migrate`, before the new
    release's engines start.
    """
    store = need_store(store)
    console = _console_options(http_address, with_console, console_token)
    app = load_app(app_spec)
    _refuse_unserved(app, broker, options["serve"])
    signing = signing_from_env()
    if not migrate:
        trio.run(refuse_older, store, "`trio-durable engine` without --migrate")
    with (
        logging_to_stderr(log_level, formatter(log_format)),
        collector(gc_thresholds) as collected,
        traced(tracing, "trio-durable-engine") as provider,
    ):
        trio.run(
            _serve_engine,
            app,
            {
                "store": store,
                "broker": broker,
                # Those of open_engine's options that have a flag (see
                # engine_option_flags).
                **options,
                "codec": env_codec(),
                "signing": signing,
                "tracing": provider,
            },
            drain_timeout,
            collected,
            http_address,
            console,
        )


def _console_options(
    http_address: tuple[str, int] | None, with_console: bool, token: str | None
) -> ConsoleOptions | None:
    """The console's settings on the ``--http`` address, with
    ``--console``."""
    if not with_console:
        if token is not None and os.environ.get("TRIO_DURABLE_CONSOLE_TOKEN") != token:
            raise click.UsageError("--token is the console's: give --console with it")
        return None
    if http_address is None:
        raise click.UsageError("--console is served on the --http address: give --http too")
    if token is not None and (problem := token_problem(token)) is not None:
        raise click.UsageError(f"the console's token cannot be used: {problem}")
    host, port = http_address
    return ConsoleOptions(host=host, port=port, token=token)


async def _serve_engine(
    app: App,
    options: dict[str, Any],
    drain_timeout: float,
    collected: str,
    http_address: tuple[str, int] | None = None,
    console_options: ConsoleOptions | None = None,
) -> None:
    # The receiver is open before the engine: a signal that comes while it
    # opens is kept, and the engine drains as soon as it is open.
    with trio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        async with open_engine(app, **options) as engine, trio.open_nursery() as nursery:
            readiness = engine_readiness(engine)
            http = ""
            if http_address is not None:
                console = None
                if console_options is not None:
                    from .._console import console_app

                    console = console_app(
                        engine, console_options, allowed_hosts=console_options.hosts
                    )
                url = await nursery.start(
                    serve_http_face, readiness, engine.metrics, http_address, console
                )
                http = f", http {url}" + ("" if console is None else " (with the console)")
            await _serve_until_signalled(
                f"engine {engine.engine_id}",
                f"app {app.name}, store {shown(options['store'])},"
                f" broker {shown(options['broker'])}, serving {_list(options['serve'])},"
                f" {collected}{http}",
                engine.drain,
                "its runs' leases are given back",
                signals,
                drain_timeout,
                readiness,
            )
            nursery.cancel_scope.cancel()
        say(f"engine {engine.engine_id} stopped")


async def _serve_until_signalled(
    name: str,
    ready: str,
    drain: Callable[[], Awaitable[None]],
    undrained: str,
    signals: AsyncIterator[int],
    drain_timeout: float,
    readiness: Readiness | None = None,
) -> None:
    """Say the process is ready, wait for SIGTERM or SIGINT, then drain for
    at most ``drain_timeout`` seconds (see `_drain`); ``readiness`` (its
    `/readyz`) says it is not ready from the signal on."""
    say(f"{name} ready: {ready}")
    received = await _next_signal(signals)
    if readiness is not None:
        readiness.draining = True
    say(f"{name} draining ({received}), for at most {drain_timeout:g} s")
    cut_short = await _drain(drain, signals, drain_timeout)
    if cut_short is not None:
        say(f"{name} stops undrained ({cut_short}): {undrained}")


# -- worker --------------------------------------------------------------------


@click.command("worker", short_help="Run a worker process until SIGTERM or SIGINT.")
@config_option("worker")
@click.argument("app_spec", metavar="MODULE:APP")
@broker_option("The broker's URL (required; not memory://).")
@click.option(
    "--groups",
    multiple=True,
    metavar="GROUP",
    help="A group route to serve, GROUP or GROUP@NAMESPACE (repeat it, or separate with commas).",
)
@click.option(
    "--concurrency",
    type=whole(1, MAX_CONCURRENCY),
    default=16,
    show_default=True,
    help="Tasks run at once.",
)
@click.option(
    "--capabilities",
    multiple=True,
    metavar="NAME",
    help="What it offers to steps with requires= (repeat it, or separate with commas).",
)
@click.option("--instance-id", metavar="ID", help="Its id in announcements; unique per worker.")
@click.option(
    "--build-id",
    metavar="ID",
    help="The build it announces and takes the tasks of (default: the app's registration hash).",
)
@click.option("--heartbeat", type=float, default=5.0, show_default=True, help="Seconds.")
@click.option(
    "--ttl", type=float, default=15.0, show_default=True, help="Seconds an announcement lives."
)
@click.option(
    "--max-deliveries",
    type=int,
    default=DEFAULT_MAX_DELIVERIES,
    show_default=True,
    help="Deliveries of one task after which it is failed as poison.",
)
@click.option(
    "--traceback-limit",
    type=whole(0),
    default=DEFAULT_TRACEBACK_LIMIT,
    show_default=True,
    help="Characters of a failed step's traceback sent with its result (0: none).",
)
@click.option("--seed", type=int, help="Seeds its random source (its default id, jitter).")
@click.option(
    "--blobs",
    metavar="DIR",
    envvar=BLOBS_ENV,
    show_envvar=True,
    help="The engines' blob directory, for payloads longer than --blob-threshold.",
)
@click.option(
    "--blob-threshold",
    type=whole(1),
    default=DEFAULT_BLOB_THRESHOLD,
    show_default=True,
    help="Characters over which a result's payload goes to --blobs.",
)
@drain_timeout_option("Seconds to finish the steps in flight after SIGTERM or SIGINT.")
@http_option("its broker answers, and it is not draining")
@tracing_option
@gc_option
@log_level_option
@log_format_option
def worker_command(
    app_spec: str,
    broker: str | None,
    groups: tuple[str, ...],
    concurrency: int,
    capabilities: tuple[str, ...],
    instance_id: str | None,
    build_id: str | None,
    heartbeat: float,
    ttl: float,
    max_deliveries: int,
    traceback_limit: int,
    seed: int | None,
    blobs: str | None,
    blob_threshold: int,
    drain_timeout: float,
    http_address: tuple[str, int] | None,
    tracing: bool,
    gc_thresholds: tuple[int, ...] | None,
    log_level: str,
    log_format: str,
) -> None:
    """Run a worker for the remote steps of MODULE:APP until SIGTERM or SIGINT.

    MODULE and APP are as for `trio-durable engine`; so is
    TRIO_DURABLE_SIGNING_KEYS.
    """
    broker = need_broker(broker)
    if broker.partition("://")[0] == "memory":
        raise CommandError(
            "a worker process needs a broker that other processes reach (amqp://, nats://):"
            " the memory broker lives inside one process (use `engine --serve` there)",
            EXIT_USAGE,
        )
    if not names(groups):
        raise click.UsageError("give the group routes to serve: --groups GROUP")
    if build_id is not None:
        try:
            check_build_id(build_id, "--build-id")
        except UsageError as exc:
            raise click.BadParameter(str(exc), param_hint="--build-id") from None
    app = load_app(app_spec)
    signing = signing_from_env()
    with (
        logging_to_stderr(log_level, formatter(log_format)),
        collector(gc_thresholds) as collected,
        traced(tracing, "trio-durable-worker") as provider,
    ):
        trio.run(
            _serve_worker,
            app,
            {
                "broker": broker,
                "groups": names(groups),
                "concurrency": concurrency,
                "capabilities": names(capabilities),
                "instance_id": instance_id or default_id("worker"),
                "build_id": build_id,
                "heartbeat": heartbeat,
                "ttl": ttl,
                "max_deliveries": max_deliveries,
                "traceback_limit": traceback_limit,
                "seed": seed,
                "blobs": blobs,
                "blob_threshold": blob_threshold,
                "signing": signing,
                "tracing": provider,
            },
            drain_timeout,
            collected,
            http_address,
        )


async def _serve_worker(
    app: App,
    options: dict[str, Any],
    drain_timeout: float,
    collected: str,
    http_address: tuple[str, int] | None = None,
) -> None:
    with trio.open_signal_receiver(*_STOP_SIGNALS) as signals:
        async with open_worker(app, **options, http=http_address) as worker:
            http = "" if worker.http_url is None else f", http {worker.http_url}"
            await _serve_until_signalled(
                f"worker {worker.instance_id}",
                f"app {app.name}, broker {shown(options['broker'])},"
                f" groups {_list(worker.routes)}, capabilities {_list(options['capabilities'])},"
                f"{'' if options['build_id'] is None else f' build {worker.build_id},'}"
                f" {collected}{http}",
                worker.wait_idle,
                "the tasks of its unfinished steps go back to the broker",
                signals,
                drain_timeout,
                worker.readiness,
            )
        say(f"worker {worker.instance_id} stopped")


serve_until_signalled = _serve_until_signalled
"""`_serve_until_signalled`, for the other commands that serve until
signalled (``console``)."""
