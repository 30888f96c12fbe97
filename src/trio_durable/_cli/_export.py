"""``trio-durable runs export``: runs' histories written to a folder, one
JSON file each (`Client.export_history`), for the replay tests
(``trio-durable replay``, `trio_durable.testing.replay_all`). It reads the
store and writes only the files, and those only once every history was
read: a run it may not export (encrypted payloads without the codec's
keys) leaves the folder as it was."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Any

import attrs
import click

from .._front._client import Client
from ._apps import load_app
from ._common import json_option, print_json, store_option
from ._run_lists import RunFilters, run_filters
from ._runs import app_option, runs_group, with_client

_PAGE = 500
"""Runs read per page when filters choose them."""


def file_name(run_id: str) -> str:
    """The file a run's history is written to: its id, with every
    character but letters, digits, ``.``, ``_`` and ``-`` escaped as URLs
    escape them (so no id names a path elsewhere), and ``.json``."""
    return urllib.parse.quote(run_id, safe="._-") + ".json"


@runs_group.command("export", short_help="Write runs' histories to files, for replay tests.")
@click.argument("run_ids", metavar="[RUN]...", nargs=-1)
@store_option()
@run_filters
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="The folder to write to (made if missing): one RUN.json per run.",
)
@click.option(
    "--encrypted",
    is_flag=True,
    help="Export payloads that TRIO_DURABLE_CODEC_KEYS does not decrypt as stored, instead"
    " of refusing.",
)
@app_option("The App whose name and registration hash the files record (optional).")
@json_option
def export_command(
    run_ids: tuple[str, ...],
    store: str | None,
    filters: RunFilters,
    out: Path,
    encrypted: bool,
    app_spec: str | None,
    as_json: bool,
) -> None:
    """Export the history of each RUN, or of every run the filters match
    (those of runs list), to --out: one JSON file per run, holding the run,
    its checkpoints (each operation's inputs and outputs) and its run
    records, the app's name and registration hash (with --app), and the
    format's version (docs/changing-workflow-code.md gives its JSON Schema).
    trio-durable replay replays them against new code.

    Payloads are decrypted with the keys of TRIO_DURABLE_CODEC_KEYS. A run
    whose payloads are encrypted and the keys not given is refused (exit
    status 2) and nothing is written, unless --encrypted exports them as
    stored. The store is only read. --namespace applies to RUN too.
    """
    given = [
        name
        for name, value in attrs.asdict(filters, recurse=False).items()
        if name != "namespace" and value not in (None, (), False)
    ]
    if run_ids and given:
        raise click.UsageError("give RUN ids, or filters that choose the runs, not both")
    if not run_ids and not given:
        raise click.UsageError(
            "give RUN ids, or at least one filter (--status, --workflow, --tag, --where, ...)"
        )
    app = load_app(app_spec) if app_spec else None

    async def export(client: Client) -> dict[str, dict[str, Any]]:
        ids = list(dict.fromkeys(run_ids)) or await _matching(client, filters)
        return {
            run_id: await client.export_history(
                run_id, namespace=filters.namespace, encrypted=encrypted
            )
            for run_id in ids
        }

    documents = with_client(store, export, app)
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for run_id, document in documents.items():
        path = out / file_name(run_id)
        path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        files.append(str(path))
    if as_json:
        print_json({"exported": len(files), "files": files})
    else:
        click.echo(f"exported {len(files)} histories to {out}")


async def _matching(client: Client, filters: RunFilters) -> list[str]:
    """The ids of every run ``filters`` match, newest first."""
    arguments = await filters.arguments(client)
    ids: list[str] = []
    cursor = None
    while True:
        page = await client.list_runs(**arguments, limit=_PAGE, cursor=cursor)
        ids += [run.id for run in page.runs]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor
