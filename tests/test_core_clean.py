"""The core stays clean of client libraries: importing trio-durable and
running workflows on the embedded set-ups (``memory://`` and ``sqlite://``
stores, the memory broker) imports none of aio-pika, nats-py, psycopg or
trio-asyncio, even where they are installed, nor click and rich, which only
the ``trio-durable`` command uses, nor opentelemetry, which only an engine
or a worker opened with ``tracing=`` imports, nor prometheus-client until
metrics are asked for. Nor does importing the adapter
SDK (`trio_durable.brokers`, whose bridge imports trio-asyncio only in that
mode) or the conformance suites. Checked in a fresh interpreter, so nothing
another test imported counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CLIENTS = ("aio_pika", "aiormq", "nats", "psycopg", "trio_asyncio")
# The command's libraries: only `trio-durable` (trio_durable._cli) imports them.
COMMAND_LIBRARIES = ("click", "rich")
# The ``otel`` extra: imported only when tracing is switched on.
TRACING = ("opentelemetry",)
# Loaded on the first call for metrics (`Engine.metrics`, `metrics_registry`):
# it brings http.server and more, which a process never scraped need not load.
METRICS_LIBRARIES = ("prometheus_client",)
# Loaded when a payload codec is made (td.AesGcmCodec), never before.
CRYPTO = ("cryptography",)
# Every library the core leaves alone on its embedded path.
AVOIDED = CLIENTS + COMMAND_LIBRARIES + TRACING + METRICS_LIBRARIES + CRYPTO

SCRIPT = """
import json, sys

import trio
import trio_durable as td

CLIENTS = {clients!r}

app = td.App("clean")


@app.step()
async def double(x: int) -> int:
    return 2 * x


@app.step(group="remote")
async def triple(x: int) -> int:
    return 3 * x


@app.workflow()
async def work(ctx: td.Context, x: int) -> int:
    return await ctx.step(triple, await ctx.step(double, x))


async def run(store: str) -> int:
    async with td.open_engine(app, store=store, broker="memory://", serve=["remote"]) as engine:
        run = await engine.start(work, 7)
        return await engine.result(run.id)


def loaded() -> list[str]:
    return sorted(
        name for name in sys.modules if name.split(".")[0] in CLIENTS
    )


outcome = {{}}
outcome["memory"] = trio.run(run, "memory://")
outcome["sqlite"] = trio.run(run, "sqlite:///{db}")
outcome["after runs"] = loaded()
import trio_durable.brokers  # noqa: E402
import trio_durable.testing.conformance  # noqa: E402
outcome["after the SDK"] = loaded()
print(json.dumps(outcome))
"""


def test_running_workflows_imports_no_client_library(tmp_path: Path) -> None:
    script = SCRIPT.format(clients=AVOIDED, db=tmp_path / "clean.db")
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.splitlines()[-1])
    assert outcome == {"memory": 42, "sqlite": 42, "after runs": [], "after the SDK": []}


def test_the_clients_are_there_to_be_avoided() -> None:
    # Not vacuous: the test environment has every client library installed.
    done = subprocess.run(
        [sys.executable, "-c", f"import {', '.join(AVOIDED)}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
