"""What a failure leaves behind for people: each attempt's error with its
type, step and traceback (local and remote alike), a log line per failed
attempt and per failed run, a `RunFailed` that names the step and carries
the traceback; and no non-finite number stored anywhere."""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_durable as td
from conftest import EngineFactory
from trio_durable._base._error_json import load_error, load_errors
from trio_durable._base._exceptions import RecordedTraceback
from trio_durable._base._records import ErrorInfo, bound_traceback

app = td.App("errors")


@app.step(retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def lookup(key: str) -> str:
    table: dict[str, str] = {}
    return table[key]


@app.workflow()
async def needs_lookup(ctx: td.Context, key: str) -> str:
    return await ctx.step(lookup, key)


@app.step(group="far", retry=td.Retry(attempts=2, backoff=1.0, jitter=0.0))
async def remote_boom(x: int) -> int:
    raise RuntimeError(f"remote {x}")


@app.workflow()
async def needs_remote(ctx: td.Context, x: int) -> int:
    return await ctx.step(remote_boom, x)


@app.workflow()
async def fails_after_a_sleep(ctx: td.Context, key: str) -> str:
    try:
        return await ctx.step(lookup, key)
    except td.StepFailed:
        # The next turn replays the step's failure from its record, where
        # the KeyError is no longer the live cause.
        await ctx.sleep(5)
        raise


@app.workflow()
async def parent(ctx: td.Context, key: str) -> list[Any]:
    try:
        await ctx.child(needs_lookup, key)
    except td.RunFailed as exc:
        return [exc.step, exc.traceback is not None and "KeyError: 'missing'" in exc.traceback]
    return []


def _deep(n: int) -> None:
    if n == 0:
        raise ValueError("at the bottom")
    _deep(n - 1)


@app.step(retry=td.Retry(attempts=1))
async def deep_failure(n: int) -> None:
    _deep(n)


@app.step(group="far", retry=td.Retry(attempts=1))
async def deep_remote_failure(n: int) -> None:
    _deep(n)


@app.workflow()
async def fails_deep(ctx: td.Context, n: int, remote: bool) -> None:
    await ctx.step(deep_remote_failure if remote else deep_failure, n)


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "trio_durable" and r.levelno == level]


# -- item 17: tracebacks ------------------------------------------------------


async def test_a_local_step_failure_records_type_step_and_traceback_on_each_attempt(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    async with open_test_engine(app) as engine:
        run = await engine.start(needs_lookup, "missing", run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
        stored = await engine.get(run.id)
    assert [(e.message, e.type, e.step) for e in cp.errors] == [
        ("'missing'", "KeyError", "lookup")
    ] * 2
    for error in cp.errors:
        assert error.traceback is not None
        assert error.traceback.startswith("Traceback (most recent call last):")
        assert "in lookup\n" in error.traceback
        assert error.traceback.endswith("KeyError: 'missing'\n")
    # The run's error names the step and keeps where it failed.
    run_error = stored.error
    assert run_error is not None
    assert (run_error.message, run_error.type, run_error.step) == (
        "'missing'",
        "StepFailed",
        "lookup",
    )
    assert run_error.traceback is not None
    assert "KeyError: 'missing'" in run_error.traceback
    assert "in needs_lookup\n" in run_error.traceback
    assert run_error.traceback.rstrip().endswith("StepFailed: step 'lookup' failed: 'missing'")
    # RunFailed carries both, and prints where the run failed.
    failure = caught.value
    assert (failure.step, failure.traceback) == ("lookup", run_error.traceback)
    assert isinstance(failure.__cause__, RecordedTraceback)
    assert failure.__cause__.traceback == run_error.traceback
    assert "KeyError: 'missing'" in str(failure.__cause__)
    # Printed with trio-durable's own frames folded, the user's first; the
    # traceback itself keeps every frame.
    assert failure.folded_traceback is not None
    assert str(failure.__cause__) == "\n" + failure.folded_traceback.rstrip("\n")
    assert "/trio_durable/" in (failure.traceback or "")
    assert "/trio_durable/" not in failure.folded_traceback
    folded_lines = failure.folded_traceback.splitlines()
    assert folded_lines[0] == "Traceback (most recent call last):"
    assert re.fullmatch(r"  \[\d+ trio-durable frames? folded\]", folded_lines[1])
    assert folded_lines[2].endswith(", in lookup")
    # One WARNING line per failed attempt (its traceback is in the history;
    # the log shows it at DEBUG only), one ERROR for the run (with its
    # traceback).
    warnings = _records(caplog, logging.WARNING)
    assert [r.getMessage() for r in warnings] == [
        "step 'lookup' of run 'r' failed (attempt 1 of 2): 'missing'",
        "step 'lookup' of run 'r' failed (attempt 2 of 2, final): 'missing'",
    ]
    assert [r.exc_info for r in warnings] == [None, None]
    [logged] = _records(caplog, logging.ERROR)
    assert logged.getMessage().startswith(
        "run 'r' (workflow 'needs_lookup') failed in step 'lookup': 'missing'\nTraceback"
    )
    assert "KeyError: 'missing'" in logged.getMessage()
    assert "/trio_durable/" not in logged.getMessage()
    assert "trio-durable frames folded]" in logged.getMessage()


async def test_a_remote_step_failure_keeps_type_and_traceback_across_the_broker(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_durable")
    async with open_test_engine(app, broker=td.MemoryBroker(), serve=["far"]) as engine:
        run = await engine.start(needs_remote, 4, run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
        stored = await engine.get(run.id)
    # Each attempt's error in errors (as a local step's), the last one's
    # as the error too.
    attempts = list(cp.errors)
    assert cp.error == attempts[-1]
    assert [(e and (e.message, e.type, e.step)) for e in attempts] == [
        ("remote 4", "RuntimeError", "remote_boom")
    ] * 2
    for error in attempts:
        assert error is not None
        assert error.traceback is not None
        assert "in remote_boom\n" in error.traceback
        assert error.traceback.endswith("RuntimeError: remote 4\n")
    assert stored.error is not None
    assert (stored.error.type, stored.error.step) == ("RemoteStepError", "remote_boom")
    assert caught.value.step == "remote_boom"
    assert caught.value.traceback is not None
    assert "RuntimeError: remote 4" in caught.value.traceback
    # The worker that ran each attempt logged it, one line each.
    worker_lines = [r for r in _records(caplog, logging.WARNING) if "on worker" in r.getMessage()]
    assert [r.exc_info for r in worker_lines] == [None, None]


async def test_a_failed_attempt_logs_its_exception_at_debug(
    open_test_engine: EngineFactory,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_durable")
    async with open_test_engine(app, broker=td.MemoryBroker(), serve=["far"]) as engine:
        local = await engine.start(needs_lookup, "missing", run_id="local")
        remote = await engine.start(needs_remote, 4, run_id="remote")
        for run in (local, remote):
            with pytest.raises(td.RunFailed):
                await engine.result(run.id)
    failed = [r for r in _records(caplog, logging.WARNING) if " failed " in r.getMessage()]
    # Both runs' attempts, each with its traceback under its line (the two
    # runs interleave), trio-durable's own frames folded so that the step's
    # frame comes right after the header.
    assert len(failed) == 4
    assert [r.exc_info for r in failed] == [None] * 4
    raised = sorted(r.getMessage().splitlines()[-1] for r in failed)
    assert raised == ["KeyError: 'missing'"] * 2 + ["RuntimeError: remote 4"] * 2
    for record in failed:
        _, header, folded, user, *_ = record.getMessage().splitlines()
        assert header == "Traceback (most recent call last):"
        assert re.fullmatch(r"  \[\d+ trio-durable frames? folded\]", folded)
        assert user.endswith(("in lookup", "in remote_boom"))


async def test_a_step_failure_replayed_from_its_record_keeps_its_traceback(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(fails_after_a_sleep, "missing", run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
    traceback = caught.value.traceback
    assert traceback is not None
    assert caught.value.step == "lookup"
    # The record's traceback stands as the cause of the replayed StepFailed.
    assert "in lookup\n" in traceback
    assert "KeyError: 'missing'" in traceback
    assert "The above exception was the direct cause of the following exception" in traceback
    assert "in fails_after_a_sleep\n" in traceback


async def test_a_failed_child_tells_its_parent_the_step_and_traceback(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    async with open_test_engine(app) as engine:
        run = await engine.start(parent, "missing", run_id="p")
        assert await engine.result(run.id) == ["lookup", True]


@pytest.mark.parametrize("remote", [False, True])
async def test_tracebacks_are_cut_to_traceback_limit(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, remote: bool
) -> None:
    limit = 400
    async with open_test_engine(
        app, broker=td.MemoryBroker(), serve=["far"], traceback_limit=limit
    ) as engine:
        run = await engine.start(fails_deep, 60, remote, run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
        stored = await engine.get(run.id)
    assert cp.error is not None
    assert stored.error is not None
    for text in (cp.error.traceback, stored.error.traceback, caught.value.traceback):
        assert text is not None
        assert len(text) <= limit
        # The start (where the chain begins) and the end (the exception
        # raised last) are kept; the middle is cut.
        assert text.startswith("Traceback (most recent call last):")
        assert "[... traceback cut to 400 characters ...]" in text
    assert cp.error.traceback is not None
    assert cp.error.traceback.endswith("ValueError: at the bottom\n")


@pytest.mark.parametrize("remote", [False, True])
async def test_a_traceback_limit_of_zero_records_none(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock, remote: bool
) -> None:
    async with open_test_engine(
        app, broker=td.MemoryBroker(), serve=["far"], traceback_limit=0
    ) as engine:
        run = await engine.start(fails_deep, 3, remote, run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
        stored = await engine.get(run.id)
    assert cp.error is not None
    assert stored.error is not None
    assert (cp.error.type, cp.error.step) == ("ValueError", cp.name)
    assert (cp.error.traceback, stored.error.traceback, caught.value.traceback) == (None,) * 3
    assert caught.value.__cause__ is None


async def test_a_standalone_workers_limit_bounds_what_it_sends(
    open_test_engine: EngineFactory, autojump_clock: trio.testing.MockClock
) -> None:
    broker = td.MemoryBroker()
    async with (
        open_test_engine(app, broker=broker) as engine,
        td.open_worker(app, broker=broker, groups=["far"], traceback_limit=100),
    ):
        run = await engine.start(fails_deep, 10, True, run_id="r")
        with pytest.raises(td.RunFailed):
            await engine.result(run.id)
        [cp] = await engine.store.get_checkpoints(run.id)
    assert cp.error is not None
    assert cp.error.traceback is not None
    assert len(cp.error.traceback) <= 100


@pytest.mark.parametrize("limit", [-1, 1.5, True, "8k", None])
async def test_traceback_limit_must_be_an_integer_of_zero_or_more(limit: object) -> None:
    with pytest.raises(td.UsageError, match="traceback_limit"):
        async with td.open_engine(app, traceback_limit=limit):  # type: ignore[arg-type]
            pass  # pragma: no cover
    with pytest.raises(td.UsageError, match="traceback_limit"):
        async with td.open_worker(app, groups=["far"], traceback_limit=limit):  # type: ignore[arg-type]
            pass  # pragma: no cover


def test_bound_traceback_keeps_the_start_and_the_longer_end() -> None:
    text = "".join(f"line {n}\n" for n in range(1000))
    cut = bound_traceback(text, 300)
    assert cut is not None
    assert len(cut) <= 300
    assert cut.startswith("line 0\n")
    assert cut.endswith("line 999\n")
    head, tail = cut.split("\n[... traceback cut to 300 characters ...]\n")
    assert len(tail) > len(head)
    assert bound_traceback(text, len(text)) == text
    assert bound_traceback(text, 0) is None
    assert bound_traceback("x" * 100, 10) == "x" * 10


def test_errors_stored_before_step_and_traceback_existed_still_load() -> None:
    old = load_error('{"message":"boom","code":"E","details":{"n":1},"type":"KeyError"}')
    assert old == ErrorInfo(message="boom", code="E", details={"n": 1}, type="KeyError")
    assert (old.step, old.traceback) == (None, None)
    assert load_errors('[{"message":"a"},{"message":"b","type":"T"}]') == (
        ErrorInfo(message="a"),
        ErrorInfo(message="b", type="T"),
    )
    new = ErrorInfo(message="m", type="KeyError", step="s", traceback="Traceback ...\n")
    assert ErrorInfo.from_json(new.to_json()).traceback == "Traceback ...\n"


# -- item 4: no non-finite number is stored -----------------------------------


@app.step()
async def nan_output() -> float:
    return math.nan


@app.step(group="far")
async def inf_remote_output() -> list[float]:
    return [1.0, math.inf]


@app.step()
async def nan_details() -> None:
    raise td.FatalError("bad", code="bad", details={"ratio": math.nan, "limit": -math.inf})


@app.workflow()
async def non_finite(ctx: td.Context, where: str) -> Any:
    if where == "local":
        return await ctx.step(nan_output)
    if where == "remote":
        return await ctx.step(inf_remote_output)
    if where == "details":
        return await ctx.step(nan_details)
    return {"mean": math.nan}


def _strict(text: str | None) -> None:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} stored in {text!r}")

    if text is not None:
        json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("where", ["local", "remote", "details", "workflow"])
async def test_a_non_finite_output_or_detail_is_never_stored(
    tmp_path: Path, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    async with td.open_engine(
        app, store=f"sqlite:///{path}", broker=td.MemoryBroker(), serve=["far"], seed=0
    ) as engine:
        run = await engine.start(non_finite, where, run_id="r")
        with pytest.raises(td.RunFailed) as caught:
            await engine.result(run.id)
    if where == "details":
        # The details are kept, as their repr: a string.
        assert caught.value.details == repr({"ratio": math.nan, "limit": -math.inf})
    else:
        assert "Out of range float values are not JSON compliant" in caught.value.message
    # Every JSON column in the file is strict JSON.
    with sqlite3.connect(path) as db:
        for table, columns in (
            ("runs", ("output", "error")),
            ("run_inputs", ("input",)),
            ("checkpoints", ("input", "output", "error", "errors")),
        ):
            for row in db.execute(f"SELECT {', '.join(columns)} FROM {table}"):
                for text in row:
                    _strict(text)
