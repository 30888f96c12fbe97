"""``trio-durable engine --http HOST:PORT``: a real engine process on a
SQLite file answers /healthz, /readyz and /metrics, and /readyz turns 503
when the process starts draining, before it stops. (A worker's, over
RabbitMQ: tests/integration/test_cli_fleet.py.)"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli_processes import cli_process, start_runs, wait_for_runs
from test_cli import invoke, one_error_line
from test_cli_processes import engine_args


def _url(ready: str) -> str:
    found = re.search(r", http (http://127\.0\.0\.1:\d+)$", ready)
    assert found is not None, ready
    return found.group(1)


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


async def test_an_engine_answers_health_readiness_and_metrics(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = engine_args(
        store, "--engine-id", "cli-engine-http", "--http", "127.0.0.1:0", "--drain-timeout", "600"
    )
    async with cli_process(args) as engine, httpx.AsyncClient() as http:
        url = _url(await engine.wait_for("engine cli-engine-http ready"))
        alive = await http.get(f"{url}/healthz")
        assert (alive.status_code, alive.json()) == (200, {"status": "alive"})
        ready = await http.get(f"{url}/readyz")
        assert (ready.status_code, ready.json()) == (200, {"status": "ready"})
        await start_runs(store, [("hello-h", "hello", ("h",)), ("double-h", "doubled", (2,))])
        await wait_for_runs(store, ["hello-h", "double-h"])
        scraped = await http.get(f"{url}/metrics")
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        runs = _samples(scraped.text, "trio_durable_runs_total")
        assert runs[(("event", "completed"), ("workflow", "hello"))] == 1
        assert runs[(("event", "completed"), ("workflow", "doubled"))] == 1
        steps = _samples(scraped.text, "trio_durable_steps_total")
        assert steps[(("event", "completed"), ("step", "double"))] == 1
        # Draining: not ready any more, while the process still answers.
        await start_runs(store, [("linger-h", "lingering", (3600.0,))])
        await engine.wait_for(f"linger started in {engine.process.pid}")
        engine.process.send_signal(signal.SIGTERM)
        await engine.wait_for("engine cli-engine-http draining (SIGTERM)")
        draining = await http.get(f"{url}/readyz")
        assert draining.status_code == 503
        assert draining.json() == {
            "status": "not ready",
            "reason": "draining: the process stops taking work",
        }
        assert (await http.get(f"{url}/healthz")).status_code == 200
        # A second signal cuts the drain short.
        assert await engine.stop(signal.SIGTERM) == 0


async def test_a_store_that_stops_answering_makes_the_engine_unready(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    store = f"sqlite:///{path}"
    args = ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--http", "127.0.0.1:0"]
    async with cli_process(args) as engine, httpx.AsyncClient() as http:
        url = _url(await engine.wait_for("ready: app cli-test"))
        assert (await http.get(f"{url}/readyz")).status_code == 200
        # The file's tables dropped under the engine: its reads fail.
        import sqlite3

        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("DROP TABLE runs")
        connection.close()
        unready = await http.get(f"{url}/readyz")
        assert unready.status_code == 503
        assert unready.json()["status"] == "not ready"
        assert "runs" in unready.json()["reason"]
        assert await engine.stop(signal.SIGKILL) != 0


def test_a_bad_http_address_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for value in ("9464", "127.0.0.1:", ":9464", "127.0.0.1:99999", "host:port"):
        result = invoke(
            ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--http", value]
        )
        assert result.exit_code == 2, (value, result.output)
        assert "give HOST:PORT" in one_error_line(result)


async def test_a_worker_opened_from_python_serves_its_face() -> None:
    import trio_durable as td
    from cli_app import app

    broker = td.MemoryBroker()
    async with (
        td.open_engine(app, store="memory://", broker=broker) as engine,
        httpx.AsyncClient() as http,
    ):
        async with td.open_worker(app, broker=broker, groups=["cli"], http="127.0.0.1:0") as worker:
            url = worker.http_url
            assert url is not None
            assert url.startswith("http://127.0.0.1:")
            assert (await http.get(f"{url}/readyz")).json() == {"status": "ready"}
            run = await engine.start("doubled", 5)
            assert (await engine.result(run.id)).startswith("10 from ")
            steps = _samples((await http.get(f"{url}/metrics")).text, "trio_durable_steps_total")
            assert steps[(("event", "completed"), ("step", "double"))] == 1
            worker.readiness.draining = True
            assert (await http.get(f"{url}/readyz")).status_code == 503
        # Gone with the block.
        with pytest.raises(httpx.ConnectError):
            await http.get(f"{url}/healthz")


async def test_a_bad_http_address_of_open_worker_is_a_usage_error() -> None:
    import trio_durable as td
    from cli_app import app

    for value in ("9464", ("127.0.0.1", 70000), ("", 1), ("h", True), 9464):
        with pytest.raises(td.UsageError, match="http takes HOST:PORT"):
            async with td.open_worker(app, broker="memory://", groups=["cli"], http=value):  # type: ignore[arg-type]
                pass  # pragma: no cover - refused


async def test_an_engine_serves_its_console_on_its_http_address(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    token = "a-console-token-of-some-length"
    args = ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--reconcile-interval"]
    args += ["0.2", "--http", "127.0.0.1:0", "--console"]
    env = {"TRIO_DURABLE_CONSOLE_TOKEN": token}
    async with cli_process(args, env=env) as engine, httpx.AsyncClient() as http:
        ready = await engine.wait_for("ready: app cli-test")
        assert ready.endswith("(with the console)")
        url = re.search(r", http (http://127\.0\.0\.1:\d+)", ready)
        assert url is not None
        base = url.group(1)
        await start_runs(store, [("linger-c", "lingering", (3600.0,))])
        await engine.wait_for(f"linger started in {engine.process.pid}")
        listed = await http.get(f"{base}/api/runs")
        assert listed.status_code == 200
        assert [run["id"] for run in listed.json()["runs"]] == ["linger-c"]
        page = await http.get(f"{base}/")
        assert page.status_code == 200
        assert "text/html" in page.headers["content-type"]
        # Actions need the token.
        refused = await http.post(f"{base}/api/runs/linger-c/cancel")
        assert refused.status_code == 401
        cancelled = await http.post(
            f"{base}/api/runs/linger-c/cancel", headers={"Authorization": f"Bearer {token}"}
        )
        assert cancelled.status_code == 202
        # The probes and the metrics are the face's, beside the console.
        assert (await http.get(f"{base}/readyz")).json() == {"status": "ready"}
        assert "trio_durable_runs_total" in (await http.get(f"{base}/metrics")).text
        await wait_for_runs(store, ["linger-c"], statuses=("cancelled",))
        assert await engine.stop(signal.SIGTERM) == 0


def test_the_console_needs_the_http_address(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    base = ["engine", "cli_app:app", "--store", store, "--serve", "cli"]
    result = invoke([*base, "--console"])
    assert result.exit_code == 2
    assert "--console is served on the --http address: give --http too" in result.stderr
    result = invoke([*base, "--token", "a-console-token-of-some-length"])
    assert result.exit_code == 2
    assert "--token is the console's: give --console with it" in result.stderr
