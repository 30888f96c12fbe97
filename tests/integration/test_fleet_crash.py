"""Real processes, real servers, real kills.

Engine processes and worker processes (``fleet.py``) share one store and one
broker and run a workload of local and remote steps, a fan of remote steps,
durable timers and child runs. While they work, the test ``kill -9``s an
engine and a worker at random moments (drawn from a seed), twice each, and
starts them again. Then every run must have completed with the right
output, every step's effect must have run at least once (the ledger), and
every checkpoint must hold exactly one result.
"""

from __future__ import annotations

import random
import secrets
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import pytest
import trio

import trio_durable as td

sys.path.insert(0, str(Path(__file__).parent))

import fleet

FLEET: Final = Path(__file__).parent / "fleet.py"
FINISH_WITHIN: Final = 240.0
"""Seconds the fleet may take to end every run after the last kill."""

PAUSE: Final = 3 * fleet.LEASE_TTL
"""How long a paused engine stays stopped: its leases lapse meanwhile."""


@attrs.define
class Fleet:
    """The processes of one crash test."""

    store: str
    broker: str
    ledger: Path
    runs: int
    fan: int
    namespace: str
    logs: Path
    processes: dict[str, trio.Process] = attrs.field(factory=dict)
    restarts: dict[str, int] = attrs.field(factory=dict)
    pids: dict[int, str] = attrs.field(factory=dict)
    """Which process (name.generation) each pid was, for a failure's report."""
    paused: list[str] = attrs.field(factory=list)

    async def spawn(self, role: str, name: str, nursery: trio.Nursery) -> None:
        generation = self.restarts.get(name, 0)
        self.restarts[name] = generation + 1
        log = self.logs / f"{name}.{generation}.log"
        argv = [
            sys.executable,
            str(FLEET),
            role,
            "--store",
            self.store,
            "--broker",
            self.broker,
            "--ledger",
            str(self.ledger),
            "--id",
            name,
            "--runs",
            str(self.runs),
            "--fan",
            str(self.fan),
            "--namespace",
            self.namespace,
        ]
        process = await nursery.start(_run_process, argv, log, name=f"fleet {name}")
        self.processes[name] = process
        self.pids[process.pid] = f"{name}.{generation}"

    async def pause(self, name: str, after: float, seconds: float) -> None:
        await trio.sleep(after)
        process = self.processes[name]
        process.send_signal(signal.SIGSTOP)
        self.paused.append(name)
        await trio.sleep(seconds)
        process.send_signal(signal.SIGCONT)

    async def kill(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        await process.wait()


async def _run_process(
    argv: list[str], log: Path, task_status: trio.TaskStatus[trio.Process]
) -> None:
    # The process belongs to this task: cancelling it (the test's end) kills
    # the process and waits for it.
    with log.open("wb") as output:
        process = await trio.lowlevel.open_process(argv, stdout=output, stderr=subprocess.STDOUT)
    task_status.started(process)
    try:
        await process.wait()  # until cancelled (the test's end), or it exits
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


async def _until_all_ended(store_url: str, count: int, fleet_: Fleet) -> list[td.Run]:
    async with td.open_store(store_url) as store:
        while True:
            runs = [r for r in await store.list_runs(limit=100_000) if r.parent_id is None]
            ended = [r for r in runs if r.status in ("completed", "failed", "cancelled", "dead")]
            if len(runs) == count and len(ended) == count:
                return runs
            for name, process in fleet_.processes.items():
                # A process that exits by itself (not killed) is a failure.
                if process.returncode not in (None, -signal.SIGKILL):
                    raise AssertionError(f"{name} exited with {process.returncode}")
            await trio.sleep(0.5)


async def _open_runs(store_url: str, count: int) -> int:
    """How many of the workload's ``count`` runs have not ended (not yet
    created ones included)."""
    async with td.open_store(store_url) as store:
        runs = await store.list_runs(limit=100_000)
        ended = sum(
            r.status in ("completed", "failed", "cancelled", "dead")
            for r in runs
            if r.parent_id is None
        )
        return count - ended


async def _until_work_began(store_url: str) -> None:
    async with td.open_store(store_url) as store:
        while not await store.list_runs(limit=1):  # noqa: ASYNC110 (polls another process's writes)
            await trio.sleep(0.1)


async def _checkpoints(store_url: str, run_ids: list[str]) -> dict[str, list[td.Checkpoint]]:
    async with td.open_store(store_url) as store:
        return {run_id: await store.get_checkpoints(run_id) for run_id in run_ids}


async def crash_fleet(
    *,
    store: str,
    broker: str,
    tmp_path: Path,
    engines: int,
    workers: int,
    runs: int,
    fan: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    ledger = tmp_path / "ledger.db"
    fleet.open_ledger(ledger)
    logs = tmp_path / "logs"
    logs.mkdir()
    crew = Fleet(
        store=store,
        broker=broker,
        ledger=ledger,
        runs=runs,
        fan=fan,
        namespace=f"crash-{secrets.token_hex(3)}",
        logs=logs,
    )
    engine_names = [f"engine-{i}" for i in range(engines)]
    worker_names = [f"worker-{i}" for i in range(workers)]
    async with trio.open_nursery() as nursery:
        for name in engine_names:
            await crew.spawn("engine", name, nursery)
        for name in worker_names:
            await crew.spawn("worker", name, nursery)
        # Two kills of an engine and two of a worker, at moments drawn from
        # the seed while the workload is in flight; each comes back a moment
        # later.
        kills = sorted(
            [(rng.uniform(1.0, 6.0), "engine", rng.choice(engine_names)) for _ in range(2)]
            + [(rng.uniform(1.0, 6.0), "worker", rng.choice(worker_names)) for _ in range(2)]
        )
        # The kill clock starts once the engines began starting runs.
        with trio.fail_after(60):
            await _until_work_began(store)
        start = trio.current_time()
        # An engine no kill hits is also paused (SIGSTOP) for longer than a
        # lease, as a process stalled by the OS or a long GC would be: its
        # runs are taken over, and what it tries to write when it wakes up
        # must be refused (fenced by the lease).
        spared = [n for n in engine_names if n not in {name for _, _, name in kills}]
        if spared:
            nursery.start_soon(crew.pause, spared[0], rng.uniform(1.0, 4.0), PAUSE)
        open_at_kills: list[int] = []
        for at, role, name in kills:
            await trio.sleep_until(start + at)
            open_at_kills.append(await _open_runs(store, runs))
            await crew.kill(name)
            await trio.sleep(rng.uniform(0.2, 1.5))
            await crew.spawn(role, name, nursery)
        with trio.fail_after(FINISH_WITHIN):
            ended = await _until_all_ended(store, runs, crew)
        nursery.cancel_scope.cancel()

    # The kills hit a fleet at work: runs were open at every one.
    assert all(open_at_kills), open_at_kills
    outputs = {r.id: (r.status, r.output) for r in ended}
    expected = fleet.expected_outputs(runs, fan)
    wrong = {
        run_id: outputs.get(run_id)
        for run_id, value in expected.items()
        if outputs.get(run_id) != ("completed", str(value))
    }
    assert not wrong, f"{len(wrong)} runs ended wrong, e.g. {sorted(wrong.items())[:5]}"

    # Every effect ran at least once; re-executions are allowed (at least
    # once), but each checkpoint records exactly one result.
    counts = fleet.ledger_counts(ledger)
    missing = fleet.expected_effects(runs, fan) - set(counts)
    if missing:
        report = await _report(store, crew, sorted(missing)[:3])
        raise AssertionError(f"effects that never ran: {sorted(missing)[:10]}\n{report}")
    all_ids = [r.id for r in ended] + [f"r{i}.child.1" for i in range(2, runs - 1, 3)]
    checkpoints = await _checkpoints(store, all_ids)
    unsettled = [
        (run_id, cp.seq, cp.status)
        for run_id, cps in checkpoints.items()
        for cp in cps
        if cp.seq >= 0 and cp.status != "completed"
    ]
    assert not unsettled, f"checkpoints not settled once: {unsettled[:10]}"
    assert all(checkpoints[run_id] for run_id in all_ids)
    print(
        f"{runs} runs over {engines} engines and {workers} workers, kills {kills},"
        f" runs open at each: {open_at_kills}, paused {crew.paused};"
        f" effects re-run: {sum(1 for n in counts.values() if n > 1)} of {len(counts)}"
    )


async def _report(store_url: str, crew: Fleet, effects: list[str]) -> str:
    """What the store, the ledger and the logs hold about the runs of
    ``effects``: a failure's evidence, since the test's files do not outlive
    the machine it ran on."""
    lines: list[str] = []
    for effect in effects:
        key = effect.rsplit(":", 1)[0]
        lines.append(f"-- {effect}")
        async with td.open_store(store_url) as store:
            run = await store.get_run(key)
            lines.append(f"run: {run!r}")
            for cp in await store.get_checkpoints(key):
                lines.append(f"checkpoint: {cp!r}")
        for effect_, pid in fleet.ledger_rows(crew.ledger, f"{key}:%"):
            lines.append(f"ledger: {effect_} by {crew.pids.get(pid, pid)}")
        for log in sorted(crew.logs.iterdir()):
            for line in log.read_text(errors="replace").splitlines():
                if key in line:
                    lines.append(f"{log.name}: {line}")
    return "\n".join(lines)


@asynccontextmanager
async def _postgres_store(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    from servers.postgres import scratch_schema

    async with scratch_schema(real_server("postgres")) as url:
        yield url


@pytest.mark.parametrize("seed", [1])
async def test_postgres_rabbitmq_fleet_survives_kills(
    real_server: Callable[[str], str], tmp_path: Path, seed: int
) -> None:
    async with _postgres_store(real_server) as store:
        await crash_fleet(
            store=store,
            broker=real_server("rabbitmq"),
            tmp_path=tmp_path,
            engines=3,
            workers=2,
            runs=500,
            fan=200,
            seed=seed,
        )


async def test_postgres_nats_fleet_survives_kills(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    async with _postgres_store(real_server) as store:
        await crash_fleet(
            store=store,
            broker=real_server("nats"),
            tmp_path=tmp_path,
            engines=3,
            workers=2,
            runs=200,
            fan=100,
            seed=2,
        )


async def test_sqlite_rabbitmq_fleet_survives_kills(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    await crash_fleet(
        store=f"sqlite:///{tmp_path / 'fleet.db'}",
        broker=real_server("rabbitmq"),
        tmp_path=tmp_path,
        engines=2,
        workers=2,
        runs=120,
        fan=50,
        seed=3,
    )
