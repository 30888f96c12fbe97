"""Remote workflows across real processes, with a worker killed mid-decision.

An engine process (``trio-durable engine remote_service:app``) whose app
holds no workflow body and no declaration (it serves ``order`` by
convention, as the workers announce it) and which cannot
import the workflow code (its module lives in remote_workflow_code/, not on
the engine's path), and two worker processes (``trio-durable worker
remote_orders:app``) that can, share a SQLite file store and a real broker.
A client starts runs of ``order`` by name; the engine sends each of their
turns to the workers as a decision task.

One run's local step hangs the first time it runs, inside a decision: the
worker holding that decision task is killed with SIGKILL while the other
runs are mid-way (steps, timers). The broker delivers the task again to the
other worker. Then every run must have completed with the right output,
every step must have run (the markers), every checkpoint must hold exactly
one result, and no run may be left waiting for a decision.
"""

from __future__ import annotations

import secrets
import signal
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final

import trio

import trio_durable as td
from cli_processes import CliProcess, cli_process

HERE: Final = Path(__file__).resolve().parent
CODE: Final = HERE / "remote_workflow_code"
SERVICE: Final = HERE / "remote_workflow_service"
RUNS: Final = 20
HANG_KEY: Final = "r0"  # remote_orders.HANG_KEY (this process cannot import it either)
STEPS: Final = ("reserve", "charge", "notify", "finish")
FINISH_WITHIN: Final = 45.0
"""Seconds the runs may take to end after the kill."""


def expected(x: int) -> int:
    """What ``remote_orders.order(key, x)`` returns."""
    return 2 * ((x + 1) ** 2 + 7)


def read_markers(path: Path) -> list[tuple[str, str, int]]:
    """``(step, key, pid)`` for each step execution so far."""
    lines = path.read_text().splitlines()
    return [(step, key, int(pid)) for step, key, pid in (line.split() for line in lines)]


async def until_marked(path: Path, step: str, key: str) -> int:
    """The pid of the first process that recorded ``step`` for ``key``."""
    while True:  # polls the markers other processes append to
        for marked_step, marked_key, pid in read_markers(path):
            if (marked_step, marked_key) == (step, key):
                return pid
        await trio.sleep(0.05)


def logs(processes: dict[str, CliProcess]) -> str:
    return "\n".join(f"--- {name}:\n{p.output}" for name, p in processes.items())


async def kill_a_worker_mid_decision(broker: str, tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    markers = tmp_path / "markers"
    markers.touch()
    # A namespace of its own: the task queues (``orders@<ns>``) hold only
    # this test's tasks, whatever earlier tests left on the shared server.
    namespace = f"rw{secrets.token_hex(3)}"
    groups = f"orders@{namespace},payments@{namespace}"
    processes: dict[str, CliProcess] = {}
    async with AsyncExitStack() as stack:
        processes["engine"] = await stack.enter_async_context(
            cli_process(
                ["engine", "remote_service:app", "--store", store, "--broker", broker],
                cwd=SERVICE,
            )
        )
        for name in ("worker-1", "worker-2"):
            processes[name] = await stack.enter_async_context(
                cli_process(
                    [
                        "worker", "remote_orders:app", "--broker", broker, "--groups", groups,
                        "--instance-id", name, "--heartbeat", "1", "--ttl", "3",
                    ],
                    cwd=CODE,
                    env={"REMOTE_MARKERS": str(markers)},
                )
            )  # fmt: skip
        for process in processes.values():
            await process.wait_for(" ready")

        client = await stack.enter_async_context(td.open_client(store))
        for i in range(RUNS):
            await client.start("order", f"r{i}", i, run_id=f"r{i}", namespace=namespace)

        # The worker that took the hanging decision is inside it, holding
        # its task unacknowledged; the other runs are at their steps and
        # timers.
        try:
            with trio.fail_after(60):
                victim_pid = await until_marked(markers, "hang", HANG_KEY)
        except trio.TooSlowError:
            print(logs(processes))
            raise
        [victim] = [n for n in ("worker-1", "worker-2") if processes[n].process.pid == victim_pid]
        open_at_kill = [
            run.id
            for run in [await client.get(f"r{i}", namespace=namespace) for i in range(RUNS)]
            if run.status not in ("completed", "failed", "cancelled", "dead")
        ]
        processes[victim].process.send_signal(signal.SIGKILL)
        assert await processes[victim].exited() == -signal.SIGKILL
        killed_at = len(read_markers(markers))

        outputs: dict[str, object] = {}
        with trio.fail_after(FINISH_WITHIN):
            try:
                for i in range(RUNS):
                    outputs[f"r{i}"] = await client.result(f"r{i}", namespace=namespace)
            except BaseException:
                print(logs(processes))
                raise
        runs = [await client.get(f"r{i}", namespace=namespace) for i in range(RUNS)]
        checkpoints = {run.id: await client.store.get_checkpoints(run.id) for run in runs}
        for name, process in processes.items():
            if name != victim:
                assert process.process.returncode is None, f"{name} exited\n{logs(processes)}"

    # The kill hit a fleet at work, and a decision in the middle.
    assert len(open_at_kill) >= RUNS // 2, open_at_kill
    assert outputs == {f"r{i}": expected(i) for i in range(RUNS)}
    assert all(run.status == "completed" for run in runs)

    executions = read_markers(markers)
    ran = Counter((step, key) for step, key, _ in executions if step != "hang")
    missing = {(s, f"r{i}") for s in STEPS for i in range(RUNS)} - set(ran)
    assert not missing, sorted(missing)
    # The hanging decision was delivered again and decided by the other
    # worker: its local step ran on both.
    survivor_pid = next(
        p.process.pid for n, p in processes.items() if n.startswith("worker") and n != victim
    )
    assert {pid for step, key, pid in executions if (step, key) == ("reserve", HANG_KEY)} == {
        victim_pid,
        survivor_pid,
    }
    # After the kill, the other worker did all the work.
    assert {pid for _, _, pid in executions[killed_at:]} == {survivor_pid}

    # Every checkpoint holds one result: each step's checkpoint completed
    # with the value that step returns, none pending, none waiting for a
    # decision.
    for i, run in enumerate(runs):
        by_seq = {cp.seq: cp for cp in checkpoints[run.id] if cp.seq > 0 and cp.kind != "decision"}
        assert [cp.status for cp in checkpoints[run.id]] == ["completed"] * len(
            checkpoints[run.id]
        ), (run.id, checkpoints[run.id])
        held = i + 1
        charged = held * held
        assert [(cp.name, cp.output) for _, cp in sorted(by_seq.items())] == [
            ("reserve", str(held)),
            ("charge", str(charged)),
            ("sleep", None),
            ("notify", str(charged + 7)),
            ("finish", str(expected(i))),
        ], (run.id, checkpoints[run.id])


async def test_a_worker_killed_mid_decision_over_rabbitmq(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    await kill_a_worker_mid_decision(real_server("rabbitmq"), tmp_path)


async def test_a_worker_killed_mid_decision_over_nats(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    # A killed worker's tasks come back after ack_wait (30 s by default).
    await kill_a_worker_mid_decision(f"{real_server('nats')}?ack_wait=3", tmp_path)


async def test_the_engine_app_refuses_to_load_where_the_code_is_in_reach(tmp_path: Path) -> None:
    # remote_service's guard is not vacuous: from the code's folder (on the
    # path), the engine refuses to start.
    service = SERVICE / "remote_service.py"
    store = f"sqlite:///{tmp_path / 'x.db'}"
    async with cli_process(["engine", f"{service}:app", "--store", store], cwd=CODE) as engine:
        assert await engine.exited() != 0
    assert "must not reach the workflow code" in engine.output
