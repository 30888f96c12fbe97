"""Keyed entities as registration makes them: the `exclusive` and `shared`
marks, the checks a class passes to become an `Entity`, its state as JSON,
and the body of the workflow whose runs are its exclusive calls.

An entity's state per key is the instance's attributes, stored as one keyed
value (scope ``entity:<name>``, key ``str(key)``). An exclusive call is a
run of the entity's internal workflow ``entity:<name>``, admitted through
the queue ``entity:<name>:<key>`` with a limit of 1: its turn reads the
state, runs the handler, and hands the new state to the write that ends the
run with the handler's result (`TurnDraft.end_ops`), expecting the version
it read. A crash before that write leaves the old state, and the next turn
runs the handler again on it: the effect on state happens exactly once.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, final

import attrs

from ..._base import _serde
from ..._base._exceptions import EntityKeyError, RegistrationError, UnknownEntityError
from ..._base._index_text import refuse_nul
from ..._kernel._definitions import Workflow
from ..._kernel._registration_checks import check_name
from ..._stores._ops import PutValue

if TYPE_CHECKING:
    from ..._base._records import StoredValue
    from ..._kernel._replay import Replay
    from ..._stores._base import Store

HandlerKind = Literal["exclusive", "shared"]
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

ENTITY_PREFIX: Final = "entity:"
ENTITY_VERSION: Final = "1"
# The attribute `exclusive` and `shared` set on a handler's function.
_MARK: Final = "__trio_durable_entity_handler__"


def _mark(kind: HandlerKind, fn: F) -> F:
    function: object = fn
    if not inspect.iscoroutinefunction(function):
        raise RegistrationError(f"entity handler {fn!r} must be an async def")
    setattr(fn, _MARK, kind)
    return fn


def exclusive(fn: F) -> F:
    """Mark an entity's method as an exclusive handler.

    Exclusive calls of one key run one at a time, fleet-wide, in the order
    they were started; the state the handler leaves is committed with its
    result, in one write (see docs/entities.md).

    Raises:
      RegistrationError: ``fn`` is not an ``async def``.
    """
    return _mark("exclusive", fn)


def shared(fn: F) -> F:
    """Mark an entity's method as a shared handler: it reads the state of
    its key concurrently with other calls, and what it changes in the state
    is never stored.

    Raises:
      RegistrationError: ``fn`` is not an ``async def``.
    """
    return _mark("shared", fn)


@final
@attrs.define(frozen=True, kw_only=True)
class Handler:
    """One handler of an entity: its name, kind and function (the method,
    unbound: it takes the state instance first)."""

    name: str
    kind: HandlerKind
    fn: Callable[..., Awaitable[Any]]

    def check_args(self, entity: str, args: tuple[Any, ...]) -> str:
        """``args`` as JSON text, once they fit the handler.

        Raises:
          InvalidArgumentsError: They do not fit its parameters.
          SerializationError: One cannot be serialized.
        """
        return _serde.check_call(
            self.fn, args, skip=1, target=f"entity handler {entity}.{self.name}"
        )

    def load_args(self, plain: list[Any]) -> list[Any]:
        """Inputs back from JSON, structured as the handler declares them."""
        types, _ = _serde.signature_types(self.fn, 1)
        return [
            _serde.structure(value, types[index] if index < len(types) else Any)
            for index, value in enumerate(plain)
        ]

    def returned(self, plain: Any) -> Any:
        """A result back from JSON, structured as the handler returns it."""
        _, returns = _serde.signature_types(self.fn, 1)
        return _serde.structure(plain, returns)


@final
class Entity:
    """A registered keyed entity (made by `App.entity`).

    Attributes:
      name: The entity's name.
      cls: The class whose instances hold a key's state.
      key_type: The type its keys have (``str`` or ``int``).
      handlers: Its handlers, by name.
      workflow: The internal workflow whose runs are its exclusive calls.
    """

    def __init__(
        self, name: str, cls: type[Any], key_type: type[Any], handlers: Mapping[str, Handler]
    ) -> None:
        self.name = name
        self.cls = cls
        self.key_type = key_type
        self.handlers = dict(handlers)
        self.workflow: Workflow[..., Any] = Workflow(
            _call_body(self), name=ENTITY_PREFIX + name, version=ENTITY_VERSION
        )

    @property
    def scope(self) -> str:
        """The keyed-value scope its states are stored under."""
        return ENTITY_PREFIX + self.name

    def queue(self, key: str) -> str:
        """The admission queue of the exclusive calls of ``key``."""
        return f"{ENTITY_PREFIX}{self.name}:{key}"

    def handler(self, name: str) -> Handler:
        """The handler called ``name``.

        Raises:
          UnknownEntityError: The entity has none so named.
        """
        found = self.handlers.get(name) if isinstance(name, str) else None
        if found is None:
            known = ", ".join(sorted(self.handlers))
            raise UnknownEntityError(
                f"entity {self.name!r} has no handler {name!r} (handlers: {known})"
            )
        return found

    def check_key(self, key: object) -> str:
        """``key`` as the text its state is stored under.

        Raises:
          EntityKeyError: ``key`` is not of the entity's key type (a bool is
            no int), or is an empty string.
        """
        if self.key_type is int:
            if isinstance(key, bool) or not isinstance(key, int):
                raise EntityKeyError(
                    f"entity {self.name!r} takes int keys, not {type(key).__name__} {key!r}"
                )
            return str(key)
        if not isinstance(key, str):
            raise EntityKeyError(
                f"entity {self.name!r} takes str keys, not {type(key).__name__} {key!r}"
            )
        if not key:
            raise EntityKeyError(f"entity {self.name!r} takes non-empty keys")
        refuse_nul(f"a key of entity {self.name!r}", key, EntityKeyError)
        return key

    def load_state(self, stored: StoredValue | None) -> Any:
        """The state instance of a key: a new one if nothing is stored."""
        if attrs.has(self.cls) and stored is not None:
            return _serde.loads(stored.value, self.cls)
        state = self.cls()
        if stored is None:
            return state
        plain = _serde.loads(stored.value)
        try:
            hints = typing.get_type_hints(self.cls)
        except Exception:
            hints = {}
        for field, value in plain.items():
            # Attributes set in __init__ carry no class annotation: an attrs
            # instance there is rebuilt as the class the new state holds.
            current = getattr(state, field, None)
            declared = hints.get(field, type(current) if attrs.has(type(current)) else Any)
            setattr(state, field, _serde.structure(value, declared))
        return state

    def dump_state(self, state: Any) -> str:
        """A state instance as JSON text: its attributes.

        Raises:
          SerializationError: An attribute cannot be serialized.
        """
        if attrs.has(type(state)):
            return _serde.dumps(state)
        return _serde.dumps(dict(vars(state)))

    def __repr__(self) -> str:
        return f"<Entity {self.name}>"


def define_entity(name: str, cls: object, key: object) -> Entity:
    """Check a class to register as an entity, and make it one.

    Raises:
      RegistrationError: The name is invalid, ``key`` is not ``str`` or
        ``int``, ``cls`` is not a class constructible with no arguments, or
        it has no handler, a handler is not an ``async def``, or a public
        ``async def`` method is neither exclusive nor shared.
    """
    check_name("entity", name)
    if key is not str and key is not int:
        raise RegistrationError(f"entity {name!r}: key must be str or int, not {key!r}")
    if not inspect.isclass(cls):
        raise RegistrationError(f"entity {name!r} must be a class, not {cls!r}")
    try:
        required = [
            p
            for p in inspect.signature(cls).parameters.values()
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
    except (TypeError, ValueError):
        required = []
    if required:
        raise RegistrationError(
            f"entity {name!r}: {cls.__name__}() must be constructible with no arguments"
            f" (a new key's state), but it requires {', '.join(p.name for p in required)}"
        )
    handlers: dict[str, Handler] = {}
    for klass in reversed(inspect.getmro(cls)):
        for attr, fn in vars(klass).items():
            kind = getattr(fn, _MARK, None)
            if kind is None:
                if inspect.iscoroutinefunction(fn) and not attr.startswith("_"):
                    raise RegistrationError(
                        f"entity {name!r}: the async method {attr!r} must be marked"
                        " @td.exclusive or @td.shared"
                    )
                handlers.pop(attr, None)
                continue
            if not inspect.iscoroutinefunction(fn):
                raise RegistrationError(f"entity {name!r}: handler {attr!r} must be an async def")
            _check_handler(name, attr, fn)
            handlers[attr] = Handler(name=attr, kind=kind, fn=fn)
    if not handlers:
        raise RegistrationError(
            f"entity {name!r} has no handler: mark async methods @td.exclusive or @td.shared"
        )
    return Entity(name, cls, key, handlers)


def _check_handler(entity: str, attr: str, fn: Callable[..., Any]) -> None:
    target = f"entity {entity!r}: handler {attr!r}"
    params = list(inspect.signature(fn).parameters.values())
    if not params or params[0].kind not in (
        params[0].POSITIONAL_ONLY,
        params[0].POSITIONAL_OR_KEYWORD,
    ):
        raise RegistrationError(f"{target} must be a method (take self first)")
    for param in params:
        if param.kind == param.KEYWORD_ONLY and param.default is param.empty:
            raise RegistrationError(
                f"{target} has the required keyword-only parameter {param.name!r}:"
                " inputs are passed positionally"
            )


async def run_handler(
    store: Store, now: float, entity: Entity, key: str, handler: Handler, args: list[Any]
) -> tuple[Any, PutValue | None]:
    """Run ``handler`` on the state of ``key`` as stored now; return its
    result and, if an exclusive handler changed the state, the write that
    stores it, expecting the version read: a write of the state meanwhile
    makes the batch it is in roll back."""
    stored = await store.get_value(entity.scope, key)
    state = entity.load_state(stored)
    before = entity.dump_state(state) if stored is None else stored.value
    result = await handler.fn(state, *handler.load_args(args))
    if handler.kind == "shared":
        return result, None
    after = entity.dump_state(state)
    if after == before:
        return result, None
    put = PutValue(
        entity.scope,
        key,
        after,
        now,
        expect_version=0 if stored is None else stored.version,
        strict=True,
    )
    return result, put


def _call_body(entity: Entity) -> Callable[..., Awaitable[Any]]:
    """The body of the entity's internal workflow: one exclusive call."""

    async def entity_call(ctx: Any, key: Any, handler: str, args: list[Any]) -> Any:
        # The body does no durable operation: each turn runs the handler
        # afresh on the state as stored, and the run's end commits both.
        replay: Replay = ctx._replay
        rt = replay.engine
        result, put = await run_handler(
            rt.store, rt.clock.now(), entity, entity.check_key(key), entity.handler(handler), args
        )
        if put is not None:
            replay.turn.end_ops.append(put)
        return result

    entity_call.__qualname__ = entity_call.__name__ = f"entity_{entity.name}"
    return entity_call
