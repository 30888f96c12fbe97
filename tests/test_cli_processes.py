"""``trio-durable engine`` as a real process on a SQLite file: it runs the
runs another process starts, and on SIGTERM or SIGINT it drains and exits
with status 0, holding no lease. (Engine and worker processes over RabbitMQ
and PostgreSQL: tests/integration/test_cli_fleet.py.)"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import trio

import trio_durable as td
from cli_processes import ROOT, cli_process, read_runs, start_runs, wait_for_runs
from test_cli import invoke


def engine_args(store: str, *more: str) -> list[str]:
    # Scans every 0.2 s: it learns of runs another process started then.
    # The app's remote step runs in the engine: on the in-process broker
    # nothing else would run it.
    return [
        "engine",
        "cli_app:app",
        "--store",
        store,
        "--serve",
        "cli",
        "--reconcile-interval",
        "0.2",
        *more,
    ]


async def test_engine_runs_runs_and_drains_on_sigint(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    async with cli_process(engine_args(store, "--engine-id", "cli-engine-1")) as engine:
        await engine.wait_for("engine cli-engine-1 ready: app cli-test, store sqlite:///")
        await start_runs(
            store,
            [
                ("hello-a", "hello", ("a",)),
                ("hello-b", "hello", ("b",)),
                ("linger-1", "lingering", (1.0,)),
            ],
        )
        done = await wait_for_runs(store, ["hello-a", "hello-b"])
        pid = engine.process.pid
        assert {r.id: json.loads(r.output or "null") for r in done.values()} == {
            "hello-a": f"hello a from {pid}",
            "hello-b": f"hello b from {pid}",
        }
        # Signalled while a step runs: draining waits for its turn to end.
        await engine.wait_for(f"linger started in {pid}")
        assert await engine.stop(signal.SIGINT) == 0
    assert "trio-durable: engine cli-engine-1 draining (SIGINT), for at most 30 s" in engine.lines
    assert "trio-durable: engine cli-engine-1 stopped" in engine.lines
    assert "undrained" not in engine.output
    runs = await read_runs(store, ["hello-a", "hello-b", "linger-1"])
    assert runs["linger-1"].status == "completed"
    assert runs["linger-1"].output == str(pid)
    assert [r.lease_owner for r in runs.values()] == [None, None, None]


async def test_a_second_signal_stops_the_drain_and_gives_the_lease_back(tmp_path: Path) -> None:
    # The store from the environment; the app as a path to its file.
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = ["engine", "tests/cli_app.py:app", "--serve", "cli", "--reconcile-interval", "0.2"]
    async with cli_process(
        [*args, "--engine-id", "cli-engine-2", "--drain-timeout", "600"],
        cwd=ROOT,
        env={"TRIO_DURABLE_STORE": store},
    ) as engine:
        await engine.wait_for("engine cli-engine-2 ready")
        await start_runs(store, [("linger-long", "lingering", (3600.0,))])
        await engine.wait_for(f"linger started in {engine.process.pid}")
        engine.process.send_signal(signal.SIGTERM)
        await engine.wait_for("engine cli-engine-2 draining (SIGTERM), for at most 600 s")
        assert await engine.stop(signal.SIGTERM) == 0
    assert (
        "trio-durable: engine cli-engine-2 stops undrained (SIGTERM came while draining):"
        " its runs' leases are given back"
    ) in engine.lines
    run = (await read_runs(store, ["linger-long"]))["linger-long"]
    # Interrupted mid-turn: not ended, and free for the next engine at once.
    assert run.status == "running"
    assert run.lease_owner is None


async def test_the_drain_is_bounded_by_its_timeout(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = engine_args(store, "--engine-id", "cli-engine-3", "--drain-timeout", "0.5")
    async with cli_process(args) as engine:
        await engine.wait_for("engine cli-engine-3 ready")
        await start_runs(store, [("linger-long", "lingering", (3600.0,))])
        await engine.wait_for(f"linger started in {engine.process.pid}")
        assert await engine.stop(signal.SIGTERM) == 0
    assert "engine cli-engine-3 stops undrained (it did not finish within 0.5 s)" in engine.output
    run = (await read_runs(store, ["linger-long"]))["linger-long"]
    assert run.status == "running"
    assert run.lease_owner is None


async def test_the_process_sets_its_collector_as_gc_says(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    for gc_args, engine_id, expected in [
        # By default: the raised thresholds, and what loading the app made
        # frozen, as the ready line says.
        ([], "cli-engine-gc-1", [[10000, 50, 100], True]),
        (["--gc", "5000"], "cli-engine-gc-2", [[5000, 10, 10], True]),
        # Python's collector, left alone.
        (["--gc", "python"], "cli-engine-gc-3", [[700, 10, 10], False]),
    ]:
        args = engine_args(store, "--engine-id", engine_id, *gc_args)
        async with cli_process(args) as engine:
            ready = await engine.wait_for(f"engine {engine_id} ready")
            run_id = f"collector-of-{engine_id}"
            await start_runs(store, [(run_id, "collector_settings", ())])
            done = await wait_for_runs(store, [run_id])
            assert json.loads(done[run_id].output or "null") == expected
            assert await engine.stop(signal.SIGTERM) == 0
        if expected[1]:
            assert re.search(r"collector thresholds [\d,]+, \d+ objects frozen$", ready), ready
        else:
            assert ready.endswith("collector as Python sets it (700, 10, 10)"), ready


async def test_a_bad_gc_setting_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    for value in ["lots", "1,2,3,4", "-5", ""]:
        async with cli_process(engine_args(store, "--gc", value)) as engine:
            assert await engine.exited() == 2
        assert "Invalid value for '--gc': give one to three whole numbers" in engine.output


async def test_json_logs_are_one_object_per_line_naming_run_and_step(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = engine_args(store, "--engine-id", "cli-engine-json", "--log-format", "json")
    async with cli_process(args) as engine:
        await engine.wait_for("engine cli-engine-json ready")
        await start_runs(store, [("flops-1", "failing", ("no luck",))])
        await wait_for_runs(store, ["flops-1"], statuses=("failed",))
        await engine.wait_for("run 'flops-1' (workflow 'failing') failed")
        assert await engine.stop(signal.SIGTERM) == 0
    records = [json.loads(line) for line in engine.lines if line.strip()]
    assert all(
        {"time", "level", "logger", "message"} <= record.keys()
        and record["time"].endswith("+00:00")
        for record in records
    )
    by_message = {record["message"].split(":")[0]: record for record in records}
    # The step's own record, named by the step it ran in.
    assert by_message["flopping"] == {
        "time": by_message["flopping"]["time"],
        "level": "WARNING",
        "logger": "cli_app",
        "message": "flopping: no luck",
        "run_id": "flops-1",
        "workflow": "failing",
        "step": "flop",
    }
    # The engine's: the failed attempt, one line, no traceback at WARNING.
    [attempt] = [r for r in records if r["message"].startswith("step 'flop' of run 'flops-1'")]
    assert (attempt["level"], attempt["run_id"], attempt["step"]) == ("WARNING", "flops-1", "flop")
    assert "exception" not in attempt
    [ended] = [r for r in records if r["message"].startswith("run 'flops-1'")]
    assert (ended["level"], ended["workflow"]) == ("ERROR", "failing")
    # The operator's lines too.
    assert any(
        r["message"].startswith("engine cli-engine-json ready: app cli-test") for r in records
    )
    assert {"engine cli-engine-json stopped"} <= {r["message"] for r in records}


async def test_the_engine_prunes_as_its_retention_flag_says(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    args = engine_args(
        store, "--engine-id", "cli-engine-prune", "--retention", "completed=0.5s,interval=0.2s"
    )
    async with cli_process(args) as engine:
        await engine.wait_for("engine cli-engine-prune ready")
        await start_runs(store, [("pruned-1", "hello", ("p",)), ("kept-1", "lingering", (3600.0,))])
        await wait_for_runs(store, ["pruned-1"])
        async with td.open_store(store) as opened:
            # Polled: another process deletes it.
            with trio.fail_after(30):
                while True:
                    if await opened.get_run("pruned-1") is None:
                        break
                    await trio.sleep(0.1)
            # What has not ended stays.
            assert await opened.get_run("kept-1") is not None
        assert await engine.stop(signal.SIGKILL) != 0


def test_a_bad_retention_is_a_usage_error(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for value, said in [
        ("completed", "give NAME=AGE pairs"),
        ("finished=7d", "'finished' is not one of completed, failed"),
        ("completed=soon", "is not an age like 90s"),
        ("completed=7d,completed=1d", "completed is given twice"),
        ("batch=0", "batch must be a whole number of at least 1"),
        ("interval=forever", "is not an age like 90s"),
    ]:
        result = invoke(
            ["engine", "cli_app:app", "--store", store, "--serve", "cli", "--retention", value]
        )
        assert result.exit_code == 2, (value, result.output)
        assert said in result.stderr, (value, result.stderr)
