"""``trio-durable runs start`` without ``--app``, as a real process, checks
its input against the parameters a live worker on a real NATS server
announces: a mismatch is refused (status 2) with the SQLite file left
byte-identical, and a fitting input starts the run."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path

import trio_durable as td
from cli_families_store import digest
from cli_processes import cli_process


async def test_runs_start_checks_the_input_against_what_a_worker_on_nats_announces(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    broker = real_server("nats")
    token = secrets.token_hex(3)
    # Names of this test's own: other tests' workers share the server.
    workflow = f"book_{token}"
    app = td.App("signatures")

    @app.workflow(name=workflow, group=workflow)
    async def book(ctx: td.Context, room: str, nights: int = 1) -> str:
        return room * nights

    path = tmp_path / "runs.db"
    store = f"sqlite:///{path}"
    async with td.open_client(store):
        pass  # the schema, for the command to find
    start = ["runs", "start", workflow, "--store", store, "--broker", broker, "--listen", "0"]
    async with td.open_worker(app, broker=broker, groups=[workflow], instance_id=f"w-{token}"):
        before = digest(path)
        async with cli_process([*start, "--input", '["101", "2"]']) as refused:
            assert await refused.exited() == 2
        assert refused.lines[-1] == (
            f"Error: workflow {workflow!r}: input 'nights' must be an integer, not a string"
            f' ("2") (announced: {workflow}(room: string, nights: integer = ...))'
        )
        assert digest(path) == before
        async with cli_process([*start, "--input", '["101", 2]', "--run-id", "b-1"]) as started:
            assert await started.exited() == 0, started.output
        assert started.lines[-1].startswith(f"started: run b-1 ({workflow}, namespace default)")
    async with td.open_client(store) as client:
        assert json.loads((await client.get("b-1")).input) == ["101", 2]
