"""An engine and a worker run as services, as a deploy would run them:
both real ``trio-durable`` processes started from one config file on a
SQLite file and a RabbitMQ node of the test's own, logging JSON.

Their ``/metrics`` (parsed by prometheus-client's parser) count the runs,
the steps and a message the worker rejected; ``/readyz`` answers 200; with
the node's application stopped the worker's answers 503 with a reason, and
200 once it is back; SIGTERM makes each answer 503 while it drains, before
it exits 0; every line either process wrote is one JSON object."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families
from test_stranded_brokers import rabbitmq

import trio_durable as td
from cli_processes import CliProcess, cli_process, start_runs, wait_for_runs
from servers.fixture import installed
from trio_durable.brokers import Outgoing

__all__ = ["rabbitmq"]


def _url(ready_line: str) -> str:
    """The HTTP face's URL from a process's ready line (a JSON record)."""
    message = json.loads(ready_line)["message"]
    found = re.search(r", http (http://127\.0\.0\.1:\d+)", message)
    assert found is not None, message
    return found.group(1)


def _value(text: str, name: str, **labels: str) -> float:
    """The sample ``name`` with ``labels`` in a scrape (0 if absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


async def _until(
    http: httpx.AsyncClient, url: str, path: str, test: Callable[[httpx.Response], bool]
) -> httpx.Response:
    """GET ``url + path`` until ``test(answer)`` holds (a minute at most):
    the processes notice an outage, a return and a message on their own
    time."""
    with trio.fail_after(60):
        while True:
            answer = await http.get(f"{url}{path}")
            if test(answer):
                return answer
            await trio.sleep(0.2)


def _json_lines(process: CliProcess) -> list[dict[str, object]]:
    """What ``process`` logged, each line parsed (but the line the app's
    ``linger`` step prints itself, which is no log record)."""
    records = [
        json.loads(line)
        for line in process.lines
        if line.strip() and not line.startswith("linger started")
    ]
    for record in records:
        assert isinstance(record, dict)
        assert {"time", "level", "logger", "message"} <= record.keys(), record
    return records


async def test_an_engine_and_a_worker_run_as_services_from_one_file(
    rabbitmq: tuple[str, Path], tmp_path: Path
) -> None:
    server = installed("rabbitmq")
    broker, workdir = rabbitmq
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    config = tmp_path / "trio-durable.toml"
    config.write_text(
        f"""
app = "cli_app:app"

[store]
url = "{store}"

[broker]
url = "{broker}"

[engine]
engine_id = "svc-engine"
migrate = true
reconcile_interval = 0.2
http = "127.0.0.1:0"
log_format = "json"
log_level = "info"

[worker]
groups = ["cli"]
instance_id = "svc-worker"
http = "127.0.0.1:0"
log_format = "json"
log_level = "info"
"""
    )
    env = {"TRIO_DURABLE_CONFIG": str(config)}
    async with (
        cli_process(["engine"], env=env) as engine,
        cli_process(["worker"], env=env) as worker,
        httpx.AsyncClient(timeout=10) as http,
    ):
        engine_url = _url(await engine.wait_for("engine svc-engine ready"))
        worker_url = _url(await worker.wait_for("worker svc-worker ready"))
        for url in (engine_url, worker_url):
            assert (await http.get(f"{url}/healthz")).json() == {"status": "alive"}
            ready = await http.get(f"{url}/readyz")
            assert (ready.status_code, ready.json()["status"]) == (200, "ready")

        # Runs and steps, counted by both processes; a task that does not
        # decode, rejected by the worker and counted.
        await start_runs(store, [("hello-s", "hello", ("s",)), ("double-s", "doubled", (3,))])
        await wait_for_runs(store, ["hello-s", "double-s"])
        async with td.open_broker(broker) as publisher:
            await publisher.dispatch([Outgoing(queue="cli", body=b"{not json")])
        scraped = await _until(
            http,
            worker_url,
            "/metrics",
            lambda a: _value(a.text, "trio_durable_messages_rejected_total", kind="task") == 1,
        )
        assert _value(scraped.text, "trio_durable_steps_total", step="double", event="completed")
        engine_scrape = (await http.get(f"{engine_url}/metrics")).text
        for workflow in ("hello", "doubled"):
            completed = {"workflow": workflow, "event": "completed"}
            assert _value(engine_scrape, "trio_durable_runs_total", **completed) == 1
        greeted = {"step": "greet", "event": "completed"}
        assert _value(engine_scrape, "trio_durable_steps_total", **greeted) == 1

        # The broker away and back.
        await trio.to_thread.run_sync(server.stop_app, workdir)
        away = await _until(http, worker_url, "/readyz", lambda a: a.status_code == 503)
        assert away.json()["status"] == "not ready"
        assert away.json()["reason"]
        assert (await http.get(f"{worker_url}/healthz")).status_code == 200
        await trio.to_thread.run_sync(server.start_app, workdir)
        for url in (engine_url, worker_url):
            await _until(http, url, "/readyz", lambda a: a.status_code == 200)

        # SIGTERM: each answers 503 while it drains a step in flight, then
        # (cut short by a second signal) exits 0.
        await start_runs(
            store, [("hang-s", "hanging", (3600.0,)), ("linger-s", "lingering", (3600.0,))]
        )
        await _until(
            http,
            worker_url,
            "/metrics",
            lambda a: _value(a.text, "trio_durable_steps_total", step="hang", event="started") >= 1,
        )
        await engine.wait_for(f"linger started in {engine.process.pid}")
        for process, url, name in (
            (worker, worker_url, "worker svc-worker"),
            (engine, engine_url, "engine svc-engine"),
        ):
            process.process.send_signal(signal.SIGTERM)
            await process.wait_for(f"{name} draining (SIGTERM)")
            draining = await http.get(f"{url}/readyz")
            assert (draining.status_code, draining.json()["reason"]) == (
                503,
                "draining: the process stops taking work",
            )
            assert await process.stop(signal.SIGTERM) == 0

    for process in (engine, worker):
        records = _json_lines(process)
        assert any("ready" in str(r["message"]) for r in records)
        assert records[-1]["message"] in ("engine svc-engine stopped", "worker svc-worker stopped")
