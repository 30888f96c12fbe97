"""``trio-durable worker --http HOST:PORT`` on a RabbitMQ node of the
test's own: /healthz and /readyz answer 200; with the node's application
stopped /readyz answers 503 with the broker's reason (and /healthz still
200), and 200 again once it is back; from SIGTERM on /readyz answers 503
(draining) until the process exits 0.

``trio-durable engine --http HOST:PORT`` on a RabbitMQ node and on a NATS
server of the test's own, its app sending steps to a group no worker
serves: it logs that once at WARNING, 15 s after it opened, and /readyz
stays 200 naming the group in its ``warnings``; with the broker away
/readyz answers 503 with the broker's reason (a round trip to it, not what
the adapter holds), 200 once it is back; once a worker of the group runs,
the warning goes from /readyz."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from test_stranded_brokers import nats, rabbitmq

from cli_processes import cli_process, start_runs
from servers.fixture import installed

__all__ = ["nats", "rabbitmq"]


async def _ready(http: httpx.AsyncClient, url: str, status: int) -> httpx.Response:
    """/readyz once it answers ``status`` (the probe follows the broker's
    connection, which notices an outage and a return on its own time)."""
    with trio.fail_after(60):
        while True:
            answer = await http.get(f"{url}/readyz")
            if answer.status_code == status:
                return answer
            await trio.sleep(0.2)


async def _until_a_step_started(http: httpx.AsyncClient, url: str) -> None:
    """Until the worker's metrics count a step attempt started (for a
    minute at most)."""
    with trio.fail_after(60):
        while True:
            scraped = await http.get(f"{url}/metrics")
            if any(
                sample.labels.get("event") == "started" and sample.value > 0
                for family in text_string_to_metric_families(scraped.text)
                for sample in family.samples
                if sample.name == "trio_durable_steps_total"
            ):
                return
            await trio.sleep(0.1)


async def test_a_worker_is_unready_while_its_broker_is_away(
    rabbitmq: tuple[str, Path], tmp_path: Path
) -> None:
    server = installed("rabbitmq")
    broker, workdir = rabbitmq
    args = ["worker", "cli_app:app", "--groups", "cli", "--instance-id", "http-worker"]
    async with (
        cli_process(
            [*args, "--http", "127.0.0.1:0"], env={"TRIO_DURABLE_BROKER": broker}
        ) as worker,
        httpx.AsyncClient(timeout=10) as http,
    ):
        ready_line = await worker.wait_for("worker http-worker ready")
        found = re.search(r", http (http://127\.0\.0\.1:\d+)$", ready_line)
        assert found is not None, ready_line
        url = found.group(1)
        assert (await http.get(f"{url}/healthz")).json() == {"status": "alive"}
        assert (await http.get(f"{url}/readyz")).json() == {"status": "ready"}
        scraped = await http.get(f"{url}/metrics")
        names = {family.name for family in text_string_to_metric_families(scraped.text)}
        assert "trio_durable_steps" in names
        await trio.to_thread.run_sync(server.stop_app, workdir)
        away = await _ready(http, url, 503)
        assert away.json()["status"] == "not ready"
        assert away.json()["reason"]
        assert (await http.get(f"{url}/healthz")).status_code == 200
        await trio.to_thread.run_sync(server.start_app, workdir)
        await _ready(http, url, 200)
        # A step in flight keeps the draining worker up: SIGTERM makes it
        # unready at once, a second one stops it.
        store = f"sqlite:///{tmp_path / 'runs.db'}"
        engine_args = ["engine", "cli_app:app", "--store", store, "--broker", broker]
        async with cli_process([*engine_args, "--reconcile-interval", "0.2"]) as engine:
            await engine.wait_for("ready: app cli-test")
            await start_runs(store, [("hang-1", "hanging", (3600.0,))])
            await _until_a_step_started(http, url)
            worker.process.send_signal(signal.SIGTERM)
            await worker.wait_for("worker http-worker draining (SIGTERM)")
            draining = await http.get(f"{url}/readyz")
            assert (draining.status_code, draining.json()["reason"]) == (
                503,
                "draining: the process stops taking work",
            )
            assert await worker.stop(signal.SIGTERM) == 0
            assert await engine.stop(signal.SIGKILL) != 0


_NO_WORKER = "no live worker serves the group 'cli'"


async def _readyz_until(
    http: httpx.AsyncClient, url: str, check: Callable[[httpx.Response], bool]
) -> httpx.Response:
    """/readyz once ``check`` holds of its answer (for a minute at most)."""
    with trio.fail_after(60):
        while True:
            answer = await http.get(f"{url}/readyz")
            if check(answer):
                return answer
            await trio.sleep(0.2)


@pytest.mark.parametrize("kind", ["rabbitmq", "nats"])
async def test_an_engine_says_which_groups_have_no_worker_and_follows_its_broker(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = installed(kind)
    broker, workdir = request.getfixturevalue(kind)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["engine", "cli_app:app", "--store", store, "--broker", broker]
    async with (
        cli_process(
            [*args, "--engine-id", "http-engine", "--http", "127.0.0.1:0", "--log-level", "info"]
        ) as engine,
        httpx.AsyncClient(timeout=10) as http,
    ):
        ready_line = await engine.wait_for("engine http-engine ready")
        found = re.search(r", http (http://127\.0\.0\.1:\d+)$", ready_line)
        assert found is not None, ready_line
        url = found.group(1)
        # No worker of the group "cli" runs: said once, 15 s after the
        # engine opened, and the engine stays ready.
        await engine.wait_for(_NO_WORKER)
        warned = await http.get(f"{url}/readyz")
        assert (warned.status_code, warned.json()) == (
            200,
            {
                "status": "ready",
                "warnings": [
                    "no live worker serves the group 'cli': its tasks wait on the broker"
                    " until one starts"
                ],
            },
        )
        # The broker away: not ready, with the broker's reason.
        if kind == "rabbitmq":
            await trio.to_thread.run_sync(server.stop_app, workdir)
        else:
            await trio.to_thread.run_sync(server.stop, workdir)
        # (At first, maybe that it did not answer in time: the client
        # notices the lost connection on its own time.)
        said = "RabbitMQ: not connected" if kind == "rabbitmq" else "NATS: not connected to"
        away = await _readyz_until(
            http, url, lambda answer: said in answer.json().get("reason", "")
        )
        assert away.status_code == 503
        assert away.json()["status"] == "not ready"
        assert (await http.get(f"{url}/healthz")).status_code == 200
        if kind == "rabbitmq":
            await trio.to_thread.run_sync(server.start_app, workdir)
        else:
            await trio.to_thread.run_sync(server.start, workdir)
        back = await _ready(http, url, 200)
        assert back.json()["status"] == "ready"
        # A worker of the group comes: the warning goes.
        worker_args = ["worker", "cli_app:app", "--groups", "cli", "--instance-id", "cli-worker"]
        async with cli_process(worker_args, env={"TRIO_DURABLE_BROKER": broker}) as worker:
            await worker.wait_for("worker cli-worker ready")
            served = await _readyz_until(http, url, lambda answer: "warnings" not in answer.json())
            assert (served.status_code, served.json()) == (200, {"status": "ready"})
            await engine.wait_for("a live worker serves the group 'cli' now")
            assert await worker.stop(signal.SIGTERM) == 0
        # Said once however often /readyz asked.
        assert sum(_NO_WORKER in line for line in engine.lines) == 1
        assert await engine.stop(signal.SIGTERM) == 0
