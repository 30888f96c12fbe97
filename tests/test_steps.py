"""Local steps: retries and their backoff, fatal errors, timeouts, and what
the checkpoint records."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import trio_durable as td
from conftest import EngineFactory

app = td.App("steps")

calls: Counter[str] = Counter()
"""How often each step function really ran."""

starts: list[float] = []
"""`trio.current_time()` at the start of every attempt."""

seen: list[Any] = []
"""What bodies observed, turn after turn."""

causes: list[str | None] = []
"""The type of each caught `StepFailed`'s ``__cause__``."""


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    calls.clear()
    starts.clear()
    seen.clear()
    causes.clear()
    yield
    calls.clear()
    starts.clear()
    seen.clear()
    causes.clear()


class Flaky(Exception):
    """A retryable failure with a code and details."""

    def __init__(self, attempt: int) -> None:
        super().__init__(f"flaky attempt {attempt}")
        self.code = "flaky"
        self.details = {"attempt": attempt}


class NotRetryable(Exception):
    retryable = False


def _failed_info(exc: td.StepFailed) -> dict[str, Any]:
    return {
        "step": exc.step,
        "message": exc.message,
        "code": exc.code,
        "details": exc.details,
        "attempts": exc.attempts,
    }


@app.step(retry=td.Retry(attempts=5, backoff=2.0, max_backoff=5.0, jitter=0.0))
async def always_fails(x: int) -> int:
    calls["always_fails"] += 1
    starts.append(trio.current_time())
    raise ValueError(f"no {x}")


@app.step(retry=td.Retry(attempts=4, backoff=1.0, max_backoff=60.0, jitter=0.0))
async def fails_twice(x: int) -> int:
    calls["fails_twice"] += 1
    starts.append(trio.current_time())
    if calls["fails_twice"] <= 2:
        raise Flaky(calls["fails_twice"])
    return x * 2


@app.step(retry=td.Retry(attempts=4, backoff=1.0, max_backoff=60.0, jitter=0.5))
async def jittery(x: int) -> int:
    calls["jittery"] += 1
    starts.append(trio.current_time())
    raise ValueError("again")


@app.step(retry=td.Retry(attempts=5, backoff=0.5, jitter=0.0))
async def fatal(x: int) -> int:
    calls["fatal"] += 1
    raise td.FatalError("card declined", code="card_declined", details={"amount": x, "tries": [1]})


@app.step(retry=td.Retry(attempts=5, backoff=0.5, jitter=0.0))
async def not_retryable(x: int) -> int:
    calls["not_retryable"] += 1
    raise NotRetryable("do not try again")


@app.step(retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0), timeout=5.0)
async def slow_twice(x: int) -> int:
    calls["slow_twice"] += 1
    starts.append(trio.current_time())
    if calls["slow_twice"] <= 2:
        await trio.sleep(10)
    return x + 1


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0), timeout=5.0)
async def always_slow(x: int) -> int:
    calls["always_slow"] += 1
    starts.append(trio.current_time())
    await trio.sleep(10)
    return x


@app.step(retry=td.Retry(attempts=3, backoff=1.0, jitter=0.0))
async def unserializable(x: int) -> object:
    calls["unserializable"] += 1
    return object()


@app.step()
async def after(x: int) -> int:
    calls["after"] += 1
    return x + 100


@app.workflow()
async def run_step(ctx: td.Context, name: str, x: int) -> int:
    step = app.get_step(name)
    assert step is not None
    result: int = await ctx.step(step, x)
    return result


@app.workflow()
async def catch_and_continue(ctx: td.Context, x: int) -> dict[str, Any]:
    try:
        await ctx.step(fatal, x)
    except td.StepFailed as exc:
        info = _failed_info(exc)
        seen.append(info)
        causes.append(type(exc.__cause__).__name__ if exc.__cause__ else None)
    else:  # pragma: no cover
        raise AssertionError("the step did not fail")
    await ctx.sleep(10)
    y = await ctx.step(after, x)
    return {"failure": info, "after": y}


async def _run(open_test_engine: EngineFactory, name: str, x: int, **kwargs: Any) -> td.Run:
    async with open_test_engine(app, **kwargs) as engine:
        run = await engine.start(run_step, name, x, run_id="r")
        with pytest.raises(td.RunFailed):
            await engine.result(run.id)
        return await engine.get(run.id)


# -- backoff ------------------------------------------------------------------


async def test_backoff_doubles_from_backoff_and_is_capped(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        with engine.subscribe() as events:
            t0 = trio.current_time()
            run = await engine.start(run_step, "always_fails", 3, run_id="r")
            with pytest.raises(td.RunFailed) as info:
                await engine.result(run.id)
            failed_at = trio.current_time()
            [cp] = await engine.store.get_checkpoints(run.id)
            received = _received(events)
    # Waits of 2, 4, then 8 capped at 5, twice.
    assert [t - t0 for t in starts] == [0.0, 2.0, 6.0, 11.0, 16.0]
    assert failed_at - t0 == 16.0
    assert calls == {"always_fails": 5}
    assert info.value.message == "no 3"
    assert cp.status == "failed"
    assert cp.attempts == 5
    assert [e.message for e in cp.errors] == ["no 3"] * 5
    assert [e.type for e in cp.errors] == ["ValueError"] * 5
    assert cp.error == cp.errors[-1]
    assert cp.enqueued_at is not None
    assert cp.started_at is not None
    assert cp.finished_at is not None
    assert cp.finished_at - cp.enqueued_at == pytest.approx(16.0)
    # Each attempt's times are on its error; the checkpoint's start is the
    # last attempt's.
    assert [e.started_at - cp.enqueued_at for e in cp.errors if e.started_at] == [
        pytest.approx(t) for t in (0.0, 2.0, 6.0, 11.0, 16.0)
    ]
    assert [e.duration for e in cp.errors] == [0.0] * 5
    assert cp.started_at == cp.errors[-1].started_at
    step_events = [(e.kind, e.data["attempt"]) for e in received if e.kind.startswith("step.")]
    assert step_events == [
        (kind, attempt) for attempt in range(1, 6) for kind in ("step.started", "step.failed")
    ]
    finals = [e.data["final"] for e in received if e.kind == "step.failed"]
    assert finals == [False, False, False, False, True]


async def test_checkpoint_records_attempts_and_one_error_per_failed_attempt(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(run_step, "fails_twice", 21, run_id="r")
        assert await engine.result(run.id) == 42
        [cp] = await engine.store.get_checkpoints(run.id)
    assert [t - t0 for t in starts] == [0.0, 1.0, 3.0]
    assert cp.status == "completed"
    assert cp.output == "42"
    assert cp.attempts == 3
    assert cp.error is None
    assert [(e.message, e.code, e.details, e.type) for e in cp.errors] == [
        ("flaky attempt 1", "flaky", {"attempt": 1}, "Flaky"),
        ("flaky attempt 2", "flaky", {"attempt": 2}, "Flaky"),
    ]


def _delays(seed: int) -> list[float]:
    """The waits the engine's rng gives `jittery` (attempts 1 to 3 failed)."""
    rng = random.Random(seed)
    rng.getrandbits(32)  # the engine id is drawn first
    return [min(60.0, 1.0 * 2 ** (n - 1)) * rng.uniform(0.5, 1.5) for n in (1, 2, 3)]


async def _jitter_waits(open_test_engine: EngineFactory, seed: int) -> list[float]:
    starts.clear()
    await _run(open_test_engine, "jittery", 0, seed=seed)
    assert len(starts) == 4
    return [b - a for a, b in itertools.pairwise(starts)]


async def test_jitter_comes_from_the_seeded_rng(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    first = await _jitter_waits(open_test_engine, seed=1)
    again = await _jitter_waits(open_test_engine, seed=1)
    other = await _jitter_waits(open_test_engine, seed=2)
    assert first == pytest.approx(again, rel=1e-12)
    assert first != other
    for waits in (first, other):
        for n, wait in enumerate(waits, start=1):
            base = 2.0 ** (n - 1)
            assert 0.5 * base <= wait <= 1.5 * base
    assert first == pytest.approx(_delays(1), rel=1e-9)
    assert other == pytest.approx(_delays(2), rel=1e-9)


# -- errors that are not retried ----------------------------------------------


async def test_fatal_error_is_not_retried_and_its_code_and_details_reach_the_run(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(run_step, "fatal", 12, run_id="r")
        with pytest.raises(td.RunFailed) as info:
            await engine.result(run.id)
        assert trio.current_time() == t0  # no backoff was waited
        [cp] = await engine.store.get_checkpoints(run.id)
        stored = await engine.get(run.id)
    assert calls == {"fatal": 1}
    assert (info.value.message, info.value.code, info.value.details) == (
        "card declined",
        "card_declined",
        {"amount": 12, "tries": [1]},
    )
    assert stored.error is not None
    assert (stored.error.code, stored.error.details) == (
        "card_declined",
        {"amount": 12, "tries": [1]},
    )
    assert cp.attempts == 1
    assert cp.error is not None
    assert (cp.error.code, cp.error.details, cp.error.type) == (
        "card_declined",
        {"amount": 12, "tries": [1]},
        "FatalError",
    )
    assert len(cp.errors) == 1


async def test_exception_with_retryable_false_is_not_retried(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    stored = await _run(open_test_engine, "not_retryable", 0)
    assert calls == {"not_retryable": 1}
    assert stored.error is not None
    assert (stored.error.message, stored.error.code) == ("do not try again", None)


async def test_step_failure_caught_in_the_body_continues_and_replays_identically(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(catch_and_continue, 5, run_id="r")
        result = await engine.result(run.id)
        cps = await engine.store.get_checkpoints(run.id)
    expected = {
        "step": "fatal",
        "message": "card declined",
        "code": "card_declined",
        "details": {"amount": 5, "tries": [1]},
        "attempts": 1,
    }
    assert result == {"failure": expected, "after": 105}
    # The first turn ran the step, the turn after the timer replayed its
    # failure from the record: the same StepFailed, without running it.
    assert seen == [expected, expected]
    # Only the execution itself has the step's exception as the cause.
    assert causes == ["FatalError", None]
    assert calls == {"fatal": 1, "after": 1}
    assert [(cp.seq, cp.name, cp.status) for cp in cps] == [
        (1, "fatal", "failed"),
        (2, "sleep", "completed"),
        (3, "after", "completed"),
    ]


async def test_result_that_cannot_be_serialized_fails_the_step_without_retry(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(run_step, "unserializable", 0, run_id="r")
        with pytest.raises(td.RunFailed, match="cannot serialize"):
            await engine.result(run.id)
        assert trio.current_time() == t0
        [cp] = await engine.store.get_checkpoints(run.id)
    assert calls == {"unserializable": 1}
    assert (cp.status, cp.attempts, cp.output) == ("failed", 1, None)
    assert cp.error is not None
    assert cp.error.type == "SerializationError"


# -- timeouts -----------------------------------------------------------------


async def test_timeout_applies_per_attempt_and_is_retried(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    async with open_test_engine(app) as engine:
        t0 = trio.current_time()
        run = await engine.start(run_step, "slow_twice", 1, run_id="r")
        assert await engine.result(run.id) == 2
        assert trio.current_time() - t0 == 13.0
        [cp] = await engine.store.get_checkpoints(run.id)
    # Attempt 1 times out at 5 and waits 1; attempt 2 starts at 6, times out
    # at 11 and waits 2; attempt 3 starts at 13 and succeeds at once.
    assert [t - t0 for t in starts] == [0.0, 6.0, 13.0]
    assert cp.attempts == 3
    assert [e.code for e in cp.errors] == ["timeout", "timeout"]
    assert all("timed out" in e.message for e in cp.errors)


async def test_step_that_always_times_out_fails_with_code_timeout(
    open_test_engine: EngineFactory, autojump_clock: trio.abc.Clock
) -> None:
    t0 = trio.current_time()
    stored = await _run(open_test_engine, "always_slow", 1)
    assert trio.current_time() - t0 == 11.0  # 5 + 1 + 5
    assert [t - t0 for t in starts] == [0.0, 6.0]
    assert stored.error is not None
    assert stored.error.code == "timeout"


# -- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts": 0},
        {"attempts": -1},
        {"attempts": 1.5},
        {"attempts": True},
        {"backoff": -1.0},
        {"backoff": math.inf},
        {"backoff": math.nan},
        {"backoff": "1"},
        {"max_backoff": -0.5},
        {"max_backoff": math.inf},
        {"jitter": -0.1},
        {"jitter": 1.5},
        {"jitter": math.nan},
    ],
)
def test_retry_rejects_out_of_range_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(td.RegistrationError):
        td.Retry(**kwargs)


def test_retry_accepts_the_edges() -> None:
    retry = td.Retry(attempts=1, backoff=0, max_backoff=0, jitter=1.0)
    assert retry.delay(1, random.Random(0)) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout": 0},
        {"timeout": -1.0},
        {"timeout": math.inf},
        {"timeout": math.nan},
        {"timeout": True},
        {"retry": 3},
        {"retry": {"attempts": 3}},
        {"name": "has space"},
        {"name": "9starts-with-digit"},
    ],
)
def test_step_options_are_validated(kwargs: dict[str, Any]) -> None:
    local = td.App("validation")
    with pytest.raises(td.RegistrationError):

        @local.step(**kwargs)
        async def some_step() -> None:
            pass  # pragma: no cover

    assert local.steps == []


def test_step_must_be_async_and_unique() -> None:
    local = td.App("validation")

    def not_async() -> None:
        pass  # pragma: no cover

    async def some_step() -> None:
        pass  # pragma: no cover

    register: Callable[[Callable[[], Awaitable[None]]], td.Step[[], None]] = local.step()
    with pytest.raises(td.RegistrationError):
        register(not_async)  # type: ignore[arg-type]
    register(some_step)
    with pytest.raises(td.RegistrationError, match="already registered"):
        local.step()(some_step)
    assert [step.name for step in local.steps] == ["some_step"]


def _received(events: trio.MemoryReceiveChannel[td.Event]) -> list[td.Event]:
    out: list[td.Event] = []
    while True:
        try:
            out.append(events.receive_nowait())
        except trio.WouldBlock:
            return out
