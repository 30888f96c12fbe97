"""Attempt times: each attempt of a step keeps when it started and ended
(on its error, for a failed one; the last one's are the checkpoint's own),
and rows written before attempts had times read without them."""

from __future__ import annotations

import json
from typing import Any

import pytest

import trio_durable as td
from trio_durable._base._error_json import dump_errors, load_errors
from trio_durable._base._records import Checkpoint, ErrorInfo
from trio_durable._wire._decision_checks import error_field
from trio_durable._wire._messages import WireError


def test_an_error_without_times_reads_as_it_did() -> None:
    # The JSON of an error as releases before wrote it.
    [old] = load_errors('[{"message":"boom","code":"x"}]')
    assert (old.started_at, old.finished_at, old.duration) == (None, None, None)
    timed = ErrorInfo(message="boom", started_at=5.0, finished_at=7.5)
    [back] = load_errors(dump_errors((timed,)))
    assert (back.started_at, back.finished_at, back.duration) == (5.0, 7.5, 2.5)
    # Times are for people: they take no part in comparing errors.
    assert back == old.__class__(message="boom")
    # Something else where a time should be reads as no time.
    [odd] = load_errors(json.dumps([{"message": "m", "started_at": "soon", "finished_at": True}]))
    assert (odd.started_at, odd.finished_at) == (None, None)


def test_an_error_from_a_worker_must_carry_numbers_for_times() -> None:
    error = error_field({"message": "m", "started_at": 1, "finished_at": 2.5})
    assert error is not None
    assert (error.started_at, error.finished_at) == (1.0, 2.5)
    with pytest.raises(WireError, match="started_at"):
        error_field({"message": "m", "started_at": "yesterday"})


def _local(**fields: Any) -> Checkpoint:
    fields.setdefault("attempts", 3)
    return Checkpoint(run_id="r", seq=1, name="s", kind="local", **fields)


def test_the_attempt_log_of_a_step() -> None:
    errors = (
        ErrorInfo(message="one", started_at=10.0, finished_at=11.0),
        ErrorInfo(message="two", started_at=13.0, finished_at=13.5),
    )
    cp = _local(
        status="completed", errors=errors, enqueued_at=10.0, started_at=17.0, finished_at=20.0
    )
    log = td.HistoryEntry.of(cp).attempt_log
    assert [(a.number, a.status, a.started_at, a.finished_at, a.duration) for a in log] == [
        (1, "failed", 10.0, 11.0, 1.0),
        (2, "failed", 13.0, 13.5, 0.5),
        (3, "completed", 17.0, 20.0, 3.0),
    ]
    assert [a.error for a in log] == [*errors, None]
    # A failed step's last attempt is its last error.
    failed = td.HistoryEntry.of(
        _local(status="failed", error=errors[-1], errors=errors, attempts=2, started_at=13.0)
    )
    assert [a.status for a in failed.attempt_log] == ["failed", "failed"]
    # Operations that are not steps have no attempts.
    timer = Checkpoint(run_id="r", seq=2, name="sleep", kind="timer", status="completed")
    assert td.HistoryEntry.of(timer).attempt_log == ()


def test_a_local_step_recorded_before_attempt_times_shows_no_times_it_does_not_know() -> None:
    # Then a local step's start was its first attempt's: not the last one's.
    untimed = (ErrorInfo(message="one"), ErrorInfo(message="two"))
    cp = _local(
        status="completed", errors=untimed, enqueued_at=10.0, started_at=10.0, finished_at=20.0
    )
    log = td.HistoryEntry.of(cp).attempt_log
    assert [(a.number, a.status, a.started_at, a.finished_at) for a in log] == [
        (1, "failed", None, None),
        (2, "failed", None, None),
        (3, "completed", None, 20.0),
    ]
    # One attempt only: its start is the step's, then as now.
    single = _local(status="completed", attempts=1, started_at=10.0, finished_at=12.0)
    [only] = td.HistoryEntry.of(single).attempt_log
    assert only.duration == 2.0
