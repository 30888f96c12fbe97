"""Replay: the `Context` a workflow body runs with.

Every durable operation takes the next seq. If the run's checkpoint at that
seq is settled, the operation returns (or raises) what was recorded, without
running again. If it is missing, the operation runs: a local step runs here
and its result is buffered as a write of this turn; a timer, a signal wait or
a child start records a pending checkpoint and suspends the run. Suspending
ends the turn (the body is abandoned by raising `Suspend`), so a suspended
run holds no task; the next turn replays the body from the start.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, Final, Literal, final, overload

import attrs
import trio

from . import _serde
from ._app import A1, A2, A3, A4, A5, P, R, Step, Workflow, workflow_of
from ._children import Failed, cancel_request, child_outcome, completion, record_child
from ._current import StepInfo, call_step
from ._exceptions import (
    GatherError,
    GatherFailure,
    NonDeterminismError,
    RunFailed,
    SerializationError,
    SignalTimeout,
    UsageError,
)
from ._failures import error_info, retryable, step_failure
from ._observe import Event, EventKind
from ._records import Checkpoint, CheckpointKind, ErrorInfo, FanMode, signal_token
from ._remote import check_fan_target, remote_fan, remote_step
from ._replay import Suspend, TurnState
from ._stores._base import Op, RemoveSignalWaiter, SettleCheckpoint, WaitSignal

if TYPE_CHECKING:
    from ._runtime import Runtime

logger = logging.getLogger("trio_durable")

FAN_CANCELLED: Final = "fan_cancelled"


@final
class Context:
    """What a workflow body uses to do durable work.

    A body is replayed from its start at every turn, so it must be
    deterministic: the same inputs and recorded results must lead to the same
    operations in the same order. Read time, randomness and the outside world
    only inside steps. Do not run durable operations concurrently (use
    `Context.all`), and do not catch ``BaseException`` in a body.
    """

    def __init__(self, runtime: Runtime, turn: TurnState) -> None:
        self._rt = runtime
        self._turn = turn
        self._seq = 0

    # -- who am I -------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._turn.run.id

    @property
    def workflow(self) -> str:
        """The run's workflow name."""
        return self._turn.run.workflow

    @property
    def version(self) -> str:
        """The workflow version the run executes."""
        return self._turn.run.version

    @property
    def namespace(self) -> str:
        """The run's namespace (tenant)."""
        return self._turn.run.namespace

    @property
    def tags(self) -> tuple[str, ...]:
        """The run's tags."""
        return self._turn.run.tags

    # -- replay ---------------------------------------------------------------

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _recorded(self, seq: int, name: str, kind: CheckpointKind) -> Checkpoint | None:
        if self._turn.nondeterminism is not None:
            # Replay already diverged (and the body caught the error): the run
            # fails, so it must not run steps or record anything more.
            raise self._turn.nondeterminism
        cp = self._turn.checkpoints.get(seq)
        if cp is not None and (cp.name != name or cp.kind != kind):
            error = NonDeterminismError(
                f"at seq {seq} the run recorded {cp.kind} {cp.name!r}, "
                f"but the workflow now asks for {kind} {name!r}",
                details={"seq": seq, "recorded": cp.name, "requested": name},
            )
            if self._turn.nondeterminism is None:
                self._turn.nondeterminism = error
            raise error
        return cp

    def _emit(self, kind: EventKind, seq: int | None, name: str | None, **data: Any) -> None:
        run = self._turn.run
        self._rt.telemetry.emit(
            Event(
                kind=kind,
                run_id=run.id,
                workflow=run.workflow,
                at=self._rt.clock.now(),
                seq=seq,
                name=name,
                data=data,
            )
        )

    # -- steps ----------------------------------------------------------------

    @overload
    async def step(
        self,
        step: Step[[], R],
        /,
        *,
        compensate: Step[[], Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    @overload
    async def step(
        self,
        step: Step[[A1], R],
        a1: A1,
        /,
        *,
        compensate: Step[[A1], Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    @overload
    async def step(
        self,
        step: Step[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
        *,
        compensate: Step[[A1, A2], Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    @overload
    async def step(
        self,
        step: Step[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        compensate: Step[[A1, A2, A3], Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    @overload
    async def step(
        self,
        step: Step[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
        *,
        compensate: Step[[A1, A2, A3, A4], Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    @overload
    async def step(
        self,
        step: Step[Concatenate[A1, A2, A3, A4, A5, P], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        *args: Any,
        compensate: Step[..., Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> R: ...

    async def step(
        self,
        step: Step[..., Any],
        /,
        *args: Any,
        compensate: Step[..., Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> Any:
        """Run a step durably and return its result.

        Its outcome is recorded, and on replay the recorded result is
        returned and the step does not run. But a step runs **at least
        once**, not exactly once: a local step whose turn ends before its
        result is recorded (the process dies, the turn's write fails) runs
        again when the run resumes, and a remote step's task may be
        delivered to a worker more than once. Make steps idempotent.
        A failed local step raises `StepFailed`, a failed remote step
        `RemoteStepError`, every time.

        Args:
          step: A step registered with `App.step`.
          *args: Its positional arguments (JSON-able values or attrs
            instances).
          compensate: A step that undoes this one. If the run later fails, or
            is cancelled with ``compensate=True``, the undos of its completed
            steps run in reverse order, each called with this step's
            arguments.
          queue: A flow-control queue (`App.queue`) to send a remote step
            through; defaults to the step's own ``queue=``.
          priority: A remote step's priority, higher first: in its
            flow-control queue, and (clamped to 0 to 9) for the delivery of
            its task on brokers that order by priority (RabbitMQ, the
            memory broker; not NATS). Defaults to the queue's, or 0.

        Calls are typed: a type checker checks ``args`` (and ``compensate``)
        against the step's parameters, for up to four of them (past that
        the first five), and the result has the step's return type.

        Raises:
          StepFailed: The local step failed for good.
          RemoteStepError: The remote step failed for good (code
            ``payload_too_large`` if its input or output was larger than
            the broker takes).
          InvalidArgumentsError: ``args`` do not fit the step's parameters
            (or ``compensate``'s); nothing is recorded for the call.
          SerializationError: An argument cannot be serialized.
          UsageError: ``step`` or ``compensate`` is not a registered step.
        """
        self._check_step(step)
        if compensate is not None:
            self._check_step(compensate)
            if compensate.remote:
                raise UsageError(
                    f"compensate= must be a local step, not the remote {compensate.name!r}"
                )
        if step.remote:
            return await remote_step(
                self,
                step,
                args,
                compensation=compensate.name if compensate else None,
                queue=queue,
                priority=priority,
            )
        if queue is not None or priority is not None:
            raise UsageError(f"queue= and priority= apply to remote steps; {step.name!r} is local")
        seq = self._next_seq()
        cp = self._recorded(seq, step.name, "local")
        if cp is not None and cp.status == "completed":
            return self._step_value(step, cp)
        if cp is not None and cp.status == "failed":
            raise step_failure(cp)
        input_json = _serde.check_step_args(step, args, compensate)
        return await self._execute(
            step, seq, list(args), input_json, compensation=compensate.name if compensate else None
        )

    def _check_step(self, step: object) -> None:
        if not isinstance(step, Step) or self._rt.app.get_step(step.name) is not step:
            raise UsageError(f"{step!r} is not a step registered in app {self._rt.app.name!r}")

    @staticmethod
    def _step_value(step: Step[..., Any], cp: Checkpoint) -> Any:
        _, returns = _serde.signature_types(step.fn)
        return _serde.loads(cp.output, returns)

    async def _execute(
        self,
        step: Step[..., Any],
        seq: int,
        args: list[Any],
        input_json: str,
        *,
        compensation: str | None = None,
        undo_of: int | None = None,
    ) -> Any:
        rt = self._rt
        clock = rt.clock
        retry = step.retry
        errors: list[ErrorInfo] = []
        started_at = clock.now()
        last_exc: BaseException | None = None
        extra = {} if undo_of is None else {"compensation": True, "undoes": undo_of}
        attempt = 0
        for attempt in range(1, retry.attempts + 1):
            self._emit("step.started", seq, step.name, attempt=attempt, **extra)
            attempt_start = trio.current_time()
            value: Any = None
            try:
                with trio.CancelScope() as scope:
                    if step.timeout is not None:
                        scope.relative_deadline = step.timeout
                    value = await call_step(self._step_info(step, seq, attempt), step.fn, args)
                if scope.cancelled_caught:
                    raise TimeoutError(f"step {step.name!r} timed out after {step.timeout} s")
                output = _serde.dumps(value)
            except Exception as exc:
                last_exc = exc
                info = error_info(exc, step=step.name, traceback_limit=rt.options.traceback_limit)
                if isinstance(exc, TimeoutError) and info.code is None:
                    info = attrs.evolve(info, code="timeout")
                errors.append(info)
                may_retry = retryable(exc) and not isinstance(exc, SerializationError)
                logger.warning(
                    "%s %r of run %r failed (attempt %d of %d%s): %s",
                    "undo" if undo_of is not None else "step",
                    step.name,
                    self.run_id,
                    attempt,
                    retry.attempts,
                    "" if may_retry and attempt < retry.attempts else ", final",
                    info.message,
                    exc_info=exc,
                )
                self._emit(
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
            self._emit(
                "step.completed",
                seq,
                step.name,
                attempt=attempt,
                duration=trio.current_time() - attempt_start,
                **extra,
            )
            self._turn.put(
                Checkpoint(
                    run_id=self.run_id,
                    seq=seq,
                    name=step.name,
                    kind="local",
                    status="completed",
                    input=input_json,
                    output=output,
                    errors=tuple(errors),
                    attempts=attempt,
                    compensation=compensation,
                    enqueued_at=started_at,
                    started_at=started_at,
                    finished_at=clock.now(),
                )
            )
            # Return what replay will return, not the live object, so the body
            # sees the same value on every turn.
            _, returns = _serde.signature_types(step.fn)
            return _serde.loads(output, returns)
        failed = Checkpoint(
            run_id=self.run_id,
            seq=seq,
            name=step.name,
            kind="local",
            status="failed",
            input=input_json,
            error=errors[-1],
            errors=tuple(errors),
            attempts=attempt,
            compensation=compensation,
            enqueued_at=started_at,
            started_at=started_at,
            finished_at=clock.now(),
        )
        self._turn.put(failed)
        raise step_failure(failed) from last_exc

    def _step_info(self, step: Step[..., Any], seq: int, attempt: int) -> StepInfo:
        run = self._turn.run
        return StepInfo(
            run_id=run.id,
            workflow=run.workflow,
            namespace=run.namespace,
            step=step.name,
            seq=seq,
            attempt=attempt,
        )

    # -- timers ---------------------------------------------------------------

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: the run suspends, holding no task, and resumes
        after ``seconds``, across engine restarts.

        Raises:
          UsageError: ``seconds`` is negative or not finite.
        """
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise UsageError(f"sleep seconds must be a finite number >= 0, not {seconds!r}")
        await self._timer(lambda now: now + float(seconds))

    async def sleep_until(self, when: float | datetime.datetime) -> None:
        """Sleep durably until ``when``: seconds since the Unix epoch, or an
        aware `datetime.datetime`.

        Raises:
          UsageError: ``when`` is not finite, or a naive datetime.
        """
        if isinstance(when, datetime.datetime):
            if when.tzinfo is None:
                raise UsageError("sleep_until needs an aware datetime (with tzinfo)")
            target = when.timestamp()
        elif isinstance(when, int | float) and not isinstance(when, bool) and math.isfinite(when):
            target = float(when)
        else:
            raise UsageError(f"sleep_until needs epoch seconds or a datetime, not {when!r}")
        await self._timer(lambda now: target)

    async def _timer(self, due: Callable[[float], float]) -> None:
        seq = self._next_seq()
        cp = self._recorded(seq, "sleep", "timer")
        now = self._rt.clock.now()
        if cp is None:
            wake_at = due(now)
            cp = Checkpoint(
                run_id=self.run_id,
                seq=seq,
                name="sleep",
                kind="timer",
                wake_at=wake_at,
                enqueued_at=now,
            )
            if wake_at > now:
                self._turn.put(cp)
        if cp.status != "pending":
            return
        assert cp.wake_at is not None
        if cp.wake_at > now:
            raise Suspend("timer", cp.wake_at)
        self._turn.put(attrs.evolve(cp, status="completed", finished_at=now))
        await trio.lowlevel.checkpoint()

    # -- signals --------------------------------------------------------------

    async def wait_signal(
        self,
        name: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (a durable timeout, not a cancel scope)
        type: Any = Any,
    ) -> Any:
        """Wait durably for the signal ``name`` and return its payload.

        A signal sent before the wait is buffered and taken by the first wait
        for its name; several signals of one name are taken in order.

        Args:
          name: The signal's name.
          timeout: Seconds to wait at most, or None to wait forever.
          type: The type to structure the payload as (default: plain JSON).

        Raises:
          SignalTimeout: ``timeout`` passed first.
        """
        if not isinstance(name, str) or not name:
            raise UsageError(f"signal name must be a non-empty string, not {name!r}")
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not math.isfinite(timeout)
            or timeout < 0
        ):
            raise UsageError(f"signal timeout must be a finite number >= 0, not {timeout!r}")
        seq = self._next_seq()
        cp = self._recorded(seq, name, "signal")
        token = signal_token(self.run_id, name)
        now = self._rt.clock.now()
        if cp is None:
            cp = Checkpoint(
                run_id=self.run_id,
                seq=seq,
                name=name,
                kind="signal",
                input=json.dumps({"timeout": timeout}),
                wake_at=None if timeout is None else now + timeout,
                enqueued_at=now,
            )
            self._turn.put(cp)
            # The store either hands over a buffered signal (settling the
            # checkpoint in the same write) or registers the waiter; the
            # engine wakes the run again when it handed one over.
            self._turn.ops.append(WaitSignal(token, self.run_id, seq, now))
            raise Suspend("signal", cp.wake_at)
        if cp.status == "completed":
            return _serde.loads(cp.output, type)
        recorded_timeout = json.loads(cp.input or "{}").get("timeout")
        if cp.status == "failed":
            raise SignalTimeout(name, recorded_timeout)
        if cp.wake_at is None or cp.wake_at > now:
            raise Suspend("signal", cp.wake_at)
        # The timeout is due. It settles the checkpoint by a claim, so that a
        # signal delivered at the same moment either wins or loses whole.
        store = self._rt.store
        settled, _ = await store.apply(
            [
                SettleCheckpoint(
                    self.run_id,
                    seq,
                    "failed",
                    error=ErrorInfo(message=f"signal {name!r} timed out", code=SignalTimeout.code),
                    finished_at=now,
                ),
                RemoveSignalWaiter(token),
            ]
        )
        if settled is not None:
            self._turn.checkpoints[seq] = settled
            raise SignalTimeout(name, recorded_timeout)
        [fresh] = await store.get_checkpoints(self.run_id, seq, seq)
        self._turn.checkpoints[seq] = fresh
        return _serde.loads(fresh.output, type)

    # -- children -------------------------------------------------------------

    @overload
    async def child(
        self,
        workflow: Workflow[[], R],
        /,
    ) -> R: ...

    @overload
    async def child(
        self,
        workflow: Workflow[[A1], R],
        a1: A1,
        /,
    ) -> R: ...

    @overload
    async def child(
        self,
        workflow: Workflow[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
    ) -> R: ...

    @overload
    async def child(
        self,
        workflow: Workflow[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
    ) -> R: ...

    @overload
    async def child(
        self,
        workflow: Workflow[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
    ) -> R: ...

    @overload
    async def child(
        self,
        workflow: Workflow[Concatenate[A1, A2, A3, A4, A5, P], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        *args: Any,
    ) -> R: ...

    @overload
    async def child(self, workflow: str, /, *args: Any) -> Any: ...

    async def child(self, workflow: Workflow[..., Any] | str, /, *args: Any) -> Any:
        """Run a child workflow and wait for its result.

        The child's id is ``<this run>.child.<seq>``. The parent suspends
        while the child runs and resumes when it ends. Calls are typed as
        `Engine.start`'s are; the result has the workflow's return type.

        Raises:
          RunFailed: The child failed or was cancelled; its error's code and
            details are the exception's.
          InvalidArgumentsError: ``args`` do not fit the workflow's
            parameters; no child is started.
        """
        wf = workflow_of(self._rt.app, workflow)
        seq = self._next_seq()
        cp = self._recorded(seq, wf.name, "child")
        if cp is None:
            child_id = f"{self.run_id}.child.{seq}"
            self._create_child(
                wf, seq, child_id, _serde.check_workflow_args(wf, args), awaited=True
            )
            raise Suspend("child")
        if cp.status == "pending":
            # Watched: the child may end while this turn holds the lease.
            raise Suspend("child", watch=(seq, seq))
        value = self._child_outcome(wf, cp)
        if isinstance(value, Failed):
            recorded = cp.error or ErrorInfo(message=value.error)
            raise RunFailed(
                cp.child_id or "",
                value.error,
                value.code,
                value.details,
                step=recorded.step,
                traceback=recorded.traceback,
            )
        return value

    @overload
    async def start_child(
        self,
        workflow: Workflow[[], R],
        /,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1], R],
        a1: A1,
        /,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1, A2, A3, A4], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        /,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[Concatenate[A1, A2, A3, A4, A5, P], R],
        a1: A1,
        a2: A2,
        a3: A3,
        a4: A4,
        a5: A5,
        /,
        *args: Any,
    ) -> str: ...

    @overload
    async def start_child(self, workflow: str, /, *args: Any) -> str: ...

    async def start_child(self, workflow: Workflow[..., Any] | str, /, *args: Any) -> str:
        """Start a child workflow without waiting for it; return its id.

        The child starts once this turn's writes are durable. Its end does not
        wake the parent, and cancelling the parent does not cancel it.

        Raises:
          InvalidArgumentsError: ``args`` do not fit the workflow's
            parameters; no child is started.
        """
        wf = workflow_of(self._rt.app, workflow)
        seq = self._next_seq()
        cp = self._recorded(seq, wf.name, "child")
        if cp is not None:
            return cp.child_id or ""
        child_id = f"{self.run_id}.child.{seq}"
        self._create_child(wf, seq, child_id, _serde.check_workflow_args(wf, args), awaited=False)
        await trio.lowlevel.checkpoint()
        return child_id

    def _create_child(
        self,
        wf: Workflow[..., Any],
        seq: int,
        child_id: str,
        input_json: str,
        *,
        awaited: bool,
        fan: tuple[int, int, FanMode] | None = None,
    ) -> None:
        record_child(
            self._turn,
            (wf.name, wf.version),
            seq,
            child_id,
            input_json,
            self._rt.clock.now(),
            awaited=awaited,
            fan=fan,
        )

    def _child_outcome(self, wf: Workflow[..., Any], cp: Checkpoint) -> Any:
        return child_outcome(self._rt.app, wf, cp)

    # -- fans -----------------------------------------------------------------

    @overload
    async def all(
        self,
        workflow: Workflow[[A1], R] | Step[[A1], R],
        inputs: Sequence[A1],
        *,
        concurrency: int | None = None,
        mode: Literal["fail_fast", "wait_all"] = "fail_fast",
    ) -> list[R]: ...

    @overload
    async def all(
        self,
        workflow: str,
        inputs: Sequence[Any],
        *,
        concurrency: int | None = None,
        mode: Literal["fail_fast", "wait_all"] = "fail_fast",
    ) -> list[Any]: ...

    async def all(
        self,
        workflow: Workflow[..., Any] | Step[..., Any] | str,
        inputs: Sequence[Any],
        *,
        concurrency: int | None = None,
        mode: Literal["fail_fast", "wait_all"] = "fail_fast",
    ) -> list[Any]:
        """Run a child workflow, or a remote step, once per input and return
        their results in input order.

        Member ``i`` has the id ``<this run>.all.<first seq>.<i>`` and is
        called with ``inputs[i]`` as its one argument. Each member takes one
        seq, reserved up front. With ``concurrency``,
        members start in waves of that size, each once the previous one
        drained. The parent resumes once per wave, not once per member.

        Args:
          mode: ``"fail_fast"`` raises at the first failure and cancels the
            members still running (with their compensation); members not yet
            started never start. ``"wait_all"`` lets every member end first.

        Calls are typed: a type checker checks that the workflow (after its
        context) or the step takes one input of the type ``inputs`` hold,
        and the result is a list of its return type.

        Raises:
          GatherError: Members failed; it lists them in input order.
          InvalidArgumentsError: An input does not fit the member's
            parameters; no member is started.
        """
        if mode not in ("fail_fast", "wait_all"):
            raise UsageError(f"fan mode must be 'fail_fast' or 'wait_all', not {mode!r}")
        outcomes = await self._fan(workflow, inputs, concurrency, mode)
        failures = [
            GatherFailure(index=i, id=o.id, error=o.error, code=o.code, details=o.details)
            for i, o in enumerate(outcomes)
            if isinstance(o, Failed) and o.code != FAN_CANCELLED
        ]
        if failures:
            raise GatherError(failures, len(outcomes))
        return outcomes

    @overload
    async def all_settled(
        self,
        workflow: Workflow[[A1], Any] | Step[[A1], Any],
        inputs: Sequence[A1],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]: ...

    @overload
    async def all_settled(
        self,
        workflow: str,
        inputs: Sequence[Any],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]: ...

    async def all_settled(
        self,
        workflow: Workflow[..., Any] | Step[..., Any] | str,
        inputs: Sequence[Any],
        *,
        concurrency: int | None = None,
    ) -> list[dict[str, Any]]:
        """Like `Context.all`, but wait for every member and never raise for a
        member's failure.

        A type checker checks ``inputs`` as for `Context.all`. The items stay
        plain dicts (typed ``dict[str, Any]``): they are JSON as they are,
        fit to be a workflow's output.

        Returns:
          One dict per input, in order: ``{"status": "fulfilled", "value": v}``
          or ``{"status": "rejected", "id", "error", "code", "details"}``.
        """
        outcomes = await self._fan(workflow, inputs, concurrency, "settled")
        settled: list[dict[str, Any]] = []
        for outcome in outcomes:
            if isinstance(outcome, Failed):
                settled.append(
                    {
                        "status": "rejected",
                        "id": outcome.id,
                        "error": outcome.error,
                        "code": outcome.code,
                        "details": outcome.details,
                    }
                )
            else:
                settled.append({"status": "fulfilled", "value": outcome})
        return settled

    async def _fan(
        self,
        workflow: Workflow[..., Any] | Step[..., Any] | str,
        inputs: Sequence[Any],
        concurrency: int | None,
        mode: FanMode,
    ) -> list[Any]:
        check_fan_target(workflow)
        if isinstance(workflow, Step):
            self._check_step(workflow)
        else:
            wf = workflow_of(self._rt.app, workflow)
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            raise UsageError(f"fan inputs must be a sequence, not {type(inputs).__name__}")
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise UsageError(f"fan concurrency must be a positive integer, not {concurrency!r}")
        if inputs and self._turn.checkpoints.get(self._seq + 1) is None:
            # A new fan: every input must fit before its first member starts.
            # Once a member is recorded, the inputs were checked on the turn
            # that started it, and checking them again on each wave's turn
            # would cost O(members) per wave.
            for value in inputs:
                if isinstance(workflow, Step):
                    _serde.check_step_args(workflow, (value,), None)
                else:
                    _serde.check_workflow_args(wf, (value,))
        total = len(inputs)
        first = self._seq + 1
        self._seq += total
        if total == 0:
            await trio.lowlevel.checkpoint()
            return []
        if isinstance(workflow, Step):
            return await remote_fan(self, workflow, inputs, concurrency, mode, first)
        members = [self._recorded(first + i, wf.name, "child") for i in range(total)]
        fan_id = f"{self.run_id}.all.{first}"

        def failed(cp: Checkpoint | None) -> bool:
            return cp is not None and cp.status == "failed" and not _cancelled_by_fan(cp)

        if mode == "fail_fast" and any(failed(cp) for cp in members):
            members = await self._freeze_fan(wf, first, fan_id, members)
        elif any(cp is not None and cp.status == "pending" for cp in members):
            raise Suspend("fan", watch=(first, first + total - 1))
        else:
            unstarted = [i for i, cp in enumerate(members) if cp is None]
            if unstarted:
                wave = unstarted if concurrency is None else unstarted[:concurrency]
                for i in wave:
                    self._create_child(
                        wf,
                        first + i,
                        f"{fan_id}.{i}",
                        _serde.dump_args([inputs[i]]),
                        awaited=True,
                        fan=(first, total, mode),
                    )
                raise Suspend("fan")
        outcomes: list[Any] = []
        for i, cp in enumerate(members):
            assert cp is not None
            outcome = self._child_outcome(wf, cp)
            if isinstance(outcome, Failed):
                outcome = attrs.evolve(outcome, id=cp.child_id or f"{fan_id}.{i}")
            outcomes.append(outcome)
        return outcomes

    async def _freeze_fan(
        self,
        wf: Workflow[..., Any],
        first: int,
        fan_id: str,
        members: list[Checkpoint | None],
    ) -> list[Checkpoint | None]:
        """End a fail_fast fan: settle every member still pending or not yet
        started as cancelled, and tell the running children to cancel, in one
        write, so that results arriving later change nothing."""
        now = self._rt.clock.now()
        error = ErrorInfo(message="cancelled: another member of the fan failed", code=FAN_CANCELLED)
        cancelled_output = completion(False, error=error)
        ops: list[Op] = []
        pending: list[int] = []
        for i, cp in enumerate(members):
            if cp is None:
                self._turn.put(
                    Checkpoint(
                        run_id=self.run_id,
                        seq=first + i,
                        name=wf.name,
                        kind="child",
                        status="failed",
                        output=cancelled_output,
                        error=error,
                        child_id=None,
                        parallel_group=first,
                        parallel_size=len(members),
                        parallel_mode="fail_fast",
                        enqueued_at=now,
                        finished_at=now,
                    )
                )
            elif cp.status == "pending":
                pending.append(i)
                ops.append(
                    SettleCheckpoint(
                        self.run_id, cp.seq, "failed", cancelled_output, error, finished_at=now
                    )
                )
                assert cp.child_id is not None
                ops.append(cancel_request(cp.child_id, True, now))
        if ops:
            results = await self._rt.store.apply(ops)
            for n, i in enumerate(pending):
                settled = results[2 * n]
                child_id = members[i].child_id  # type: ignore[union-attr]
                if settled is None:
                    # The member settled on its own just before: keep its result.
                    [settled] = await self._rt.store.get_checkpoints(
                        self.run_id, first + i, first + i
                    )
                self._turn.checkpoints[first + i] = settled
                if results[2 * n + 1] and child_id is not None:
                    self._rt.scheduler.interrupt(child_id)
                    self._rt.scheduler.wake(child_id)
        return [self._turn.checkpoints.get(first + i) for i in range(len(members))]



def _cancelled_by_fan(cp: Checkpoint) -> bool:
    return cp.error is not None and cp.error.code == FAN_CANCELLED
