"""Cross-process wake-ups on PostgreSQL (see tests/wakeups.py): LISTEN and
NOTIFY between stores, a client in a real second process, and a listening
connection that comes back after the server restarts."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import trio_durable as td
import wakeups
from servers import postgres as postgres_server
from servers.fixture import installed
from servers.postgres import scratch_schema
from trio_durable._stores._ops import Announce


@pytest.fixture
async def url(real_server: Callable[[str], str]) -> AsyncIterator[str]:
    """The URL of an empty store: a fresh schema of the real server."""
    async with scratch_schema(real_server("postgres")) as scratch:
        yield scratch


RESTART_BOUND = 15.0
"""Seconds for a wake after the server restarted: the listening connection
connects again with a growing delay (at most 5 s)."""

SCENARIOS = [
    wakeups.client_signal,
    wakeups.client_cancel,
    wakeups.client_retry,
    wakeups.client_start,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_a_client_write_wakes_the_run_at_once(
    url: str, scenario: Callable[..., Awaitable[None]]
) -> None:
    await scenario(url, process=False)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
async def test_a_client_in_another_process_wakes_the_run_at_once(
    url: str, scenario: Callable[..., Awaitable[None]]
) -> None:
    await scenario(url, process=True)


async def test_a_client_result_is_woken_by_the_end(url: str) -> None:
    await wakeups.client_result_is_woken(url)


async def test_an_engine_without_the_workflow_signals(url: str) -> None:
    await wakeups.engine_without_the_workflow_signals(url)


async def test_stores_in_other_schemas_hear_nothing(
    url: str, real_server: Callable[[str], str]
) -> None:
    heard: dict[str, list[Any]] = {"one": [], "other": []}
    got = {"one": trio.Event(), "other": trio.Event()}

    def hear(name: str, announced: Any) -> None:
        heard[name].append(announced)
        got[name].set()

    async with (
        scratch_schema(real_server("postgres")) as other_url,
        td.open_store(url) as one,
        td.open_store(other_url) as other,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(one.watch, "watcher", functools.partial(hear, "one"))  # type: ignore[attr-defined]
        await nursery.start(other.watch, "watcher", functools.partial(hear, "other"))  # type: ignore[attr-defined]
        first = Announce(run_id="r1", kind="wake", origin="writer")
        second = Announce(run_id="r2", kind="end", origin="writer")
        mine = Announce(run_id="r3", kind="wake", origin="watcher")
        await one.apply([first, mine])
        # Committed after `first`: delivered after it, had `first` reached
        # the other schema's watch at all.
        await other.apply([second])
        with trio.fail_after(5):
            await got["one"].wait()
            await got["other"].wait()
        # Each heard its own schema's, and never its own origin's.
        assert heard == {"one": [[first]], "other": [[second]]}
        nursery.cancel_scope.cancel()


async def test_the_watch_listens_again_after_the_server_restarts(tmp_path: Path) -> None:
    installed("postgres")
    workdir = tmp_path / "private"
    workdir.mkdir()
    url = await trio.to_thread.run_sync(postgres_server.start, workdir)
    try:
        async with td.open_engine(wakeups.app, store=url, engine_id="serving") as engine:
            await engine.start(wakeups.wait_go, run_id="before")
            await engine.start(wakeups.wait_go, run_id="after")
            await engine.drain()
            async with td.open_client(url) as client:
                await client.signal("before", "go", 1)
                with trio.fail_after(wakeups.BOUND):
                    assert await engine.result("before") == 1
            await trio.to_thread.run_sync(
                functools.partial(postgres_server.stop, workdir, keep_data=True)
            )
            assert await trio.to_thread.run_sync(postgres_server.start, workdir) == url
            # Signalled at once: whether the engine's listening connection
            # is back by then (it hears the NOTIFY) or not yet (the NOTIFY
            # is lost, and the rescan it makes once back wakes the run),
            # the run wakes well before a reconcile pass (60 s) would.
            async with td.open_client(url) as client:
                with trio.fail_after(RESTART_BOUND):
                    await _retry_while_down(functools.partial(client.signal, "after", "go", 2))
                    # A pooled connection the restart broke fails its next
                    # call once (the store then connects afresh).
                    assert await _retry_while_down(functools.partial(engine.result, "after")) == 2
    finally:
        await trio.to_thread.run_sync(postgres_server.stop, workdir)


async def _retry_while_down(call: Callable[[], Awaitable[Any]]) -> Any:
    """``call()``, again while the restarted server still refuses it."""
    while True:
        try:
            return await call()
        except td.StoreError:
            await trio.sleep(0.1)
