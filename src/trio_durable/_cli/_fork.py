"""``trio-durable runs fork RUN --from-seq N`` (also ``trio-durable fork``):
a new run that reuses a run's recorded results before the seq and executes
from there, through `Client.fork` (``runs retry --from-seq`` is in
``_runs``; docs/fork-and-retry.md)."""

from __future__ import annotations

import click

from .._base._bounds import MAX_INTEGER
from .._front._client import Client
from .._front._handle import RunHandle
from ._common import json_option, print_json, store_option
from ._run_views import document, run_line
from ._runs import namespace_option, runs_group, with_client
from ._values import whole


@runs_group.command("fork", short_help="Start a new run from a seq of a run's history.")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--from-seq",
    "from_seq",
    type=whole(-MAX_INTEGER),
    required=True,
    help="The first seq to execute anew (1: everything; see `runs history`).",
)
@click.option("--new-run-id", "new_run_id", help="The fork's id (default: RUN.fork.N).")
@store_option()
@namespace_option
@json_option
def fork_command(
    run_id: str,
    from_seq: int,
    new_run_id: str | None,
    store: str | None,
    namespace: str | None,
    as_json: bool,
) -> None:
    """Fork RUN from --from-seq: a new run of the same workflow, version,
    namespace, input and tags that reuses RUN's recorded results before the
    seq and executes from there, on an engine of the store. RUN itself is
    not changed, whatever its status. A seq out of range, inside a fan or
    after an operation that has not settled exits 2; an id that is taken
    exits 1."""

    async def fork(client: Client) -> RunHandle[object]:
        return await client.fork(
            run_id, from_seq=from_seq, new_run_id=new_run_id, namespace=namespace
        )

    run = with_client(store, fork)
    if as_json:
        print_json({"forked_from": run_id, "from_seq": from_seq, "run": document(run)})
    else:
        click.echo(f"forked {run_id} from seq {from_seq}: {run_line(run)}")
