"""Local steps: steps that run in the engine process, inside the turn.

A local step runs with its retry policy and timeout right where the body
calls it; each failed attempt is logged, emitted and kept (with its
traceback, within the engine's ``traceback_limit``), and its final outcome
is recorded as one checkpoint, written with the rest of the turn. On replay
the recorded value is returned, or the recorded failure raised again as
`StepFailed`. The saga runs undos through the same code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from ..._base import _serde
from ..._base._current import StepInfo, call_step
from ..._base._exceptions import SerializationError
from ..._base._failures import error_info, logged_traceback, retryable, step_failure
from ..._base._records import Checkpoint, CheckpointStatus, ErrorInfo
from ..._kernel._definitions import Step
from ..._kernel._replay import Replay, recorded_value
from ..._wire._tracing import attributes
from ._breakpoints import PAUSED, marked, pause_before, pause_command, suspend_if_paused

logger = logging.getLogger("trio_durable")


async def local_step(
    replay: Replay,
    step: Step[..., Any],
    args: Sequence[Any],
    compensate: Step[..., Any] | None,
) -> Any:
    """`Context.step` for a step that runs here: replayed if recorded, else
    run now."""
    if replay.decider.pauses(step.name):
        at = replay.turn.checkpoints.get(replay.peek())
        if at is None or marked(at, PAUSED):
            # A worker deciding: the engine pauses the run before the step.
            input_json = _serde.check_step_args(step, args, compensate)
            compensation = compensate.name if compensate else None
            replay.decider.reach(
                replay,
                step.name,
                "local",
                1,
                lambda: pause_command(step.name, input_json, compensation),
            )
    seq = replay.next_seq()
    cp = replay.recorded(seq, step.name, "local")
    if cp is not None and cp.status == "completed":
        return recorded_value(step, cp)
    if cp is not None and cp.status == "failed":
        raise step_failure(cp)
    # Pending only when a breakpoint paused the run here: it suspends
    # again, or, continued, runs the step now.
    suspend_if_paused(cp)
    input_json = _serde.check_step_args(step, args, compensate)
    if cp is None:
        compensation = compensate.name if compensate else None
        await pause_before(replay, seq, step.name, "local", input_json, compensation)
    return await execute(
        replay,
        step,
        seq,
        list(args),
        input_json,
        compensation=compensate.name if compensate else None,
    )


async def execute(
    replay: Replay,
    step: Step[..., Any],
    seq: int,
    args: list[Any],
    input_json: str,
    *,
    compensation: str | None = None,
    undo_of: int | None = None,
) -> Any:
    """Run a local step at ``seq`` with its retries and timeout, and record
    its outcome in the turn.

    Args:
      compensation: The name of the step that undoes this one.
      undo_of: For an undo, the seq of the step it undoes.

    Raises:
      StepFailed: It failed for good; the last attempt's exception is its
        cause.
    """
    rt, run = replay.runtime, replay.run
    clock = rt.clock
    retry = step.retry
    errors: list[ErrorInfo] = []
    started_at = clock.now()
    last_exc: BaseException | None = None
    attempt_started_at = started_at
    extra = {} if undo_of is None else {"compensation": True, "undoes": undo_of}
    attempt = 0

    def record(status: CheckpointStatus, output: str | None, error: ErrorInfo | None) -> Checkpoint:
        cp = Checkpoint(
            run_id=run.id,
            seq=seq,
            name=step.name,
            kind="local",
            status=status,
            input=input_json,
            output=output,
            error=error,
            errors=tuple(errors),
            attempts=attempt,
            compensation=compensation,
            # The step's first attempt started when it was recorded; the
            # checkpoint's own start is its last attempt's, as a remote
            # step's is, and the attempts before keep theirs on their errors.
            enqueued_at=started_at,
            started_at=attempt_started_at,
            finished_at=clock.now(),
        )
        replay.turn.put(cp)
        return cp

    for attempt in range(1, retry.attempts + 1):
        replay.emit("step.started", seq, step.name, attempt=attempt, **extra)
        attempt_start = trio.current_time()
        # The first attempt starts as the step does (one reading of the clock).
        attempt_started_at = started_at if attempt == 1 else clock.now()
        value: Any = None
        try:
            with rt.tracing.span(f"step {step.name}", _span_attributes(replay, step, seq, attempt)):
                with trio.CancelScope() as scope:
                    if step.timeout is not None:
                        scope.deadline = trio.current_time() + step.timeout
                    value = await call_step(_step_info(replay, step, seq, attempt), step.fn, args)
                if scope.cancelled_caught:
                    raise TimeoutError(f"step {step.name!r} timed out after {step.timeout} s")
                output = _serde.dumps(value)
        except Exception as exc:
            last_exc = exc
            info = error_info(exc, step=step.name, traceback_limit=rt.options.traceback_limit)
            if isinstance(exc, TimeoutError) and info.code is None:
                info = attrs.evolve(info, code="timeout")
            info = attrs.evolve(info, started_at=attempt_started_at, finished_at=clock.now())
            errors.append(info)
            may_retry = retryable(exc) and not isinstance(exc, SerializationError)
            logger.warning(
                "%s %r of run %r failed (attempt %d of %d%s): %s%s",
                "undo" if undo_of is not None else "step",
                step.name,
                run.id,
                attempt,
                retry.attempts,
                "" if may_retry and attempt < retry.attempts else ", final",
                info.message,
                # The traceback is in the history; the log shows it only
                # when asked for everything (a retried failure is routine),
                # trio-durable's own frames folded.
                logged_traceback(logger, exc),
                extra={"run_id": run.id, "workflow": run.workflow, "step": step.name},
            )
            replay.emit(
                "step.failed",
                seq,
                step.name,
                attempt=attempt,
                duration=trio.current_time() - attempt_start,
                error=info.message,
                code=info.code,
                final=not may_retry or attempt == retry.attempts,
                **extra,
            )
            if not may_retry:
                break
            if attempt < retry.attempts:
                await trio.sleep(retry.delay(attempt, rt.rng))
            continue
        replay.emit(
            "step.completed",
            seq,
            step.name,
            attempt=attempt,
            duration=trio.current_time() - attempt_start,
            **extra,
        )
        # Return what replay will return, not the live object, so the body
        # sees the same value on every turn.
        return recorded_value(step, record("completed", output, None))
    raise step_failure(record("failed", None, errors[-1])) from last_exc


def _span_attributes(
    replay: Replay, step: Step[..., Any], seq: int, attempt: int
) -> dict[str, str | int]:
    run = replay.run
    return attributes(
        run_id=run.id,
        workflow=run.workflow,
        step=step.name,
        seq=seq,
        attempt=attempt,
        namespace=run.namespace,
    )


def _step_info(replay: Replay, step: Step[..., Any], seq: int, attempt: int) -> StepInfo:
    run = replay.run
    return StepInfo(
        run_id=run.id,
        workflow=run.workflow,
        namespace=run.namespace,
        step=step.name,
        seq=seq,
        attempt=attempt,
    )
