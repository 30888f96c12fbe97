"""kill -9 of a ``trio-durable engine`` process on the embedded ``memory://``
broker and a SQLite file, mid-fan (40 members) and mid-way through 100
one-step runs, then the same command again: every run completes, and no
step whose result was recorded before the kill runs again.

The memory broker's tasks die with the process; the engine that starts
next finds the steps they were for out on a broker that is gone, and
sends them again (see docs/brokers.md, "Durable brokers and lost tasks").
Each step appends its key to a ledger file, so the test counts how often
each one ran.
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from pathlib import Path
from typing import Final

import trio

import trio_durable as td
from cli_processes import cli_process

import stranded_app  # isort: skip (tests/integration is the engine's directory)

HERE: Final = Path(__file__).parent
FAN: Final = 40
ONES: Final = 100
FINISH_WITHIN: Final = 120.0
"""Seconds the restarted engine may take to end every run."""


def _ledger(path: Path) -> Counter[str]:
    if not path.exists():
        return Counter()
    return Counter(path.read_text().split())


async def _state(store_url: str) -> tuple[set[str], int, int]:
    """The keys of the steps whose result is recorded, and how many fan
    members and one-step runs completed."""
    async with td.open_store(store_url) as store:
        recorded: set[str] = set()
        fan_done = 0
        for cp in await store.get_checkpoints("fan", 1, FAN):
            if cp.status == "completed":
                recorded.add(stranded_app.fan_key(cp.seq - 1))
                fan_done += 1
        ones_done = 0
        for x in range(ONES):
            for cp in await store.get_checkpoints(f"one-{x}", 1, 1):
                if cp.status == "completed":
                    recorded.add(stranded_app.one_key(x))
                    ones_done += 1
        return recorded, fan_done, ones_done


async def _until(store_url: str, fan_done: int, ones_done: int) -> None:
    while True:
        _, fans, ones = await _state(store_url)
        if fans >= fan_done and ones >= ones_done:
            return
        await trio.sleep(0.05)


async def _until_all_ended(store_url: str, run_ids: list[str]) -> dict[str, td.Run]:
    async with td.open_store(store_url) as store:
        while True:
            runs = {run_id: await store.get_run(run_id) for run_id in run_ids}
            if all(r is not None and r.done for r in runs.values()):
                return {run_id: r for run_id, r in runs.items() if r is not None}
            await trio.sleep(0.2)


async def test_a_killed_memory_broker_engine_restarted_completes_every_run_once(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    ledger = tmp_path / "ledger"
    # The same command both times; a short lease so that the runs the kill
    # cut off mid-turn are taken over soon.
    command = [
        "engine",
        "stranded_app:app",
        "--store",
        store,
        "--serve",
        "g",
        "--concurrency",
        "8",
        "--lease-ttl",
        "5",
    ]
    env = {stranded_app.LEDGER: str(ledger)}
    run_ids = [f"one-{x}" for x in range(ONES)] + ["fan"]
    async with cli_process(command, cwd=HERE, env=env) as engine:
        await engine.wait_for("ready: app stranded-processes")
        # Half the one-step runs, the fan, the other half: the fan's
        # members queue between them on the broker.
        async with td.open_client(store, app=stranded_app.app) as client:
            for x in range(ONES // 2):
                await client.start(stranded_app.one, x, run_id=f"one-{x}")
            await client.start(stranded_app.fan, FAN, run_id="fan")
            for x in range(ONES // 2, ONES):
                await client.start(stranded_app.one, x, run_id=f"one-{x}")
        with trio.fail_after(FINISH_WITHIN):
            await _until(store, fan_done=5, ones_done=5)
        assert await engine.stop(signal.SIGKILL) == -signal.SIGKILL
    recorded, fan_done, ones_done = await _state(store)
    ran_before = _ledger(ledger)
    # The kill hit both mid-way.
    assert 5 <= fan_done < FAN
    assert 5 <= ones_done < ONES
    async with cli_process(command, cwd=HERE, env=env) as engine:
        await engine.wait_for("ready: app stranded-processes")
        with trio.fail_after(FINISH_WITHIN):
            runs = await _until_all_ended(store, run_ids)
        assert await engine.stop(signal.SIGTERM) == 0
    assert {run_id: r.status for run_id, r in runs.items()} == dict.fromkeys(run_ids, "completed")
    assert json.loads(runs["fan"].output or "null") == [
        f"done {stranded_app.fan_key(x)}" for x in range(FAN)
    ]
    assert all(
        json.loads(runs[f"one-{x}"].output or "null") == f"done {stranded_app.one_key(x)}"
        for x in range(ONES)
    )
    ran = _ledger(ledger)
    # Every step ran; none whose result was recorded before the kill ran again.
    keys = [stranded_app.fan_key(x) for x in range(FAN)] + [
        stranded_app.one_key(x) for x in range(ONES)
    ]
    assert all(ran[key] >= 1 for key in keys)
    assert {key: ran[key] for key in recorded} == {key: ran_before[key] for key in recorded}
    # What was out when the process died was sent again, as new attempts.
    async with td.open_store(store) as opened:
        resent = [
            cp
            for run_id in run_ids
            for cp in await opened.get_checkpoints(run_id)
            if "lost_with_broker" in [e.code for e in cp.errors]
        ]
    assert resent
    print(
        f"killed with {fan_done}/{FAN} fan members and {ones_done}/{ONES} runs recorded;"
        f" {len(resent)} steps sent again; {sum(ran.values()) - len(keys)} extra executions"
    )
