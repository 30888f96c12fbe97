"""The `Context` a workflow body runs with: the durable operations.

Each operation checks its arguments here and is carried out by the module
that owns its mechanism, on the turn's `Replay` (see `_replay`): local steps
(`_local`), remote steps (`_remote`), timers and signals (`_waits`), child
runs (`_children`) and fans (`_fans`). A new timer, signal wait, child or
remote step records a pending checkpoint and suspends the run, which ends
the turn (the body is abandoned by raising `Suspend`), so a suspended run
holds no task; the next turn replays the body from the start.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Sequence
from typing import Any, Concatenate, Literal, final, overload

from .._base import _serde
from .._base._bounds import check_name, is_finite
from .._base._exceptions import GatherError, GatherFailure, UsageError
from .._base._records import CheckpointKind
from .._features.children._children import Failed, child_value, record_child
from .._features.children._fans import FAN_CANCELLED, fan
from .._features.determinism._argument_check import timer_due
from .._features.determinism._context_determinism import (
    DeterminismOperations,
    DeterminismState,
    inputs_of,
)
from .._features.hooks._webhooks import create_webhook
from .._features.messages._context_handlers import HandlerOperations
from .._features.messages._context_streams import StreamOperations
from .._features.search._context_search import SearchOperations
from .._features.steps._remote import remote_step
from .._features.waits._waits import signal, timer
from .._kernel._decider import child_command, step_command
from .._kernel._definitions import A1, A2, A3, A4, A5, P, R, Step, Workflow
from .._kernel._replay import Replay, Suspend
from ._context_control import ControlOperations


@final
class Context(
    ControlOperations, HandlerOperations, StreamOperations, DeterminismOperations, SearchOperations
):
    """What a workflow body uses to do durable work.

    A body is replayed from its start at every turn, so it must be
    deterministic: the same inputs and recorded results must lead to the same
    operations in the same order. Read time, randomness and the outside world
    only inside steps. Do not run durable operations concurrently (use
    `Context.all`), and do not catch ``BaseException`` in a body.
    """

    def __init__(self, replay: Replay) -> None:
        self._replay = replay
        self._determinism = DeterminismState()

    # -- who am I -------------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._replay.run.id

    @property
    def workflow(self) -> str:
        """The run's workflow name."""
        return self._replay.run.workflow

    @property
    def version(self) -> str:
        """The workflow version the run executes."""
        return self._replay.run.version

    @property
    def namespace(self) -> str:
        """The run's namespace (tenant)."""
        return self._replay.run.namespace

    @property
    def tags(self) -> tuple[str, ...]:
        """The run's tags."""
        return self._replay.run.tags

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
        dedup_key: str | None = None,
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
        dedup_key: str | None = None,
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
        dedup_key: str | None = None,
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
        dedup_key: str | None = None,
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
        dedup_key: str | None = None,
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
        dedup_key: str | None = None,
    ) -> R: ...

    async def step(
        self,
        step: Step[..., Any],
        /,
        *args: Any,
        compensate: Step[..., Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        dedup_key: str | None = None,
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
          dedup_key: With a flow-control queue: while a step sent through
            it with this key waits there (for its slot or its rate limit),
            this call is refused and raises `RemoteStepError` of code
            ``deduplicated``; at most one queued step per key and
            namespace.

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
          UsageError: ``step`` or ``compensate`` is not a registered step,
            or ``dedup_key`` is not a non-empty string or goes without a
            flow-control queue.
        """
        self._replay.check_step(step)
        if compensate is not None:
            self._replay.check_step(compensate)
            if compensate.remote:
                raise UsageError(
                    f"compensate= must be a local step, not the remote {compensate.name!r}"
                )
        self._before_op(
            step.name,
            "remote" if step.remote else "local",
            inputs_of(lambda: _serde.dump_args(args)),
        )
        if step.remote:
            replay, compensation = self._replay, compensate.name if compensate else None
            await replay.decider.before_step(replay, step, args, compensation, queue, dedup_key)
            replay.decider.reach(
                replay,
                step.name,
                "remote",
                1,
                lambda: step_command(replay, step, args, compensation, queue, priority, dedup_key),
            )
            return await remote_step(
                replay,
                step,
                args,
                compensation=compensation,
                flow_queue=queue,
                priority=priority,
                dedup_key=dedup_key,
            )
        if queue is not None or priority is not None or dedup_key is not None:
            raise UsageError(
                f"queue=, priority= and dedup_key= apply to remote steps; {step.name!r} is local"
            )
        return await self._local_step(step, args, compensate)

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
            or not is_finite(seconds)
            or seconds < 0
        ):
            raise UsageError(f"sleep seconds must be a finite number >= 0, not {seconds!r}")
        self._before_op("sleep", "timer", timer_due(float(seconds), None))
        self._reach_wait("sleep", "timer", {"op": "sleep", "seconds": float(seconds)})
        await timer(self._replay, lambda now: now + float(seconds))

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
        elif isinstance(when, int | float) and not isinstance(when, bool) and is_finite(when):
            target = float(when)
        else:
            raise UsageError(f"sleep_until needs epoch seconds or a datetime, not {when!r}")
        self._before_op("sleep", "timer", timer_due(None, target))
        self._reach_wait("sleep", "timer", {"op": "sleep", "until": target})
        await timer(self._replay, lambda now: target)

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
        check_name("signal name", name)
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not is_finite(timeout)
            or timeout < 0
        ):
            raise UsageError(f"signal timeout must be a finite number >= 0, not {timeout!r}")
        self._before_op(name, "signal", inputs_of(lambda: json.dumps({"timeout": timeout})))
        self._reach_wait(name, "signal", {"op": "signal", "name": name, "timeout": timeout})
        return await signal(self._replay, name, timeout, type)

    async def webhook(self, name: str) -> str:
        """Create a one-time callback durably and return its token (at
        least 128 random bits; the same on every replay). Delivering it
        (``POST /hooks/{token}``, `Client.deliver_webhook`) hands its JSON
        payload to this run as the signal ``name`` would: take it with
        ``await ctx.wait_signal(name)``. See docs/webhooks-and-breakpoints.md.
        """
        check_name("webhook name", name)
        token = self._replay.decider.webhook_token(self._replay, name)
        if token is not None:
            return token
        return await create_webhook(self._replay, name)

    def _reach_wait(self, name: str, kind: CheckpointKind, command: dict[str, Any]) -> None:
        """Before a wait: its decider's `reach` (a worker's stops the body
        at a wait the history has not settled, see `_decider`)."""
        self._replay.decider.reach(self._replay, name, kind, 1, lambda: dict(command))

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
        replay = self._replay
        wf = replay.workflow(workflow)
        self._before_op(wf.name, "child", inputs_of(lambda: _serde.dump_args(args)))
        replay.decider.reach(replay, wf.name, "child", 1, child_command(wf, args, awaited=True))
        seq = replay.next_seq()
        cp = replay.recorded(seq, wf.name, "child")
        if cp is None:
            child_id = f"{self.run_id}.child.{seq}"
            input_json = _serde.check_workflow_args(wf, args)
            self._start(wf, seq, child_id, input_json, awaited=True)
            raise Suspend("child")
        if cp.status == "pending":
            # Watched: the child may end while this turn holds the lease.
            raise Suspend("child", watch=(seq, seq))
        return child_value(replay.runtime.app, wf, cp)

    def _start(
        self, wf: Workflow[..., Any], seq: int, child_id: str, input_json: str, *, awaited: bool
    ) -> None:
        now = self._replay.runtime.clock.now()
        workflow = wf  # its run controls give the child its admission
        record_child(self._replay.turn, workflow, seq, child_id, input_json, now, awaited=awaited)

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
        seq, reserved up front. With ``concurrency``, at most that many
        members run at a time, in a sliding window: as soon as one ends,
        the waiting member of lowest index starts. The parent resumes once
        the fan ended, not once per member (see docs/fan-windows.md).

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
        self._before_fan(workflow, inputs)
        outcomes = await fan(self._replay, workflow, inputs, concurrency, mode)
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
        self._before_fan(workflow, inputs)
        outcomes = await fan(self._replay, workflow, inputs, concurrency, "settled")
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
