"""``examples/remote_demo.py`` end to end: an engine and two worker processes
over a real RabbitMQ and a real NATS, running the demo workflow; and the
same in one process on the default ``memory://`` broker. The broker is the
one environment variable ``TRIO_DURABLE_BROKER``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

DEMO: Final = Path(__file__).resolve().parents[2] / "examples" / "remote_demo.py"


async def run_demo(broker: str | None) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "TRIO_DURABLE_BROKER"}
    if broker is not None:
        env["TRIO_DURABLE_BROKER"] = broker
    with trio.fail_after(120):
        return await trio.run_process(
            [sys.executable, str(DEMO)],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def check(done: subprocess.CompletedProcess[bytes], where: str) -> None:
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert "== ok: the run finished on engine B" in out
    # Its steps ran on the workers.
    assert f"== worker worker-1 {where}" in out
    assert "step.completed  order-42                     reserve (on worker-" in out
    assert "== reserve         ran 1x" in out
    assert "== charge          ran 1x" in out


async def test_the_remote_demo_runs_over_rabbitmq(real_server: Callable[[str], str]) -> None:
    check(await run_demo(real_server("rabbitmq")), "(pid")


async def test_the_remote_demo_runs_over_nats(real_server: Callable[[str], str]) -> None:
    check(await run_demo(real_server("nats")), "(pid")


async def test_the_remote_demo_runs_on_the_memory_broker_by_default() -> None:
    # One process: the workers are tasks of the demo's process.
    check(await run_demo(None), "(in this process)")
