"""Runs operated through the ``trio-durable`` command, end to end: an engine
process and a worker process (over RabbitMQ) of examples/ops_app.py, on a
SQLite file and on PostgreSQL, while other ``trio-durable`` processes
migrate the store, start runs, list them, wait for results, signal one,
read a history and a run detail, cancel one, retry one and prune; then
SIGTERM stops the engine, which drains and exits with status 0.

Every command's output is checked: its JSON document, and its table for
people. (The session shown in docs/operations.md is the page's own
transcript, run by tests/test_doc_transcripts.py.)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from cli_processes import CONSOLE_SCRIPT, ROOT, WITHIN, cli_process

APP = "ops_app:app"
"""examples/ops_app.py, found on PYTHONPATH: the commands run in the test's
folder, where the store's file and the flag file are, under short names."""
EXAMPLES = str(ROOT / "examples")


@attrs.define
class Done:
    """What a finished command printed, and its exit status."""

    status: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.status == 0, (self.status, self.out, self.err)
        return json.loads(self.out)

    def error(self) -> str:
        """The one error line of a failed command (no traceback)."""
        assert self.status != 0, self.out
        assert "Traceback" not in self.err, self.err
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        return lines[0]


@attrs.define
class Shell:
    """Runs ``trio-durable`` commands with a store and a broker in the
    environment."""

    env: dict[str, str]
    cwd: Path

    async def __call__(self, *args: str) -> Done:
        environment = {
            k: v for k, v in os.environ.items() if not k.startswith("TRIO_DURABLE_")
        } | self.env
        with trio.fail_after(WITHIN):
            done = await trio.run_process(
                [str(CONSOLE_SCRIPT), *args],
                cwd=self.cwd,
                env=environment,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
        result = Done(done.returncode, done.stdout.decode(), done.stderr.decode())
        assert "Traceback" not in result.err, result.err
        return result


def _table_rows(text: str) -> list[list[str]]:
    """The rows of the rich tables in ``text``, each a list of its cells."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in text.splitlines()
        if line.startswith("│")
    ]


@asynccontextmanager
async def _postgres(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    from servers.postgres import scratch_schema

    async with scratch_schema(real_server("postgres")) as url:
        yield url


@asynccontextmanager
async def _store(
    kind: str, tmp_path: Path, real_server: Callable[[str], str]
) -> AsyncIterator[str]:
    if kind == "sqlite":
        # Relative: the commands and processes run in tmp_path.
        yield "sqlite:///ops.db"
    else:
        async with _postgres(real_server) as url:
            yield url


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
async def test_runs_operated_through_the_command(
    kind: str, tmp_path: Path, real_server: Callable[[str], str]
) -> None:
    broker = real_server("rabbitmq")
    # One that no other test on the broker uses.
    token = secrets.token_hex(3)
    # A namespace, and so a route, of this test's own on the shared broker.
    ns = f"ops-{token}"
    route = f"ops@{ns}"
    engine_id, worker_id = f"engine-{token}", f"worker-{token}"
    async with _store(kind, tmp_path, real_server) as store:
        env = {"TRIO_DURABLE_STORE": store, "TRIO_DURABLE_APP": APP, "PYTHONPATH": EXAMPLES}
        sh = Shell(env, tmp_path)

        # -- the store: no schema yet, then created once --------------------------
        done = await sh("runs", "list")
        assert done.status == 3
        assert "holds no trio-durable store (it has no schema)" in done.error()
        done = await sh("migrate", "--check")
        assert done.status == 1
        assert "`trio-durable migrate` would create it" in done.out
        done = await sh("migrate")
        assert done.status == 0, done.err
        assert re.fullmatch(r".*: created the schema \(version \d+\)\n", done.out), done.out
        done = await sh("migrate", "--json")
        assert done.json()["action"] == "current"

        async with (
            cli_process(
                ["engine", APP, "--store", store, "--broker", broker, "--engine-id", engine_id],
                cwd=tmp_path,
                env={"PYTHONPATH": EXAMPLES},
            ) as engine,
            cli_process(
                ["worker", APP, "--groups", route, "--instance-id", worker_id],
                cwd=tmp_path,
                env={"TRIO_DURABLE_BROKER": broker, "PYTHONPATH": EXAMPLES},
            ) as worker,
        ):
            await engine.wait_for(f"engine {engine_id} ready: app ops")
            await worker.wait_for(f"worker {worker_id} ready")

            # -- start ------------------------------------------------------------------
            starts = {
                "approval": ("approval", '["order-1"]'),
                "doubled": ("doubled", "[21]"),
                "needs": ("needs_file", '["flag.txt"]'),
                "unwanted": ("approval", '["order-2"]'),
                "fan": ("fan_out", "[25]"),
            }
            ids = {key: f"{key}-{token}" for key in starts}
            for key, (workflow, inputs) in starts.items():
                args = ("runs", "start", workflow, "--input", inputs, "--run-id", ids[key])
                done = await sh(*args, "--namespace", ns, "--tag", "cli", "--tag", key)
                assert done.status == 0, done.err
                assert done.out.startswith(f"started: run {ids[key]} ({workflow}, namespace {ns})")
            # Starting an existing id again writes nothing and prints the run.
            started = await sh(
                *("runs", "start", "doubled", "--input", "[21]", "--run-id", ids["doubled"]),
                *("--namespace", ns, "--json"),
            )
            assert started.json()["id"] == ids["doubled"]
            assert started.json()["input"] == [21]

            # -- results: a remote step, a fan, a failure ------------------------------
            done = await sh("runs", "result", ids["doubled"], "--wait", "--json")
            assert (done.json()["status"], done.json()["output"]) == ("completed", 42)
            done = await sh("runs", "result", ids["fan"], "--wait")
            assert done.status == 0, done.err
            assert (
                done.out == f"run {ids['fan']} (fan_out, namespace {ns}) is completed: output 600\n"
            )
            done = await sh("runs", "result", ids["needs"], "--wait")
            assert done.status == 1
            assert f"run {ids['needs']} (needs_file, namespace {ns}) is failed: " in done.out
            assert "[missing_file]" in done.out

            # -- list ---------------------------------------------------------------------
            page = (await sh("runs", "list", "--namespace", ns, "--facets", "--json")).json()
            assert {r["id"] for r in page["runs"]} == set(ids.values())
            assert page["facets"]["completed"] == 2
            assert page["facets"]["failed"] == 1
            assert page["next_cursor"] is None
            created = [r["created_at"] for r in page["runs"]]
            assert created == sorted(created, reverse=True)
            done = await sh("runs", "list", "--namespace", ns, "--facets")
            rows = _table_rows(done.out)
            assert rows[0][:3] == [ids["fan"], "fan_out", "completed"]
            assert {row[0] for row in rows[:5]} == set(ids.values())
            assert ["failed", "1"] in rows
            done = await sh(
                "runs", "list", "--namespace", ns, "--status", "failed", "--tag", "needs"
            )
            assert [row[:3] for row in _table_rows(done.out)] == [
                [ids["needs"], "needs_file", "failed"]
            ]
            first = (await sh("runs", "list", "--namespace", ns, "--limit", "2", "--json")).json()
            assert len(first["runs"]) == 2
            rest = await sh(
                *("runs", "list", "--namespace", ns, "--limit", "10"),
                *("--cursor", first["next_cursor"], "--json"),
            )
            assert [r["id"] for r in first["runs"] + rest.json()["runs"]] == [
                r["id"] for r in page["runs"]
            ]

            # -- signal, history ------------------------------------------------------------
            done = await sh("runs", "signal", ids["approval"], "approve", "--payload", '"ada"')
            assert done.status == 0, done.err
            assert done.out.startswith(f"signal 'approve' sent: run {ids['approval']}")
            done = await sh("runs", "result", ids["approval"], "--wait", "--json")
            assert done.json()["output"] == "order-1 approved by ada"
            history = (await sh("runs", "history", ids["approval"], "--json")).json()
            assert history["run"]["status"] == "completed"
            assert [(e["kind"], e["name"], e["status"]) for e in history["entries"]] == [
                ("signal", "approve", "completed")
            ]
            done = await sh("runs", "history", ids["needs"])
            assert f"Timeline of {ids['needs']}" in done.out
            (entry,) = [row for row in _table_rows(done.out) if row[0] == "1"]
            assert entry[1:4] == ["local", "read_file", "failed"]

            # -- show: the fan folded into one line ---------------------------------------
            detail = (await sh("runs", "show", ids["fan"], "--json")).json()
            (fan,) = detail["fans"]
            assert (fan["size"], fan["name"], fan["counts"]) == (25, "double", {"completed": 25})
            assert len(detail["timeline"]) == 1
            done = await sh("runs", "show", ids["fan"])
            assert "double (fan of 25)" in done.out
            members = await sh("runs", "show", ids["fan"], "--fan", str(fan["first_seq"]))
            assert "members 1..25 of 25" in members.out

            # -- cancel ---------------------------------------------------------------------
            done = await sh("runs", "cancel", ids["unwanted"])
            assert done.status == 0, done.err
            assert done.out.startswith(f"cancel requested: run {ids['unwanted']}")
            done = await sh("runs", "result", ids["unwanted"], "--wait", "--json")
            assert done.status == 1
            assert json.loads(done.out)["status"] == "cancelled"
            # Ended runs take no signal and no cancel; nothing changes.
            done = await sh("runs", "cancel", ids["unwanted"])
            assert done.status == 1
            assert "it cannot be cancelled" in done.error()
            done = await sh("runs", "signal", ids["approval"], "approve")
            assert done.status == 1
            assert "it takes no signals" in done.error()

            # -- retry ----------------------------------------------------------------------
            # The engine reads it from its folder.
            await (trio.Path(tmp_path) / "flag.txt").write_text("granted\n")
            done = await sh("runs", "retry", ids["needs"])
            assert done.status == 0, done.err
            assert done.out.startswith(f"retrying: run {ids['needs']}")
            done = await sh("runs", "result", ids["needs"], "--wait", "--json")
            assert done.json()["output"] == "granted"
            done = await sh("runs", "retry", ids["needs"])
            assert done.status == 1
            assert "only failed or dead runs, or suspended runs waiting" in done.error()

            # -- prune ----------------------------------------------------------------------
            done = await sh("runs", "prune", "--completed", "0s")
            assert done.status == 0, done.err
            assert (
                done.out
                == "pruned 4 runs (completed older than 0s; kept: failed, cancelled, terminated, dead)\n"
            )
            left = (await sh("runs", "list", "--json")).json()
            assert [r["id"] for r in left["runs"]] == [ids["unwanted"]]
            done = await sh("runs", "show", ids["approval"])
            assert done.status == 1
            assert f"no run '{ids['approval']}'" in done.error()

            # -- SIGTERM: the engine and the worker drain and exit 0 ----------------------
            assert await worker.stop(signal.SIGTERM) == 0
            assert await engine.stop(signal.SIGTERM) == 0
        for process, name in ((worker, f"worker {worker_id}"), (engine, f"engine {engine_id}")):
            assert f"trio-durable: {name} draining (SIGTERM), for at most 30 s" in process.lines
            assert f"trio-durable: {name} stopped" in process.lines
            assert "undrained" not in process.output
