"""``trio-durable engine`` and ``trio-durable worker`` as real processes on
PostgreSQL with RabbitMQ: the engine runs local steps, the worker the remote
ones; ``trio-durable workers`` lists the live workers, and a second worker
of another deploy shows up as a disagreement, a capability gap and an
unserved on-error route; SIGTERM stops each process with status 0 and no
lease held."""

from __future__ import annotations

import json
import re
import secrets
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from cli_processes import (
    CONSOLE_SCRIPT,
    TESTS,
    WITHIN,
    cli_process,
    read_runs,
    start_runs,
    wait_for_runs,
)


@asynccontextmanager
async def _postgres(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    from servers.postgres import scratch_schema

    async with scratch_schema(real_server("postgres")) as url:
        yield url


async def _workers(broker: str, *more: str) -> tuple[int, str]:
    with trio.fail_after(WITHIN):
        done = await trio.run_process(
            [str(CONSOLE_SCRIPT), "workers", "--broker", broker, *more],
            cwd=TESTS,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, done.stdout.decode()


async def _queues(store: str, broker: str) -> tuple[int, str]:
    with trio.fail_after(WITHIN):
        done = await trio.run_process(
            [str(CONSOLE_SCRIPT), "queues", "list", "--store", store, "--broker", broker, "--json"],
            cwd=TESTS,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done.returncode, done.stdout.decode()


def _ours(document: dict[str, Any], ids: set[str]) -> list[dict[str, Any]]:
    # Another test's worker, killed, may still be announced on the shared
    # server until its announcement's time to live ends.
    return [w for w in document["workers"] if w["instance_id"] in ids]


async def test_engine_and_worker_processes_on_postgres_and_rabbitmq(
    real_server: Callable[[str], str],
) -> None:
    broker = real_server("rabbitmq")
    token = secrets.token_hex(3)
    namespace = f"cli-{token}"
    # A route of this test's own: no other test's tasks reach its workers.
    route = f"cli@{namespace}"
    engine_id, old, new = f"engine-{token}", f"worker-old-{token}", f"worker-new-{token}"
    async with _postgres(real_server) as store:
        engine_args = ["engine", "cli_app:app", "--store", store, "--broker", broker]
        async with (
            cli_process(
                [*engine_args, "--reconcile-interval", "0.2", "--engine-id", engine_id],
                console_script=True,
            ) as engine,
            cli_process(
                ["worker", "cli_app:app", "--groups", route, "--instance-id", old],
                env={"TRIO_DURABLE_BROKER": broker},
                console_script=True,
            ) as worker,
        ):
            await engine.wait_for(f"engine {engine_id} ready: app cli-test, store postgresql://")
            ready = await worker.wait_for(f"worker {old} ready")
            # The process raised the collector's thresholds and froze what
            # loading the app made (its default `--gc`).
            assert re.search(
                f"groups {route}, capabilities none,"
                r" collector thresholds 10000,50,100, \d+ objects frozen$",
                ready,
            ), ready
            starts: list[tuple[str, str, tuple[object, ...]]] = [
                (f"double-{token}-{x}", "doubled", (x,)) for x in (1, 2, 3)
            ]
            starts.append((f"hello-{token}", "hello", ("pg",)))
            await start_runs(store, starts, namespace=namespace)
            runs = await wait_for_runs(store, [run_id for run_id, _, _ in starts])
            outputs = {run_id: json.loads(r.output or "null") for run_id, r in runs.items()}
            wpid, epid = worker.process.pid, engine.process.pid
            assert outputs == {
                f"double-{token}-1": f"2 from {wpid}",
                f"double-{token}-2": f"4 from {wpid}",
                f"double-{token}-3": f"6 from {wpid}",
                f"hello-{token}": f"hello pg from {epid}",
            }

            status, out = await _workers(broker, "--json")
            assert status == 0
            listed = _ours(json.loads(out), {old})
            assert [(w["instance_id"], w["groups"], w["app"]) for w in listed] == [
                (old, [route], "cli-test")
            ]
            # Its heartbeats carry its load; nothing waits on its route.
            [listed_old] = listed
            assert listed_old["held"] is False
            assert listed_old["heartbeat_age"] >= 0
            assert set(listed_old["load"]) >= {"in_flight", "completed", "completed_per_minute"}
            [group] = [g for g in json.loads(out)["group_loads"] if g["route"] == route]
            assert (group["workers"], group["backlog"]) == ([old], 0)
            status, out = await _queues(store, broker)
            assert status == 0
            assert {"group": route, "workers": 1, "backlog": 0} in json.loads(out)["group_backlogs"]

            # A worker of another deploy joins: it requires a capability for
            # `double` that nobody offers, and routes failures to a handler
            # nothing runs.
            async with cli_process(
                [
                    *("worker", "cli_app:rollout", "--broker", broker, "--groups", route),
                    *("--instance-id", new, "--capabilities", "cpu"),
                ],
                console_script=True,
            ) as newer:
                await newer.wait_for(f"worker {new} ready")
                status, out = await _workers(broker, "--json")
                assert status == 0
                document = json.loads(out)
                assert {w["instance_id"] for w in _ours(document, {old, new})} == {old, new}
                requires = [
                    d
                    for d in document["disagreements"]
                    if (d["kind"], d["subject"]) == ("requires", "double")
                ]
                assert len(requires) == 1
                assert {json.dumps(v["value"]): v["workers"] for v in requires[0]["values"]} == {
                    '["gpu"]': [new],
                    "[]": [old],
                }
                assert {
                    "route": route,
                    "step": "double",
                    "requires": ["gpu"],
                    "offered": ["cpu"],
                } in document["capability_gaps"]
                assert {
                    "workflow": "doubled",
                    "code": None,
                    "handler": "page_oncall",
                    "declared_by": [new],
                } in document["unserved_on_error_routes"]

                status, out = await _workers(broker)
                assert status == 0
                for text in (
                    "Live workers on amqp://guest:***@",
                    "completed/min",
                    "Groups",
                    "backlog",
                    "Disagreements",
                    "page_oncall",
                ):
                    assert text in out, out
                assert await newer.stop(signal.SIGTERM) == 0

            assert await worker.stop(signal.SIGTERM) == 0
            assert await engine.stop(signal.SIGTERM) == 0
        for process, name in ((worker, f"worker {old}"), (engine, f"engine {engine_id}")):
            assert f"trio-durable: {name} draining (SIGTERM), for at most 30 s" in process.lines
            assert f"trio-durable: {name} stopped" in process.lines
            assert "undrained" not in process.output
        after = await read_runs(store, [run_id for run_id, _, _ in starts])
        assert {r.lease_owner for r in after.values()} == {None}
