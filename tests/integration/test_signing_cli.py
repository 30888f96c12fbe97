"""``trio-durable engine`` and ``worker`` processes read their signing keys
from ``TRIO_DURABLE_SIGNING_KEYS``: an engine and a worker a rotation
apart run a remote step over NATS, and a worker given a malformed ring
refuses to start."""

from __future__ import annotations

import base64
import json
import secrets
from collections.abc import Callable
from pathlib import Path

import trio

from cli_processes import WITHIN, cli_process, start_runs, wait_for_runs
from signed_fleet import K1, K2


def ring_text(*pairs: tuple[str, bytes]) -> str:
    return ",".join(f"{key_id}:{base64.b64encode(key).decode()}" for key_id, key in pairs)


async def test_engine_and_worker_processes_sign_with_keys_from_the_environment(
    real_server: Callable[[str], str], tmp_path: Path
) -> None:
    broker = real_server("nats")
    token = secrets.token_hex(3)
    namespace = f"signing-cli-{token}"
    route = f"cli@{namespace}"
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    engine_keys = ring_text(("k2", K2), ("k1", K1))
    worker_keys = ring_text(("k1", K1), ("k2", K2))
    async with (
        cli_process(
            [
                "engine",
                "cli_app:app",
                "--store",
                store,
                "--broker",
                broker,
                "--reconcile-interval",
                "0.2",
            ],
            env={"TRIO_DURABLE_SIGNING_KEYS": engine_keys},
        ) as engine,
        cli_process(
            ["worker", "cli_app:app", "--broker", broker, "--groups", route],
            env={"TRIO_DURABLE_SIGNING_KEYS": worker_keys},
        ) as worker,
    ):
        await engine.wait_for("ready")
        await worker.wait_for("ready")
        await start_runs(store, [(f"double-{token}", "doubled", (21,))], namespace=namespace)
        runs = await wait_for_runs(store, [f"double-{token}"])
        assert json.loads(runs[f"double-{token}"].output or "null") == (
            f"42 from {worker.process.pid}"
        )
    assert "rejected" not in engine.output + worker.output


async def test_a_malformed_signing_ring_is_a_usage_error() -> None:
    async with cli_process(
        ["worker", "cli_app:app", "--broker", "nats://127.0.0.1:1", "--groups", "cli"],
        env={"TRIO_DURABLE_SIGNING_KEYS": "k1:c2hvcnQ="},
    ) as worker:
        with trio.fail_after(WITHIN):
            assert await worker.exited() == 2
    assert "TRIO_DURABLE_SIGNING_KEYS: key 'k1' must be at least 16 bytes" in worker.output
    # The key itself is never shown.
    assert "c2hvcnQ=" not in worker.output
