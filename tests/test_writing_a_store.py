"""docs/writing-a-store.md: its worked example (examples/counting_store.py)
passes the public store conformance suite and runs a workflow, the store SDK
is pinned, and the suite needs no client library of the in-tree stores."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing

import trio_durable as td
from cli_processes import WITHIN
from trio_durable.stores import TurnState
from trio_durable.testing.conformance import STORE_CHECKS, StoreCheck, check_store

ROOT: Final = Path(__file__).resolve().parents[1]
DOC: Final = ROOT / "docs" / "writing-a-store.md"
EXAMPLE: Final = ROOT / "examples" / "counting_store.py"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("counting_store", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


open_counting_store: Callable[[], AbstractAsyncContextManager[Any]] = (
    _load_example().open_counting_store
)


# The suite as the page shows it.
@pytest.mark.parametrize("check", STORE_CHECKS, ids=lambda check: check.__name__)
async def test_counting_store_conforms(check: StoreCheck) -> None:
    await check(open_counting_store)


def _code(text: str) -> str:
    """``text`` without its import lines and blank lines."""
    kept = [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("import ", "from "))
    ]
    return "\n".join(kept)


def test_the_page_shows_the_code_the_tests_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert blocks
    sources = _code(EXAMPLE.read_text()) + _code(Path(__file__).read_text())
    for block in blocks:
        assert _code(block) in sources, block


async def test_check_store_runs_the_whole_suite() -> None:
    async with open_counting_store() as store:
        typed: td.Store = store
        assert isinstance(await typed.begin_turn("r1", "e", 1.0, 0.0), TurnState | None)
    await check_store(open_counting_store)


app = td.App("counting")


@app.step()
async def double(x: int) -> int:
    return 2 * x


@app.workflow()
async def doubled_twice(ctx: td.Context, x: int) -> int:
    return await ctx.step(double, await ctx.step(double, x))


async def test_an_engine_runs_on_the_counting_store(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_counting_store() as store, td.open_engine(app, store=store) as engine:
        run = await engine.start(doubled_twice, 3)
        assert await run.result() == 12
        assert store.applied["CreateRun"] == 1
        assert store.applied["PutCheckpoint"] >= 2


def test_the_store_sdk_is_pinned() -> None:
    from trio_durable import stores

    assert sorted(stores.__all__) == [
        "AdmitToQueue",
        "Announce",
        "AnnounceKind",
        "ChangeFeed",
        "CheckpointKind",
        "CheckpointStatus",
        "ClaimCheckpoint",
        "ClaimRecord",
        "CodecStore",
        "CreateRun",
        "CreateWebhook",
        "DeleteBreakpoint",
        "DeleteCheckpoints",
        "DeleteRecords",
        "DeliverSignal",
        "FanCounts",
        "KeepSetting",
        "LockRun",
        "Op",
        "PauseStep",
        "PutBreakpoint",
        "PutCheckpoint",
        "PutRecord",
        "PutValue",
        "QUEUED",
        "QUEUE_SLOT",
        "QueueDepth",
        "ReleaseQueueSlot",
        "ReleaseRun",
        "RemoveSignalWaiter",
        "RescheduleCheckpoint",
        "ResumeStep",
        "RunDeleter",
        "RunFilter",
        "RunRecord",
        "RunStamp",
        "RunStatus",
        "RunWatch",
        "SettleCheckpoint",
        "SettleRecord",
        "Store",
        "StoreHelpers",
        "StoreStatistics",
        "StoredValue",
        "TERMINAL_STATUSES",
        "TurnState",
        "UpdateRun",
        "UseWebhook",
        "WHOLE_RUN",
        "WaitSignal",
        "Webhook",
        "WriteConflict",
        "queue_slot_record",
        "run_due_at",
    ]
    for name in stores.__all__:
        assert getattr(stores, name) is not None


def test_the_conformance_suite_needs_no_client_library() -> None:
    code = (
        "import sys, trio_durable.testing.conformance, trio_durable.stores\n"
        "print(sorted(m for m in ('psycopg', 'aio_pika', 'nats', 'trio_asyncio')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=WITHIN
    )
    assert done.stdout.strip() == "[]"
