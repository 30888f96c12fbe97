"""The workflow-control operations of `Context`: ending a run to continue
as a new generation, messaging another run, starting children (cancelled
with their parent if asked) and calling keyed entities.

`Context` inherits them from `ControlOperations`; each works on the turn's
`Replay` as the operations of `_context` do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Concatenate, NoReturn, overload

import attrs
import trio

from .._base import _serde
from .._base._current import current_step
from .._base._exceptions import (
    ContinueAsNewError,
    InvalidArgumentsError,
    SerializationError,
    UsageError,
)
from .._base._records import CheckpointKind
from .._base._search_values import check_attributes
from .._features.children._children import record_child
from .._features.determinism._argument_check import Arguments, sent_signal
from .._features.entities._entities import EntityRef, workflow_entity
from .._features.lifecycle._lifecycle import ContinueAsNew, started_output
from .._features.messages._run_signals import check_signal, send_signal
from .._kernel._decider import child_command
from .._kernel._definitions import A1, A2, A3, A4, A5, P, R, Workflow
from .._kernel._learned import search_types
from .._kernel._replay import Replay


class ControlOperations:
    """Workflow-control operations of `Context` (see `Context`)."""

    _replay: Replay

    if TYPE_CHECKING:

        def _before_op(
            self,
            name: str,
            kind: CheckpointKind,
            arguments: Arguments | None,
            *,
            recorded: Arguments | None = None,
        ) -> None: ...

    # -- continue-as-new --------------------------------------------------------

    def continue_as_new(self, *args: Any) -> NoReturn:
        """End this run and start its next generation with ``args``, with
        a fresh history.

        The run ends ``completed`` with output None, and its next
        generation, ``<first run's id>.gen.<n>`` (n = 2, 3, ...), of the
        same workflow and version, namespace, tags and parent, is created
        in the same write; its whole-run deadline, if any, carries over.
        ``result()`` on any generation waits for the chain's last one;
        `Engine.signal` and `Engine.cancel` act on the latest. A loop that
        continues every so many iterations keeps each run's history small.
        Signals a generation has not taken stay with it.

        Call it from the body, not from a step: it raises and never returns.

        Raises:
          ContinueAsNewError: It was called inside a step, or ``args`` do
            not fit the workflow's parameters; nothing is written.
        """
        try:
            step = current_step()
        except UsageError:
            pass
        else:
            raise ContinueAsNewError(
                f"continue_as_new was called inside step {step.step!r}; call it from the"
                " workflow body"
            )
        replay = self._replay
        if replay.turn.nondeterminism is not None:
            raise replay.turn.nondeterminism
        run = replay.run
        wf = replay.runtime.app.get_workflow(run.workflow, run.version)
        try:
            input_json = _serde.check_workflow_args(wf, args)
        except (InvalidArgumentsError, SerializationError) as exc:
            raise ContinueAsNewError(f"cannot continue as new: {exc}") from exc
        raise ContinueAsNew(input_json)

    # -- signals to other runs ----------------------------------------------------

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> None:
        """Send the signal ``name`` with ``payload`` to the run ``run_id``,
        durably and exactly once per key.

        The target takes it with ``ctx.wait_signal(name)`` (or finds it
        buffered). The delivery, this call's checkpoint and the claim of
        the key are one atomic write: a replay of this call, a retry of the
        run, or another run sending with the same key delivers nothing
        more. A target that continued as new gets it at its latest
        generation.

        Args:
          run_id: The target run's id (in this run's namespace).
          name: The signal's name.
          payload: Its payload (a JSON-able value or an attrs instance).
          idempotency_key: The key it is sent once for; by default this
            run's id and this call's seq (so each call sends once).

        Raises:
          SignalTargetNotFoundError: No run ``run_id`` in this namespace;
            nothing is written.
          InvalidRunStateError: The target already ended; nothing is
            written.
          SerializationError: The payload cannot be serialized.
          UsageError: An argument is malformed.
        """
        check_signal(run_id, name, idempotency_key)
        requested, recorded = sent_signal(run_id, lambda: _serde.dumps(payload), idempotency_key)
        self._before_op(f"send:{name}", "signal", requested, recorded=recorded)
        self._replay.decider.reach(
            self._replay,
            f"send:{name}",
            "signal",
            1,
            lambda: {
                "op": "send_signal",
                "run_id": run_id,
                "name": name,
                "payload": _serde.dumps(payload),
                "idempotency_key": idempotency_key,
            },
        )
        await send_signal(self._replay, run_id, name, payload, idempotency_key)

    # -- started children ---------------------------------------------------------

    @overload
    async def start_child(
        self,
        workflow: Workflow[[], R],
        /,
        *,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1], R],
        a1: A1,
        /,
        *,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1, A2], R],
        a1: A1,
        a2: A2,
        /,
        *,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: Workflow[[A1, A2, A3], R],
        a1: A1,
        a2: A2,
        a3: A3,
        /,
        *,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
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
        *,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
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
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str: ...

    @overload
    async def start_child(
        self,
        workflow: str,
        /,
        *args: Any,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str: ...

    async def start_child(
        self,
        workflow: Workflow[..., Any] | str,
        /,
        *args: Any,
        cancel_with_parent: bool = False,
        search_attributes: Mapping[str, Any] | None = None,
    ) -> str:
        """Start a child workflow without waiting for it; return its id.

        The child starts once this turn's writes are durable. Its end does not
        wake the parent. Cancelling the parent (by `Engine.cancel` or its
        timeout) leaves it alone, unless ``cancel_with_parent``.

        Args:
          workflow: A registered workflow, or its name.
          *args: Its inputs.
          cancel_with_parent: Cancel the child (its latest generation, if it
            continued as new) when this run is cancelled, with the same
            ``compensate`` choice.
          search_attributes: The child's search attributes, each declared
            in the app and of its type (see docs/search-attributes.md).

        Raises:
          InvalidArgumentsError: ``args`` do not fit the workflow's
            parameters; no child is started.
          SearchAttributeError: A search attribute is not declared or its
            value not of its type; no child is started.
        """
        replay = self._replay
        rt = replay.runtime
        attributes = check_attributes(
            search_attributes or {}, search_types(rt.app, rt.learned), removals=False
        )
        wf = replay.workflow(workflow)
        self._before_op(wf.name, "child", lambda cp: _serde.dump_args(args))
        replay.decider.reach(
            replay,
            wf.name,
            "child",
            1,
            child_command(
                wf,
                args,
                awaited=False,
                cancel_with_parent=cancel_with_parent,
                search_attributes={n: v for n, v in attributes.items() if v is not None},
            ),
        )
        seq = replay.next_seq()
        cp = replay.recorded(seq, wf.name, "child")
        if cp is not None:
            return cp.child_id or ""
        run = replay.run
        child_id = f"{run.id}.child.{seq}"
        input_json = _serde.check_workflow_args(wf, args)
        now = replay.runtime.clock.now()
        # The Workflow itself: its run controls give the child its admission.
        record_child(
            replay.turn,
            wf,
            seq,
            child_id,
            input_json,
            now,
            awaited=False,
            search_attributes=attributes,
        )
        if cancel_with_parent:
            # Marked on the start's own checkpoint, which the parent's
            # cancel reads (see `_lifecycle.cancel_linked`).
            started = replay.turn.checkpoints[seq]
            replay.turn.put(attrs.evolve(started, output=started_output(child_id, True)))
        await trio.lowlevel.checkpoint()
        return child_id

    # -- entities ------------------------------------------------------------------

    def entity(self, name: str, key: Any) -> EntityRef:
        """One key of the entity ``name``: its handlers are the attributes,
        ``await ctx.entity("cart", key).add(item)``.

        An exclusive call is an awaited child run (``<run>.child.<seq>``)
        that waits its turn behind the key's earlier exclusive calls,
        fleet-wide; replay returns its recorded result, as for
        `Context.child`. A shared call reads the state as stored and its
        result is recorded (replay returns it). See docs/entities.md.

        Raises:
          UnknownEntityError: No entity ``name`` (or, at the call, no such
            handler).
          EntityKeyError: ``key`` is not of the entity's key type.
          InvalidArgumentsError: At the call, the inputs do not fit the
            handler; nothing is recorded.
          RunFailed: An exclusive handler raised (its error's message, code
            and details are the exception's); the state is unchanged.
          StepFailed: A shared handler raised.
        """
        return workflow_entity(self._replay, name, key, self._before_op)
