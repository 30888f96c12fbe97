"""Failures as they are stored, and the exceptions a record raises again.

A step, remote step or run that fails is recorded as an `ErrorInfo`: its
message, code, JSON details, type, the step it failed in and, within a
limit, its traceback. On replay a failed checkpoint raises again as the
exception the body saw the first time (`StepFailed`, `RemoteStepError`).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback as _traceback
from typing import Any, Final

from ._exceptions import FatalError, RemoteStepError, RunFailed, StepFailed
from ._frames import folded_text
from ._nesting import nesting_exceeds
from ._records import Checkpoint, ErrorInfo, bound_traceback

LOST: Final = "lost"
"""The code of a step that got no result after its last redispatch."""

FAN_CANCELLED: Final = "fan_cancelled"
"""The error code of fan members a ``fail_fast`` fan cancelled."""


def error_info(
    exc: BaseException, *, step: str | None = None, traceback_limit: int = 0
) -> ErrorInfo:
    """The stored form of an exception: its message, code, JSON details and
    type, the step it failed (``step``, or the step a step failure names),
    and, if ``traceback_limit`` is not 0, its traceback cut to that many
    characters (see `format_traceback`)."""
    code = getattr(exc, "code", None)
    message = getattr(exc, "message", None)
    if not isinstance(message, str):
        message = str(exc) or type(exc).__name__
    if step is None and isinstance(exc, StepFailed | RemoteStepError | RunFailed):
        step = exc.step
    return ErrorInfo(
        message=message,
        code=code if isinstance(code, str) else None,
        details=json_details(getattr(exc, "details", None)),
        type=type(exc).__name__,
        step=step,
        traceback=format_traceback(exc, traceback_limit),
    )


def json_details(details: Any) -> Any:
    """``details`` if it is a payload the store and the wire accept (JSON,
    finite numbers only, not nested too deeply), else its ``repr``."""
    try:
        text = json.dumps(details, allow_nan=False)
        if not nesting_exceeds(details, text):
            return details
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        return repr(details)
    except RecursionError:
        return f"<{type(details).__name__} nested too deeply to show>"


def format_traceback(exc: BaseException, limit: int) -> str | None:
    """``exc``'s traceback as Python prints it, cut to ``limit`` characters
    (None if ``limit`` is 0).

    A step failure raised from a record (`StepFailed` on replay, a
    `RemoteStepError`, a child's `RunFailed`) has no live cause; the
    traceback recorded with it is shown as its cause instead, so a run that
    fails because a step failed keeps where the step failed.
    """
    if limit <= 0:
        return None
    text = "".join(_traceback.format_exception(exc))
    recorded = getattr(exc, "traceback", None)
    if (
        isinstance(exc, StepFailed | RemoteStepError | RunFailed)
        and isinstance(recorded, str)
        and exc.__cause__ is None
    ):
        text = (
            recorded.rstrip("\n")
            + "\n\nThe above exception was the direct cause of the following exception:\n\n"
            + text
        )
    return bound_traceback(text, limit)


def logged_traceback(logger: logging.Logger, exc: BaseException) -> str:
    """What the log line of a failed attempt adds after its message: nothing,
    unless ``logger`` logs DEBUG; then, on lines of their own, ``exc``'s
    traceback (see `format_traceback`) with trio-durable's own frames
    folded, so that the user's frames are what a reader meets first (the
    history keeps every frame, within the ``traceback_limit``)."""
    if not logger.isEnabledFor(logging.DEBUG):
        return ""
    text = format_traceback(exc, sys.maxsize) or ""
    return "\n" + folded_text(text.rstrip("\n"))


def retryable(exc: BaseException) -> bool:
    """Whether a step that raised ``exc`` may run again: not for a
    `FatalError`, nor for an exception whose ``retryable`` is False."""
    return not isinstance(exc, FatalError) and getattr(exc, "retryable", True) is not False


def step_failure(cp: Checkpoint) -> StepFailed | RemoteStepError:
    """What a failed step raises, from its checkpoint: `RemoteStepError`
    for a remote step, `StepFailed` for a local one."""
    error = cp.error or ErrorInfo(message="failed")
    cls = RemoteStepError if cp.kind == "remote" else StepFailed
    return cls(
        cp.name,
        error.message,
        code=error.code,
        details=error.details,
        attempts=cp.attempts,
        traceback=error.traceback,
    )
