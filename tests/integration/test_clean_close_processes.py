"""A clean close strands no remote step, across processes: engine "a", on
the embedded ``memory://`` broker and a SQLite file, closes while its
remote steps are out, and its process lives on; engine "b", in this
process, sends them again at once and completes every run, and no step
whose result was recorded runs again.

Before, "b" saw a's process alive and took its steps for held by a's
broker, for ever (see docs/brokers.md, "Durable brokers and lost tasks").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Final

import pytest
import trio

import trio_durable as td

import clean_close_app  # isort: skip (tests/integration is the engine's directory)

HERE: Final = Path(__file__).parent
RUNS: Final = 10
WITHIN: Final = 60.0
"""Seconds a step of this test may take on a loaded machine."""


def _ledger(path: Path) -> Counter[int]:
    return Counter(int(x) for x in path.read_text().split()) if path.exists() else Counter()


async def test_a_clean_close_leaves_its_steps_to_an_engine_in_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    ledger = tmp_path / "ledger"
    monkeypatch.setenv(clean_close_app.LEDGER, str(ledger))
    monkeypatch.delenv(clean_close_app.HOLD, raising=False)
    process = await trio.lowlevel.open_process(
        [sys.executable, str(HERE / "clean_close_app.py"), store, str(RUNS)],
        env={**os.environ, clean_close_app.HOLD: "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        lines = process.stdout

        async def line() -> str:
            text = b""
            with trio.fail_after(WITHIN):
                while not text.endswith(b"\n"):
                    chunk = await lines.receive_some(1)
                    assert chunk, f"engine a exited: {text!r}"
                    text += chunk
            return text.decode().strip()

        assert await line() == "ready"
        recorded = _ledger(ledger)
        assert recorded == dict.fromkeys(range(RUNS), 1)
        async with td.open_engine(
            clean_close_app.app, store=store, serve=["g"], engine_id="b"
        ) as b:
            # a is open and its worker holds the odd steps: b leaves them.
            await b.drain()
            assert _ledger(ledger) == recorded
            await process.stdin.send_all(b"close\n")
            assert await line() == "closed"
            with trio.fail_after(WITHIN):
                outputs = [await b.result(f"run-{x}") for x in range(RUNS)]
        assert outputs == [10 * x for x in range(RUNS)]
        # a's process lives on.
        assert process.returncode is None
        # The even steps had their results: none ran again. The odd ones
        # ran again once each, on b.
        assert _ledger(ledger) == {x: 1 + x % 2 for x in range(RUNS)}
        async with td.open_store(store) as opened:
            for x in range(RUNS):
                [cp] = await opened.get_checkpoints(f"run-{x}")
                assert (cp.status, cp.attempts) == ("completed", 1 + x % 2)
    finally:
        process.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(WITHIN):
            await process.wait()
