"""Bounds on what enters the public API (docs/configuration.md#bounds):
names of at most 200 characters (signals, webhooks, breakpoints, queues,
tags) on the engine and the client alike, and numbers too large for a
float or a store's integer refused with `UsageError`, never an
`OverflowError` from deep inside."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import pytest
import trio

import trio_durable as td
from conftest import fixed_wall

app = td.App("bounds")
ENORMOUS: Final = 10**400
"""Larger than any float: `math.isfinite` raises OverflowError on it."""
HUGE: Final = 10**30
"""Larger than any 64-bit integer a store keeps."""
NAME_200: Final = "n" * 200
NAME_201: Final = "n" * 201


@app.step(group="g")
async def member(n: int) -> int:
    return n


@app.workflow()
async def fanned(ctx: td.Context) -> list[int]:
    return await ctx.all(member, [0, 1])


@app.workflow()
async def waits(ctx: td.Context, name: str) -> Any:
    return await ctx.wait_signal(name)


@pytest.mark.parametrize(
    "option",
    [
        "lease_ttl",
        "reconcile_interval",
        "result_poll_interval",
        "blocked_recheck",
        "metrics_interval",
    ],
)
async def test_engine_seconds_too_large_for_a_float(option: str) -> None:
    options: dict[str, Any] = {option: ENORMOUS}
    with pytest.raises(td.UsageError, match=option):
        async with td.open_engine(app, **options):
            pass


@pytest.mark.parametrize(
    "make",
    [
        lambda: td.Retry(attempts=3, backoff=ENORMOUS),
        lambda: td.Retry(attempts=3, max_backoff=ENORMOUS),
        lambda: td.Retention(completed=ENORMOUS),
        lambda: td.RateLimit(1, ENORMOUS),
        lambda: td.ConsoleOptions(read_timeout=ENORMOUS),
        lambda: td.ConsoleOptions(idle_timeout=ENORMOUS),
        lambda: td.ConsoleOptions(max_body=ENORMOUS),
    ],
    ids=["backoff", "max_backoff", "retention", "rate period", "read", "idle", "max_body"],
)
def test_options_too_large_for_a_float(make: Callable[[], object]) -> None:
    with pytest.raises(td.UsageError):
        make()


@pytest.fixture(params=["memory", "sqlite"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'b.db'}"


Call = Callable[[td.Engine], Awaitable[object]]

QUERIES: Final[dict[str, tuple[Call, str]]] = {
    "created_after=10**400": (lambda e: e.list_runs(created_after=ENORMOUS), "created_after"),
    "created_before=-10**400": (lambda e: e.list_runs(created_before=-ENORMOUS), "created_before"),
    "fan offset 10**30": (lambda e: e.fan_page("f", 1, offset=HUGE), "offset"),
    "fan seq 10**30": (lambda e: e.fan_page("f", HUGE), "fan"),
    "fan seq -10**30": (lambda e: e.fan_page("f", -HUGE), "fan"),
    "retry from_seq 10**5000": (lambda e: e.retry("f", from_seq=10**5000), "from_seq"),
    "fork from_seq 10**400": (lambda e: e.fork("f", from_seq=ENORMOUS), "from_seq"),
    "start timeout 10**400": (lambda e: e.start(fanned, run_id="t", timeout=ENORMOUS), "timeout"),
}


@pytest.mark.parametrize("call", list(QUERIES))
async def test_numbers_past_a_store_are_usage_errors(store_url: str, call: str) -> None:
    run, what = QUERIES[call]
    async with td.open_engine(app, store=store_url, serve=["g"], wall_clock=fixed_wall) as engine:
        await engine.start(fanned, run_id="f")
        assert await engine.result("f") == [0, 1]
        with pytest.raises(td.UsageError, match=what):
            await run(engine)


async def test_names_are_at_most_200_characters(
    store_url: str, autojump_clock: trio.abc.Clock
) -> None:
    async with (
        td.open_engine(app, store=store_url, serve=["g"], wall_clock=fixed_wall) as engine,
        td.open_client(engine.store) as client,
    ):
        await engine.start(waits, NAME_200, run_id="w")
        await engine.drain()
        for source in (engine, client):
            with pytest.raises(td.UsageError, match="at most 200 characters"):
                await source.signal("w", NAME_201, 1)
            with pytest.raises(td.UsageError, match="at most 200 characters"):
                await source.set_breakpoint(workflow=NAME_201, step="member")
            with pytest.raises(td.UsageError, match="at most 200 characters"):
                await source.set_breakpoint(workflow="fanned", step=NAME_201)
            with pytest.raises(td.UsageError, match="at most 200 characters"):
                await source.start(fanned, run_id="tagged", tags=[NAME_201])
            with pytest.raises(td.UsageError, match="at most 200 characters"):
                await source.list_runs(tags=[NAME_201])
        assert await engine.breakpoints() == []
        assert [run.id for run in (await engine.list_runs()).runs] == ["w"]
        # 200 is a name.
        await client.signal("w", NAME_200, "ok")
        assert await engine.result("w") == "ok"
        tagged = await engine.start(fanned, run_id="tagged", tags=[NAME_200])
        assert await tagged.result() == [0, 1]
        assert [run.id for run in (await engine.list_runs(tags=[NAME_200])).runs] == ["tagged"]
    with pytest.raises(td.RegistrationError, match="at most 200 characters"):
        td.App("queues").queue(NAME_201, concurrency=1)


async def test_a_body_refuses_a_signal_name_too_long(autojump_clock: trio.abc.Clock) -> None:
    async with td.open_engine(app, wall_clock=fixed_wall) as engine:
        await engine.start(waits, NAME_201, run_id="long")
        with pytest.raises(td.RunFailed, match="at most 200 characters"):
            await engine.result("long")
