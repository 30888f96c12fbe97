"""``trio-durable deployments set-current|list``: which build of the
workers each workflow's runs go to, and per build its live workers and
open runs, through a client of the store (and of the broker, for the
workers; see docs/deployments.md)."""

from __future__ import annotations

from typing import Any

import click

from .._features.deployments._deployments import Deployment
from .._front._client import Client
from .._front._front_deployments import DeploymentReport, live_workers_of
from ._apps import load_app
from ._common import (
    broker_option,
    json_option,
    plain,
    print_json,
    print_tables,
    store_option,
    table,
    wide_option,
)
from ._runs import app_option, with_client


def _ramp(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """``--ramp 10%`` (or ``10``) as a percentage; out of range is left to
    `set_current_build`, which refuses it with `DeploymentError`."""
    if value is None:
        return None
    try:
        return float(value.strip().removesuffix("%"))
    except ValueError:
        raise click.BadParameter(f"give a percentage such as 10%, not {value!r}") from None


@click.group("deployments", short_help="Set and list the builds workflows' runs go to.")
def deployments_group() -> None:
    """Each workflow's current build, which its new runs go to (and runs of
    an auto_upgrade workflow move to at their next turn), and per build
    its live workers and open runs: a build with none left is drained.

    Every command reads the store from --store or TRIO_DURABLE_STORE.
    """


@deployments_group.command("set-current", short_help="Send a workflow's new runs to a build.")
@click.argument("workflow")
@click.argument("build")
@click.option(
    "--ramp",
    metavar="PERCENT",
    callback=_ramp,
    help="Send only this share of new runs to BUILD (such as 10%); the current build keeps"
    " the rest.",
)
@store_option()
@broker_option("The broker's URL: a workflow live workers announce is known without --app.")
@app_option("The App whose workflows are known without asking the workers.")
@json_option
def set_current_command(
    workflow: str,
    build: str,
    ramp: float | None,
    store: str | None,
    broker: str | None,
    app_spec: str | None,
    as_json: bool,
) -> None:
    """Make BUILD the current build of WORKFLOW (with --ramp, the build that
    takes that share of its new runs)."""
    app = None if app_spec is None else load_app(app_spec)

    async def set_current(client: Client) -> tuple[Deployment, int | None]:
        found = await client.set_current_build(workflow, build, ramp=ramp)
        return found, await live_workers_of(client.broker, build)

    found, workers = with_client(store, set_current, app=app, broker=broker)
    if workers == 0:
        click.echo(
            f"note: no live worker announces build {build}: runs given it wait, blocked,"
            " until one does (trio-durable workers lists the live builds)",
            err=True,
        )
    if as_json:
        print_json(plain(found))
    elif found.ramping is not None:
        click.echo(
            f"{found.workflow}: {found.ramp:g}% of new runs to {found.ramping},"
            f" the rest to {found.current or 'any worker'}"
        )
    else:
        click.echo(f"{found.workflow}: new runs to {found.current}")


def print_deployments(report: DeploymentReport) -> None:
    """``report`` as tables for people."""
    print_tables(
        table(
            "Deployments",
            ["workflow", "current", "ramping", "ramp"],
            [
                [
                    d.workflow,
                    d.current or "-",
                    d.ramping or "-",
                    f"{d.ramp:g}%" if d.ramping else "-",
                ]
                for d in report.deployments
            ],
        )
        if report.deployments
        else "No workflow has a current build.",
        table(
            "Builds",
            ["build", "live workers", "pinned runs", "upgrading runs", "current for", "state"],
            [
                [
                    b.build,
                    b.workers,
                    b.pinned_runs,
                    b.upgrading_runs,
                    [*b.current_for, *(f"{w} ({r:g}%)" for w, r in b.ramping_for.items())],
                    "drained" if b.drained else "open runs",
                ]
                for b in report.builds
            ],
            no_wrap=["build", "state"],
        )
        if report.builds
        else "No build has live workers or open runs.",
    )


@deployments_group.command("list", short_help="List builds: live workers, open runs, drained.")
@store_option()
@broker_option("The broker's URL, for the live workers of each build.")
@wide_option
@json_option
def list_command(store: str | None, broker: str | None, as_json: bool) -> None:
    """Each workflow's deployment, and per build its live workers (with
    --broker), its open runs (pinned and upgrading) and whether it is
    drained (no open run left: its workers may stop)."""

    async def read(client: Client) -> DeploymentReport:
        return await client.deployments()

    report = with_client(store, read, broker=broker)
    if as_json:
        document: dict[str, Any] = report.to_json()
        print_json(document)
    else:
        print_deployments(report)
