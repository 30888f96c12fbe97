"""``trio-durable runs start``, ``runs execute`` and ``runs signal``:
starting runs (and waiting for them), and signalling them, with or
without starting them first (``--start``: `Client.signal_with_start`).

A workflow to start is checked before anything is written, in one of two
ways (`StartSource`):

- with the App (``--app`` or ``TRIO_DURABLE_APP``), against its code: the
  name, and the inputs against the workflow's parameters;
- without it, against what the live workers (and engines with ``serve=``,
  whose embedded worker announces) announce on ``--broker``
  (``TRIO_DURABLE_BROKER``): the name must be one they know, and the
  inputs must fit the parameters they announce for it (those of the
  version each registered last, which the engine that first runs the run
  runs: `check_announced_inputs`). Where the announcers disagree (a
  rollout), inputs that fit any of their signatures are taken, with a note
  on stderr saying which; a worker older than the announced parameters
  counts as a signature any JSON array fits. Engines without ``serve=``
  announce nothing, so a workflow that only they register is started
  with ``--app``.
"""

from __future__ import annotations

import json
import math
from contextlib import suppress
from typing import Any

import attrs
import click
import trio

from .._base._exceptions import InvalidArgumentsError, RunFailed
from .._base._records import TERMINAL_STATUSES, Run
from .._front._app import App
from .._front._client import Client
from .._front._signatures import check_announced_inputs
from ._apps import load_app
from ._common import (
    EXIT_FAILED,
    CommandError,
    F,
    broker_option,
    json_option,
    names,
    print_json,
    shown,
    store_option,
)
from ._run_views import document, run_line
from ._runs import APP_ENV, app_option, namespace_option, with_client
from ._values import JSONArguments, JSONValue


@attrs.define(frozen=True, kw_only=True)
class StartSource:
    """Where a workflow to start is checked: the App, or the announcements
    of the live workers on a broker (then ``app`` is None)."""

    app: App | None
    broker: str | None
    listen: float

    @classmethod
    def of(
        cls, app_spec: str | None, broker: str | None, listen: float, workflow: str
    ) -> StartSource:
        """The App if one is given, else the broker.

        Raises:
          click.UsageError: Neither is given.
        """
        if app_spec:
            return cls(app=load_app(app_spec), broker=None, listen=listen)
        if broker:
            return cls(app=None, broker=broker, listen=listen)
        raise click.UsageError(
            f"give the App that registers {workflow!r} (--app MODULE:APP or set {APP_ENV}),"
            " or a --broker whose live workers announce it"
        )

    async def check(self, client: Client, workflow: str, inputs: tuple[Any, ...]) -> None:
        """Refuse ``workflow`` if no live worker announces it, or ``inputs``
        if they fit no signature announced for it (with the App, starting
        it checks both). Where the announcers disagree (a rollout), say on
        stderr which signatures they announce and which the inputs fit.

        Raises:
          CommandError: (exit 1) No live worker announces it.
          InvalidArgumentsError: (exit 2) The inputs fit no announced
            signature.
        """
        if self.app is not None or self.broker is None:
            return
        # A broker that keeps no announcements (RabbitMQ) gathers them as
        # the workers answer the client's arrival.
        await trio.sleep(self.listen)
        fleet = await client.fleet()
        if workflow not in fleet.workflows:
            known = ", ".join(sorted(fleet.workflows)) or "none"
            raise CommandError(
                f"no live worker on {shown(self.broker)} announces the workflow {workflow!r}"
                f" (announced: {known}); start it with --app MODULE:APP"
            )
        checked = check_announced_inputs(fleet.workers, workflow, inputs)
        if checked is None:
            return  # no announcer says its parameters: any JSON array
        if not checked.fits:
            raise InvalidArgumentsError(checked.refusal(), target=f"workflow {workflow!r}")
        if checked.note:
            click.echo(f"note: {checked.note}", err=True)


def start_options(fn: F) -> F:
    """The flags of a start: where the workflow is checked, its inputs and
    the run's id, namespace and tags."""
    for option in reversed(
        (
            app_option(
                "The App that registers the workflow (its name and inputs are checked);"
                " without it, --broker."
            ),
            broker_option(
                "Without --app: the broker whose live workers must announce the workflow"
                " (and the parameters --input must fit)."
            ),
            click.option(
                "--listen",
                type=click.FloatRange(min=0),
                default=1.0,
                show_default=True,
                help="Without --app: seconds to gather the workers' announcements.",
            ),
            click.option(
                "--input",
                "inputs",
                type=JSONArguments(),
                default="[]",
                show_default=True,
                help="The workflow's positional inputs, as one JSON array.",
            ),
            click.option("--tag", "tags", multiple=True, metavar="TAG", help="A tag (repeat it)."),
        )
    ):
        fn = option(fn)
    return fn


# -- start, execute ------------------------------------------------------------------


@click.command("start", short_help="Start a run of a workflow.")
@click.argument("workflow")
@store_option()
@start_options
@click.option("--run-id", metavar="ID", help="The run's id (starting it again is a no-op).")
@click.option("--namespace", default="default", show_default=True, help="The run's namespace.")
@json_option
def start_command(
    workflow: str,
    store: str | None,
    app_spec: str | None,
    broker: str | None,
    listen: float,
    inputs: tuple[Any, ...],
    tags: tuple[str, ...],
    run_id: str | None,
    namespace: str,
    as_json: bool,
) -> None:
    """Start a run of WORKFLOW with the inputs of --input, and print it.

    An engine of the store runs it. Idempotent by --run-id: a run of that id
    that exists already is printed, and nothing is written. Without --app,
    WORKFLOW must be one that live workers on --broker announce, and the
    inputs must fit the parameters they announce for it (during a rollout,
    those of any of them, with a note saying which).
    """
    source = StartSource.of(app_spec, broker, listen, workflow)

    async def start(client: Client) -> Run:
        await source.check(client, workflow, inputs)
        return await client.start(
            workflow, *inputs, run_id=run_id, namespace=namespace, tags=names(tags)
        )

    handle = with_client(store, start, source.app, source.broker)
    if as_json:
        print_json(document(handle))
    else:
        click.echo(f"started: {run_line(handle)}")


@click.command("execute", short_help="Start a run and wait for its output.")
@click.argument("workflow")
@store_option()
@start_options
@click.option("--run-id", metavar="ID", help="The run's id (a run of it that exists is awaited).")
@click.option("--namespace", default="default", show_default=True, help="The run's namespace.")
@click.option(
    "--follow", is_flag=True, help="Print the run's stream meanwhile, one JSON value a line."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="Give up waiting after this long (exit status 1; the run goes on).",
)
@json_option
@click.pass_context
def execute_command(
    ctx: click.Context,
    workflow: str,
    store: str | None,
    app_spec: str | None,
    broker: str | None,
    listen: float,
    inputs: tuple[Any, ...],
    tags: tuple[str, ...],
    run_id: str | None,
    namespace: str,
    follow: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Start a run of WORKFLOW (as runs start does) and wait until it ends;
    print it with its output, or its error.

    With --follow, the values the run emits (ctx.emit) are printed first,
    one JSON value a line as they come (as trio-durable stream prints
    them). Exit status 0 if the run completed; 1 if it failed, was
    cancelled or is dead, or did not end within --timeout.
    """
    source = StartSource.of(app_spec, broker, listen, workflow)

    async def execute(client: Client) -> tuple[Run, bool]:
        await source.check(client, workflow, inputs)
        handle = await client.start(
            workflow, *inputs, run_id=run_id, namespace=namespace, tags=names(tags)
        )
        ended = False
        with trio.move_on_after(math.inf if timeout is None else timeout):
            if follow:
                async for _, value in client.stream(handle.id, namespace=namespace):
                    click.echo(json.dumps(value))
            # A failed run is printed below, as any other.
            with suppress(RunFailed):
                await client.result(handle.id, namespace=namespace)
            ended = True
        return await client.get(handle.id, namespace=namespace), ended

    run, ended = with_client(store, execute, source.app, source.broker)
    if as_json:
        print_json(document(run))
    else:
        click.echo(run_line(run))
    if not ended:
        raise CommandError(
            f"run {run.id!r} did not end within {timeout:g} s (it is {run.status}; it goes on)"
        )
    if run.status != "completed" and run.status in TERMINAL_STATUSES:
        ctx.exit(EXIT_FAILED)


# -- signal ----------------------------------------------------------------------------


@click.command("signal", short_help="Send a signal to a run (--start: starting it first).")
@click.argument("run_id", metavar="RUN")
@click.argument("name")
@store_option()
@namespace_option
@click.option(
    "--payload", type=JSONValue(), default="null", show_default=True, help="Its payload, as JSON."
)
@click.option(
    "--start",
    "start_workflow",
    metavar="WORKFLOW",
    help="If no run RUN exists, start one of WORKFLOW first (signal-with-start).",
)
@start_options
@json_option
def signal_command(
    run_id: str,
    name: str,
    store: str | None,
    namespace: str | None,
    payload: Any,
    start_workflow: str | None,
    app_spec: str | None,
    broker: str | None,
    listen: float,
    inputs: tuple[Any, ...],
    tags: tuple[str, ...],
    as_json: bool,
) -> None:
    """Send the signal NAME with --payload to RUN. A run waiting for it
    resumes at once; otherwise it keeps the signal for its next wait of that
    name. A run that has ended takes no signal (exit status 1).

    With --start WORKFLOW, a run RUN of WORKFLOW (with --input, --tag, in
    --namespace or "default") is started first if none exists, and gets
    the signal for its first wait of NAME: --app or --broker check WORKFLOW
    as runs start does. A run RUN that exists is only signalled.
    """
    if start_workflow is None:
        extra = [flag for flag, given in (("--input", inputs), ("--tag", tags)) if given]
        if extra:
            raise click.UsageError(f"{' and '.join(extra)} go with --start WORKFLOW")

        async def send(client: Client) -> Run:
            await client.signal(run_id, name, payload, namespace=namespace)
            return await client.get(run_id, namespace=namespace)

        run = with_client(store, send)
    else:
        workflow = start_workflow
        source = StartSource.of(app_spec, broker, listen, workflow)

        async def send_with_start(client: Client) -> Run:
            await source.check(client, workflow, inputs)
            handle = await client.signal_with_start(
                workflow,
                name,
                payload,
                run_id=run_id,
                args=inputs,
                namespace=namespace or "default",
                tags=names(tags),
            )
            return await client.get(handle.id, namespace=namespace)

        run = with_client(store, send_with_start, source.app, source.broker)
    if as_json:
        print_json({"signal": name, "payload": payload, "run": document(run)})
    else:
        click.echo(f"signal {name!r} sent: {run_line(run)}")
