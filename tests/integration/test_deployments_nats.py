"""Deployments across real processes: an engine and two workers (builds A
and B) as ``trio-durable`` processes on a SQLite file and NATS.

Pinned runs started while A is current finish on A after B becomes
current, while new runs go to B; an auto-upgrading run started on A moves
to B at its next turn; with B ramped to 25%, about a quarter of 400 new
runs go to B; and ``deployments list`` shows A drained once its runs end,
with its worker still live."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final

import trio

import trio_durable as td
from cli_processes import WITHIN, CliProcess, cli_process

HERE: Final = Path(__file__).resolve().parent
PINNED: Final = 5
RAMPED: Final = 400


async def first_step_done(client: td.Client, run_ids: list[str], namespace: str) -> None:
    """Once each run's first step completed (polled: the engine process
    writes them)."""
    with trio.fail_after(WITHIN):
        for run_id in run_ids:
            while True:
                run = await client.get(run_id, namespace=namespace)
                found = await client.store.get_checkpoints(run.id, 1, 1)
                if found and found[0].status == "completed":
                    break
                await trio.sleep(0.05)


async def listing(args: list[str]) -> str:
    """What ``trio-durable deployments list ARGS`` prints."""
    async with cli_process(["deployments", "list", *args]) as process:
        assert await process.exited() == 0, process.output
    return process.output


def logs(processes: dict[str, CliProcess]) -> str:
    return "\n".join(f"--- {name}:\n{p.output}" for name, p in processes.items())


async def test_pinned_runs_finish_on_their_build_as_new_runs_go_to_the_next_over_nats(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    broker = real_server("nats")
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    namespace = f"dp{secrets.token_hex(3)}"
    processes: dict[str, CliProcess] = {}
    async with AsyncExitStack() as stack:
        processes["engine"] = await stack.enter_async_context(
            cli_process(
                ["engine", "deploy_app:app", "--store", store, "--broker", broker,
                 "--blocked-recheck", "1"],
                cwd=HERE,
            )
        )  # fmt: skip
        for build in ("A", "B"):
            processes[build] = await stack.enter_async_context(
                cli_process(
                    ["worker", "deploy_app:app", "--broker", broker, "--groups", f"g@{namespace}",
                     "--build-id", build, "--instance-id", f"worker-{build}",
                     "--heartbeat", "1", "--ttl", "3"],
                    cwd=HERE,
                    env={"DEPLOY_BUILD": build},
                )
            )  # fmt: skip
        for process in processes.values():
            await process.wait_for(" ready")
        client = await stack.enter_async_context(td.open_client(store, broker=broker))
        try:
            for workflow in ("pinned_order", "upgrading_order", "quick"):
                await client.set_current_build(workflow, "A")
            pinned = [f"p{i}" for i in range(PINNED)]
            for run_id in pinned:
                await client.start("pinned_order", run_id=run_id, namespace=namespace)
            await client.start("upgrading_order", run_id="u1", namespace=namespace)
            await first_step_done(client, [*pinned, "u1"], namespace)

            report = await client.deployments()
            [a] = [b for b in report.builds if b.build == "A"]
            assert (a.workers, a.pinned_runs, a.upgrading_runs, a.drained) == (
                ("worker-A",),
                PINNED,
                1,
                False,
            )

            # B becomes current: new runs go there, pinned ones stay on A.
            for workflow in ("pinned_order", "upgrading_order"):
                await client.set_current_build(workflow, "B")
            await client.start("pinned_order", run_id="new", namespace=namespace)
            for run_id in [*pinned, "u1", "new"]:
                await client.signal(run_id, "go", True, namespace=namespace)
            with trio.fail_after(WITHIN):
                outputs = {
                    run_id: await client.result(run_id, namespace=namespace)
                    for run_id in [*pinned, "u1", "new"]
                }
            assert outputs == {
                **{run_id: ["A", "A"] for run_id in pinned},
                "u1": ["A", "B"],
                "new": ["B", "B"],
            }

            # A ramp of 25%: about a quarter of new runs go to B.
            ramp = await client.set_current_build("quick", "B", ramp=25)
            assert (ramp.current, ramp.ramping) == ("A", "B")
            ramped = [f"q{i}" for i in range(RAMPED)]
            for run_id in ramped:
                await client.start("quick", run_id=run_id, namespace=namespace)
            with trio.fail_after(4 * WITHIN):
                builds = [await client.result(run_id, namespace=namespace) for run_id in ramped]
        except BaseException:
            print(logs(processes))
            raise
        share = builds.count("B") / RAMPED
        print(f"ramp 25%: {builds.count('B')} of {RAMPED} new runs went to B ({share:.1%})")
        assert abs(share - 0.25) <= 0.08
        assert set(builds) == {"A", "B"}

        # Every run ended: A is drained, its worker still live.
        listed = await listing(["--store", store, "--broker", broker, "--json"])
        by_build = {b["build"]: b for b in json.loads(listed)["builds"]}
        assert by_build["A"]["drained"] is True
        assert by_build["A"]["workers"] == ["worker-A"]
        assert by_build["B"]["workers"] == ["worker-B"]
        shown = await listing(["--store", store, "--broker", broker, "--wide"])
        [row] = [line for line in shown.splitlines() if line.split()[1:2] == ["A"]]
        assert "worker-A" in row
        assert "drained" in row
