"""Calling keyed entities: the `EntityRef` that `Context.entity`,
`Engine.entity` and `Client.entity` return, and what each of its calls
does.

A shared call reads the key's state as stored and runs the handler on it:
from a workflow its result is recorded as a checkpoint (replay returns it);
from an engine or a client it is a direct read. An exclusive call is a run
of the entity's internal workflow (see `_entity_defs`), created with the
admission checkpoint of the key's queue (limit 1) in the same write, so the
calls of one key run one at a time, fleet-wide, in start order: from a
workflow as an awaited child run (``<run>.child.<seq>``, replayed like
`Context.child`), from an engine or a client as a run whose result the
call waits for.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, final, runtime_checkable

import attrs

from ..._base import _serde
from ..._base._exceptions import UnknownEntityError
from ..._base._failures import error_info, step_failure
from ..._base._records import DEFAULT_NAMESPACE, Checkpoint, CheckpointKind, Run
from ..._kernel._replay import Replay, Suspend
from ..._stores._ops import Op
from ..children._children import child_value, record_child
from ..flow_control._admission import StartControls, creation_ops
from ..starts._runs import NewRun, create_run
from ._entity_defs import Entity, Handler, run_handler

if TYPE_CHECKING:
    import random

    from ..._base._clock import Clock
    from ..._kernel._definitions import Registry
    from ..._kernel._runtime import Runtime
    from ..._stores._base import Store

Call = Callable[[Handler, tuple[Any, ...]], Awaitable[Any]]


@final
class EntityRef:
    """One key of an entity, as a caller sees it: each handler of the
    entity is an attribute, an ``async`` function taking the handler's
    inputs (after ``self``) and returning its result.

    Made by `Context.entity`, `Engine.entity` and `Client.entity`.

    Attributes:
      entity: The entity's name.
      key: The key.
    """

    def __init__(self, entity: Entity, key: Any, call: Call) -> None:
        self._entity = entity
        self._call = call
        self.entity = entity.name
        self.key = key

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        """The handler ``name``, bound to this key.

        Raises:
          UnknownEntityError: The entity has no handler so named.
        """
        if name.startswith("_") and name not in self._entity.handlers:
            # Probes such as copy's and IPython's look for such names.
            raise AttributeError(name)
        handler = self._entity.handler(name)
        call = self._call

        async def call_handler(*args: Any) -> Any:
            return await call(handler, args)

        call_handler.__name__ = call_handler.__qualname__ = name
        call_handler.__doc__ = handler.fn.__doc__
        return call_handler

    def __repr__(self) -> str:
        return f"<EntityRef {self.entity}[{self.key!r}]>"


@runtime_checkable
class EntityRegistry(Protocol):
    """An app that registers entities (`App` does)."""

    def get_entity(self, name: str) -> Entity: ...


def registered_entity(app: Registry | None, name: str) -> Entity:
    """The entity ``name`` of ``app``.

    Raises:
      UnknownEntityError: ``app`` has no such entity (or there is no app).
    """
    if not isinstance(app, EntityRegistry):
        raise UnknownEntityError(
            f"no entity {name!r}: entities are called through an app (open_client(app=...))"
        )
    return app.get_entity(name)


def find_entity(app: Registry | None, name: str, key: object) -> tuple[Entity, str]:
    """The entity ``name`` of ``app`` and the text of ``key``.

    Raises:
      UnknownEntityError: ``app`` has no such entity (or there is no app).
      EntityKeyError: ``key`` is not of the entity's key type.
    """
    entity = registered_entity(app, name)
    return entity, entity.check_key(key)


def call_input(key: Any, handler: Handler, entity: Entity, args: tuple[Any, ...]) -> str:
    """The input of a call (the internal workflow's ``[key, handler,
    args]``) as JSON text, once ``args`` fit the handler.

    Raises:
      InvalidArgumentsError: ``args`` do not fit the handler.
      SerializationError: An input cannot be serialized.
    """
    args_json = handler.check_args(entity.name, args)
    return f"[{json.dumps(key)},{json.dumps(handler.name)},{args_json}]"


def admission(entity: Entity, key: str) -> StartControls:
    """The admission an exclusive call's run is created with: one slot of
    the key's queue (see `_admission`)."""
    return StartControls(workflow=entity.workflow.name, queue=entity.queue(key), limit=1)


def _plain_args(input_json: str) -> list[Any]:
    args: list[Any] = json.loads(input_json)[2]
    return args


# -- from a workflow ----------------------------------------------------------

BeforeCall = Callable[[str, CheckpointKind, Callable[[Checkpoint], str]], None]
"""What a workflow's `Context` checks before an entity call (see
`workflow_entity`)."""


def workflow_entity(
    replay: Replay, name: str, key: object, before: BeforeCall | None = None
) -> EntityRef:
    """`Context.entity`; ``before`` is told each call's checkpoint name,
    kind and input before it takes its seq (the argument check)."""
    entity, key_text = find_entity(replay.runtime.app, name, key)

    async def call(handler: Handler, args: tuple[Any, ...]) -> Any:
        input_json = call_input(key, handler, entity, args)
        shared = handler.kind == "shared"
        name = f"{entity.workflow.name}.{handler.name}" if shared else entity.workflow.name
        kind: CheckpointKind = "local" if shared else "child"
        if before is not None:
            before(name, kind, lambda cp: input_json)
        # A remote workflow's body: the engine makes the call (the
        # entity is registered there too), and this replays its outcome.
        replay.decider.reach(
            replay,
            name,
            kind,
            1,
            lambda: {"op": "entity", "entity": entity.name, "input": input_json},
        )
        if shared:
            return await _shared_in_workflow(replay, entity, key_text, handler, input_json)
        return await _exclusive_in_workflow(replay, entity, key_text, handler, input_json)

    return EntityRef(entity, key, call)


async def _shared_in_workflow(
    replay: Replay, entity: Entity, key: str, handler: Handler, input_json: str
) -> Any:
    """A shared call from a workflow: recorded as a ``local`` checkpoint
    named ``entity:<name>.<handler>``, whose output replay returns."""
    seq = replay.next_seq()
    name = f"{entity.workflow.name}.{handler.name}"
    cp = replay.recorded(seq, name, "local")
    if cp is not None and cp.status == "completed":
        return handler.returned(json.loads(cp.output or "null"))
    if cp is not None and cp.status == "failed":
        raise step_failure(cp)
    rt = replay.engine
    now = rt.clock.now()
    recorded = Checkpoint(
        run_id=replay.run.id,
        seq=seq,
        name=name,
        kind="local",
        status="completed",
        input=input_json,
        attempts=1,
        enqueued_at=now,
        started_at=now,
        finished_at=now,
    )
    try:
        result, _ = await run_handler(rt.store, now, entity, key, handler, _plain_args(input_json))
        output = _serde.dumps(result)
    except Exception as exc:
        error = error_info(exc, step=name, traceback_limit=rt.options.traceback_limit)
        failed = attrs.evolve(recorded, status="failed", error=error)
        replay.turn.put(failed)
        raise step_failure(failed) from exc
    replay.turn.put(attrs.evolve(recorded, output=output))
    return handler.returned(json.loads(output))


async def _exclusive_in_workflow(
    replay: Replay, entity: Entity, key: str, handler: Handler, input_json: str
) -> Any:
    """An exclusive call from a workflow: an awaited child run of the
    entity's workflow, admitted through the key's queue."""
    wf = entity.workflow
    seq = replay.next_seq()
    cp = replay.recorded(seq, wf.name, "child")
    if cp is None:
        child_id = f"{replay.run.id}.child.{seq}"
        now = replay.runtime.clock.now()
        record_child(
            replay.turn, (wf.name, wf.version), seq, child_id, input_json, now, awaited=True
        )
        replay.turn.ops.extend(creation_ops(child_id, admission(entity, key), now))
        raise Suspend("entity")
    if cp.status == "pending":
        # Watched: the call may end while this turn holds the lease.
        raise Suspend("entity", watch=(seq, seq))
    return handler.returned(child_value(replay.runtime.app, wf, cp))


async def carry_out_call(replay: Replay, name: str, input_json: str) -> Any:
    """An entity call a remote workflow's decision names (``input_json``
    holds its key, handler and arguments, see `call_input`), made as a
    local body's call is.

    Raises:
      UnknownEntityError: This engine's app has no entity ``name``.
    """
    entity = registered_entity(replay.runtime.app, name)
    key, handler_name, _ = json.loads(input_json)
    key_text = entity.check_key(key)
    handler = entity.handler(handler_name)
    if handler.kind == "shared":
        return await _shared_in_workflow(replay, entity, key_text, handler, input_json)
    return await _exclusive_in_workflow(replay, entity, key_text, handler, input_json)


# -- from an engine or a client -------------------------------------------------


async def _direct_read(
    store: Store, now: float, entity: Entity, key: str, handler: Handler, input_json: str
) -> Any:
    """A shared call from outside a workflow: the handler runs here, on the
    state as stored now."""
    result, _ = await run_handler(store, now, entity, key, handler, _plain_args(input_json))
    # Through JSON, as a workflow's shared call returns it on replay.
    return handler.returned(json.loads(_serde.dumps(result)))


def engine_entity(
    rt: Runtime,
    result: Callable[[str], Awaitable[Any]],
    name: str,
    key: object,
    call_id: str | None,
) -> EntityRef:
    """`Engine.entity`: an exclusive call's run is created leased to this
    engine and taken at once."""
    entity, key_text = find_entity(rt.app, name, key)

    async def call(handler: Handler, args: tuple[Any, ...]) -> Any:
        rt.scheduler.check_open()
        input_json = call_input(key, handler, entity, args)
        now = rt.clock.now()
        if handler.kind == "shared":
            return await _direct_read(rt.store, now, entity, key_text, handler, input_json)
        new = _new_call(entity, key_text, input_json, call_id)
        stored, created = await create_run(
            rt.store, rt.rng, now, new, owner=rt.engine_id, lease_ttl=rt.options.lease_ttl
        )
        if created:
            rt.telemetry.emit_run("run.started", stored)
            # Its first turn reads the admission it was created with.
            rt.scheduler.wake(stored.id)
        return handler.returned(await result(stored.id))

    return EntityRef(entity, key, call)


def client_entity(
    *,
    app: Registry | None,
    store: Store,
    clock: Clock,
    rng: random.Random,
    wake: Callable[[Sequence[Run]], list[Op]],
    result: Callable[[str], Awaitable[Any]],
    check_open: Callable[[], None],
    name: str,
    key: object,
    call_id: str | None,
) -> EntityRef:
    """`Client.entity`: an exclusive call's run is created pending, with an
    announcement that wakes an engine at once."""
    entity, key_text = find_entity(app, name, key)

    async def call(handler: Handler, args: tuple[Any, ...]) -> Any:
        check_open()
        input_json = call_input(key, handler, entity, args)
        now = clock.now()
        if handler.kind == "shared":
            return await _direct_read(store, now, entity, key_text, handler, input_json)

        new = _new_call(entity, key_text, input_json, call_id)
        stored, _ = await create_run(store, rng, now, new, also=lambda run: wake([run]))
        return handler.returned(await result(stored.id))

    return EntityRef(entity, key, call)


def _new_call(entity: Entity, key: str, input_json: str, call_id: str | None) -> NewRun:
    return NewRun(
        workflow=entity.workflow.name,
        version=entity.workflow.version,
        input=input_json,
        run_id=call_id,
        namespace=DEFAULT_NAMESPACE,
        tags=(),
        controls=admission(entity, key),
    )
