"""The ``trio-durable`` command (also ``python -m trio_durable``).

One click group, `cli`; each module of this package adds a command or a
group of commands to it:

- ``_processes``: ``engine MODULE:APP`` and ``worker MODULE:APP``, an engine
  or a worker as a process of its own, until SIGTERM or SIGINT;
- ``_runs``: the ``runs`` group and ``runs show|history|result|cancel|retry|prune``,
  through `open_client` (how they show runs: ``_run_views``; the values they
  read: ``_values``);
- ``_run_lists``: ``runs list|count``, with the filters they share;
- ``_run_starts``: ``runs start|execute|signal`` (``signal --start``:
  signal-with-start), checked against the App or the live workers'
  announcements;
- ``_calls``: ``runs query|update``, a run's handlers called;
- ``_bulk``: ``runs cancel|retry|terminate`` of one run or, with filters,
  of every run they match (bulk actions, resumed when run again);
- ``_fork``: ``runs fork`` (and ``retry`` and ``fork`` at the top too);
- ``_export``: ``runs export``, runs' histories written to files;
- ``_replay``: ``replay``, exported histories replayed against an app's code;
- ``_fleet``: ``workers``, the live fleet and its gaps;
- ``_deployments``: ``deployments set-current|list``, the builds workflows'
  runs go to;
- ``_migrate``: ``migrate``, a store's schema created or upgraded;
- ``_simulate``: ``simulate``, the deterministic simulation;
- ``_console``: ``console``, the web console and its JSON API over a store;
- ``_stream``: ``stream RUN``, a run's stream followed until the run ends;
- ``_schedules``: ``schedules list|show|create|pause|resume|trigger|delete``;
- ``_events``: ``events send|list|show``;
- ``_entities``: ``entities show|call``;
- ``_queues``: ``queues list``, the flow-control queues' depths.

``_common`` holds what they share: the store and broker options, errors
turned into one line and an exit code, tables, JSON and progress. Only this
package imports click and rich: ``import trio_durable`` never does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click

from ._bulk import with_bulk
from ._calls import query_command, update_command
from ._common import EXIT_INTERRUPTED, DurableGroup
from ._console import console_command
from ._deployments import deployments_group
from ._entities import entities_group
from ._events import events_group
from ._export import export_command
from ._fleet import workers_command
from ._fork import fork_command
from ._hooks import breakpoints_group, hooks_group
from ._migrate import migrate_command
from ._processes import engine_command, worker_command
from ._queues import queues_group
from ._replay import replay_command
from ._run_lists import count_command, list_command
from ._run_starts import execute_command, signal_command, start_command
from ._runs import retry_command, runs_group
from ._schedules import schedules_group
from ._simulate import simulate_command
from ._stream import stream_command

PROG_NAME = "trio-durable"


@click.group(
    "trio-durable",
    cls=DurableGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
)
@click.version_option(package_name="trio-durable", prog_name=PROG_NAME)
def cli() -> None:
    """trio-durable: run engines and workers, see and control runs and the fleet.

    Store and broker URLs come from --store and --broker, or from
    TRIO_DURABLE_STORE and TRIO_DURABLE_BROKER. Exit codes: 0 done,
    1 the operation failed, 2 a usage error, 3 the store or broker is
    unreachable (see docs/operations.md).
    """


for runs_command in (
    list_command,
    count_command,
    start_command,
    execute_command,
    signal_command,
    query_command,
    update_command,
    export_command,
):
    runs_group.add_command(runs_command)
# ``runs cancel|retry`` take filters too (bulk actions); ``runs terminate``.
with_bulk(runs_group)
cli.add_command(runs_group)
cli.add_command(schedules_group)
cli.add_command(events_group)
cli.add_command(entities_group)
cli.add_command(queues_group)
cli.add_command(engine_command)
cli.add_command(worker_command)
cli.add_command(workers_command)
cli.add_command(deployments_group)
cli.add_command(migrate_command)
cli.add_command(simulate_command)
cli.add_command(console_command)
cli.add_command(breakpoints_group)
cli.add_command(hooks_group)
# Also at the top: ``trio-durable fork RUN`` and ``trio-durable retry RUN``.
cli.add_command(fork_command)
cli.add_command(retry_command)
cli.add_command(stream_command)
cli.add_command(replay_command)


def main(argv: Sequence[str] | None = None, *, prog_name: str = PROG_NAME) -> int:
    """Run the ``trio-durable`` command; returns its exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Not standalone: an exit status comes back here instead of
        # through sys.exit (`ctx.exit(n)` in a command returns n).
        status = cli.main(args, prog_name=prog_name, standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return EXIT_INTERRUPTED
    except BaseExceptionGroup as group:
        # Trio raises KeyboardInterrupt in whichever task runs when SIGINT
        # comes: in the command's own task it comes out bare (click makes
        # it an Abort), but in another (a client's or a store's watch, a
        # store's thread task) it leaves their nurseries in a group, which
        # would end the command with a traceback and status 1.
        if group.subgroup(KeyboardInterrupt) is None:
            raise
        click.echo(err=True)
        click.echo("Aborted.", err=True)
        return EXIT_INTERRUPTED
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
