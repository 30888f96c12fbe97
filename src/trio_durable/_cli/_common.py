"""What every command of ``trio-durable`` shares: the store and broker
options, errors turned into one line and an exit code, and output (tables
and progress for people, one JSON document for scripts).

A command module adds its commands to the group in ``_cli/__init__.py``;
everything here is meant for the commands that come later too.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, TypeVar

import click
from rich.console import Console, Group, RenderableType
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from .._base._exceptions import (
    BreakpointNotFoundError,
    InvalidRunStateError,
    RunConflictError,
    RunNotFoundError,
    StoreError,
    TrioDurableError,
    UnknownWorkflowError,
    UsageError,
    WebhookError,
)
from .._base._urls import mask_url, scrub
from .._brokers._base import BrokerError
from .._kernel._views import plain as plain

# -- exit codes (the table in docs/operations.md) ----------------------------

EXIT_OK: Final = 0
"""The command did what it was asked (a process stopped by SIGTERM or SIGINT
after draining included)."""
EXIT_FAILED: Final = 1
"""The operation failed: an unknown run, workflow, schedule, entity or
handler, a run in a state that forbids it, an update the run rejected, a
simulation seed that failed."""
EXIT_USAGE: Final = 2
"""The command line is wrong: an unknown flag, a malformed value, JSON or
URL, a ``MODULE:APP`` that does not import or is no `App`."""
EXIT_UNREACHABLE: Final = 3
"""The store or the broker cannot be reached or failed."""
EXIT_INTERRUPTED: Final = 130
"""A command other than ``engine`` and ``worker`` was interrupted (Ctrl-C)."""

STORE_ENV: Final = "TRIO_DURABLE_STORE"
BROKER_ENV: Final = "TRIO_DURABLE_BROKER"

_URLS_KEY: Final = "trio_durable.urls"

F = TypeVar("F", bound=Callable[..., Any])


class CommandError(click.ClickException):
    """A command failed: shown as one line on stderr, with its exit code."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(" ".join(message.split()))
        # click declares the code on the class; each error here has its own.
        self.exit_code = exit_code  # type: ignore[misc]


def exit_code_of(exc: BaseException) -> int | None:
    """The exit code for an error of trio-durable, or None for any other."""
    if isinstance(exc, StoreError | BrokerError):
        return EXIT_UNREACHABLE
    if isinstance(
        exc, RunNotFoundError | UnknownWorkflowError | InvalidRunStateError | RunConflictError
    ):
        return EXIT_FAILED
    if isinstance(exc, WebhookError | BreakpointNotFoundError):
        return EXIT_FAILED
    if isinstance(exc, TrioDurableError) and isinstance(exc, LookupError):
        # Something named that is not there (a schedule, an entity, a
        # query's handler), as an unknown run: the operation failed.
        return EXIT_FAILED
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, TrioDurableError):
        return EXIT_FAILED
    return None


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def command_error(exc: BaseException, urls: Sequence[str] = ()) -> CommandError | None:
    """``exc`` (or an exception group of only trio-durable errors, as a
    nursery raises them) as a `CommandError` whose message holds none of the
    secrets of ``urls``, or None if it is something else (a bug, which keeps
    its traceback)."""
    leaves = _leaves(exc)
    codes = [exit_code_of(leaf) for leaf in leaves]
    if not leaves or None in codes:
        return None
    messages: list[str] = []
    for leaf in leaves:
        text = str(leaf) or type(leaf).__name__
        for url in urls:
            # The stores and adapters mask their URLs already; this also
            # catches a secret a client library's message echoes.
            text = scrub(text, url, user_is_secret=url.startswith("nats"))
        if text not in messages:
            messages.append(text)
    return CommandError("; ".join(messages), max(c for c in codes if c is not None))


class DurableGroup(click.Group):
    """A click group whose commands' trio-durable errors become a one-line
    message and an exit code (`exit_code_of`) instead of a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except BaseException as exc:
            error = command_error(exc, ctx.meta.get(_URLS_KEY, ()))
            if error is None:
                raise
            raise error from None


# -- store and broker --------------------------------------------------------


def remember_url(url: str) -> str:
    """Note ``url`` so that error messages of this command scrub its secrets;
    returns it."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        # ``meta`` is one dict shared by a context and all nested in it.
        ctx.meta.setdefault(_URLS_KEY, []).append(url)
    return url


def _remember(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    return None if value is None else remember_url(value)


def store_option(help_text: str = "The store's URL.") -> Callable[[F], F]:
    """``--store URL``, read from ``TRIO_DURABLE_STORE`` when not given.
    The command checks that it is there (`need_store`), with a message that
    names both."""
    return click.option(
        "--store",
        envvar=STORE_ENV,
        show_envvar=True,
        metavar="URL",
        callback=_remember,
        help=help_text,
    )


def need_store(store: str | None) -> str:
    """The store URL, or a usage error naming the flag and the variable."""
    if not store:
        raise click.UsageError(f"no store: give --store URL or set {STORE_ENV}")
    return store


def broker_option(
    help_text: str = "The broker's URL.", default: str | None = None
) -> Callable[[F], F]:
    """``--broker URL``, read from ``TRIO_DURABLE_BROKER`` when not given."""
    return click.option(
        "--broker",
        envvar=BROKER_ENV,
        show_envvar=True,
        metavar="URL",
        default=default,
        show_default=default is not None,
        callback=_remember,
        help=help_text,
    )


def need_broker(broker: str | None) -> str:
    """The broker URL, or a usage error naming the flag and the variable."""
    if not broker:
        raise click.UsageError(f"no broker: give --broker URL or set {BROKER_ENV}")
    return broker


def shown(url: str) -> str:
    """A URL as messages show it: without its secrets."""
    return mask_url(url, user_is_secret=url.startswith("nats"))


def names(values: Sequence[str]) -> tuple[str, ...]:
    """Values of a repeatable option, each of which may also hold several
    comma-separated names (``--groups a,b --groups c``), in order, once each."""
    found: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip()
            if name and name not in found:
                found.append(name)
    return tuple(found)


def json_option(fn: F) -> F:
    """``--json``: print one JSON document instead of tables."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document for scripts."
    )(fn)


def log_level_option(fn: F) -> F:
    """``--log-level``: what the ``trio_durable`` logger shows on stderr."""
    return click.option(
        "--log-level",
        type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
        default="warning",
        show_default=True,
        help="The least severe log records shown on stderr.",
    )(fn)


@contextmanager
def logging_to_stderr(level: str, formatter: logging.Formatter | None = None) -> Iterator[None]:
    """While the block runs, log records of ``level`` and above (the
    engine's, the app's, the client libraries') to stderr, one line each
    with its time (or as ``formatter`` writes them: ``--log-format``,
    `_log_lines`): what a process under a supervisor should write."""
    global _said_as
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        formatter or logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    was, said_as = root.level, _said_as
    root.addHandler(handler)
    root.setLevel(level.upper())
    # The operator's lines (`say`) are records of the same format too.
    _said_as = formatter
    try:
        yield
    finally:
        # Undone for a command run in process (tests, a caller of main()).
        root.removeHandler(handler)
        root.setLevel(was)
        _said_as = said_as


_said_as: logging.Formatter | None = None
"""The formatter `say` writes its lines with, if not plain text."""


# -- output --------------------------------------------------------------------


def say(message: str) -> None:
    """A line for the operator on stderr (readiness, draining, stopping):
    ``trio-durable: <message>``, or, with ``--log-format json``, a record
    of the ``trio_durable`` logger at INFO in that format."""
    if _said_as is None:
        click.echo(f"trio-durable: {message}", err=True)
        return
    record = logging.LogRecord("trio_durable", logging.INFO, __file__, 0, message, None, None)
    click.echo(_said_as.format(record), err=True)


def print_json(document: Any) -> None:
    """The command's one JSON document, on stdout."""
    click.echo(json.dumps(document, indent=2))


def stdout_console() -> Console:
    """A rich console on the current stdout (tests swap it), as wide as the
    terminal, or 120 columns when stdout is not one."""
    out = sys.stdout
    return Console(file=out, width=None if out.isatty() else 120, soft_wrap=False)


_WIDE_KEY: Final = "trio_durable.wide"


def wide_option(fn: F) -> F:
    """``--wide``: tables at their full width, however wide the terminal."""

    def remember(ctx: click.Context, _: click.Parameter, value: bool) -> bool:
        ctx.meta[_WIDE_KEY] = value
        return value

    return click.option(
        "--wide",
        is_flag=True,
        expose_value=False,
        callback=remember,
        help="Draw tables at their full width, folding no cell (lines may pass the"
        " terminal's edge).",
    )(fn)


def print_tables(*tables: RenderableType | str) -> None:
    """Tables (or lines of plain text) on stdout, a blank line between them
    (as wide as they need with ``--wide``)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(_WIDE_KEY):
        # Wide enough for any table: rich pads no line to the console's width.
        console = Console(file=sys.stdout, width=100_000, soft_wrap=False)
    else:
        console = stdout_console()
    for i, drawn in enumerate(tables):
        if i:
            console.print()
        # Plain text is never read as rich markup: a "[x]" in a name stays.
        console.print(Text(drawn) if isinstance(drawn, str) else drawn)


ID_COLUMNS: Final = frozenset(
    {
        "run",
        "runs",
        "id",
        "last run",
        "child / wake",
        "breakpoint",
        "worker",
        "workers",
        "event",
        "schedule",
    }
)
"""Columns whose cells are ids (of runs, events, workers...) or lists of
them, which every
table keeps on one line: an id folded in two (``cli-declined.on`` /
``Error.0``) breaks copying it. A narrow terminal folds the other columns
first; ``--wide`` folds none."""


def table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    no_wrap: Sequence[str] = (),
) -> Group:
    """A table for people: ``title`` (a line of its own, never folded to the
    table's width), a header of ``columns``, ``rows``. Cells of the columns
    named in ``no_wrap`` (short ones: times, counts) and in `ID_COLUMNS`
    keep to one line; the others fold to fit."""
    drawn = Table()
    for column in columns:
        drawn.add_column(column, overflow="fold", no_wrap=column in no_wrap or column in ID_COLUMNS)
    for row in rows:
        drawn.add_row(*(Text(_cell(value)) for value in row))
    return Group(Text(title, style="bold"), drawn)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    return str(value)


def interactive() -> bool:
    """Whether a person watches stderr: progress is drawn only then."""
    return sys.stderr.isatty()


@contextmanager
def progress(total: int, description: str, *, quiet: bool) -> Iterator[Callable[[], None]]:
    """A progress bar of ``total`` items on stderr, drawn only when stderr
    is a terminal and ``quiet`` is false (``--json``); yields the function
    that counts one item done. Lines the command prints on stdout meanwhile
    appear above the bar when stdout is that terminal too."""
    if quiet or not interactive():
        yield lambda: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        # Lines on a stdout that goes elsewhere (a file, a pipe) must stay
        # there, not be drawn above the bar on stderr.
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    )
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


@contextmanager
def counting(description: str, *, quiet: bool) -> Iterator[Callable[[int], None]]:
    """Like `progress` for work whose total is not known ahead (a prune):
    a spinner, the count done so far and the time taken, on stderr when it
    is a terminal and ``quiet`` is false; yields the function that adds to
    the count."""
    if quiet or not interactive():
        yield lambda _: None
        return
    bar = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}: {task.completed:.0f} so far"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    )
    with bar:
        task = bar.add_task(description, total=None)
        yield lambda done: bar.advance(task, done)
