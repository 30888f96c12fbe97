"""The one converter: payloads to JSON text and back.

Inputs and outputs are attrs classes or JSON-able values. They are
unstructured with cattrs and dumped with `json`; on the way back they are
structured into the type a function's annotations declare, so a step that
returns a ``Receipt`` gives a ``Receipt`` on replay too.
"""

from __future__ import annotations

import inspect
import json
import logging
import typing
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Final, Protocol

import attrs
import cattrs

from ._exceptions import InvalidArgumentsError, SerializationError
from ._nesting import MAX_NESTING, nesting_exceeds

logger = logging.getLogger("trio_durable")

converter = cattrs.Converter()
"""The converter every payload goes through."""

# ``object`` in an annotation (``dict[str, object]``) means "any JSON value".
# A predicate hook, not a class hook: a hook registered for the class
# ``object`` would match every class (singledispatch) and leave attrs
# payloads as dicts.
converter.register_structure_hook_func(lambda type_: type_ is object, lambda value, _: value)


def _structure_none(value: Any, _: Any) -> None:
    if value is not None:
        raise ValueError(f"expected null, not {value!r}")


# ``-> None`` (a step that returns nothing) resolves to ``NoneType``, which
# cattrs does not structure on its own.
converter.register_structure_hook_func(lambda type_: type_ is type(None), _structure_none)


def _exactly(kind: type, accepts: Callable[[Any], bool]) -> Callable[[Any, Any], Any]:
    def structure_exactly(value: Any, _: Any) -> Any:
        if not accepts(value):
            raise TypeError(f"expected {kind.__name__}, not {type(value).__name__}")
        return kind(value)

    return structure_exactly


checker = converter.copy()
"""``converter`` as `check_call` uses it: the same hooks, but ``str``,
``int``, ``float`` and ``bool`` take only the JSON value of their kind.

``converter`` structures them by calling the type, so replay would turn
``"5"`` into 5, ``1.5`` into 1 and ``"false"`` into True; inputs that only
fit that way are a caller's mistake, caught before anything is written."""
checker.register_structure_hook(str, _exactly(str, lambda v: isinstance(v, str)))
checker.register_structure_hook(bool, _exactly(bool, lambda v: isinstance(v, bool)))
checker.register_structure_hook(
    int, _exactly(int, lambda v: isinstance(v, int) and not isinstance(v, bool))
)
checker.register_structure_hook(
    float, _exactly(float, lambda v: isinstance(v, int | float) and not isinstance(v, bool))
)


_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""Compact JSON, made once (``json.dumps`` with options makes one per call)."""

_SCALARS: Final[frozenset[type]] = frozenset({str, int, float, bool, type(None)})
"""Types a payload value of which is its own plain JSON value: the converter
leaves it as it is, and JSON gives it back equal and of the same type."""

_ACCEPTS: Final[dict[Any, Callable[[Any], bool]]] = {
    str: lambda v: isinstance(v, str),
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}
"""What ``checker`` accepts for a parameter of these types (see `checker`)."""


def dumps(value: Any) -> str:
    """``value`` as compact JSON text.

    Raises:
      SerializationError: The value is not an attrs instance or JSON-able,
        holds a non-finite float (NaN or infinity), or nests lists and
        objects more than `MAX_NESTING` levels deep.
    """
    try:
        plain = converter.unstructure(value)
        text = _ENCODER.encode(plain)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"cannot serialize {type(value).__name__}: {exc}") from exc
    if nesting_exceeds(plain, text):
        raise SerializationError(
            f"cannot serialize {type(value).__name__}: it nests more than {MAX_NESTING} levels deep"
        )
    return text


def loads(text: str | None, type_: Any = Any) -> Any:
    """Parse JSON text and structure it as ``type_``.

    Raises:
      SerializationError: The text does not fit ``type_``.
    """
    return structure(None if text is None else json.loads(text), type_)


def structure(plain: Any, type_: Any = Any) -> Any:
    """Structure an already parsed JSON value as ``type_``.

    Raises:
      SerializationError: The value does not fit ``type_``.
    """
    if type_ is Any or type_ is object or type_ is inspect.Parameter.empty:
        return plain
    if type(plain) is type_ and type_ in _SCALARS:
        return plain  # what the converter gives back: the value itself
    try:
        return converter.structure(plain, type_)
    except Exception as exc:
        raise SerializationError(
            f"stored value does not fit {getattr(type_, '__name__', type_)}: {exc}"
        ) from exc


@cache
def signature_types(fn: Callable[..., Any], skip: int = 0) -> tuple[list[Any], Any]:
    """The declared types of ``fn``'s positional parameters (after the first
    ``skip``) and of its return value; `typing.Any` where undeclared."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        # Payloads still flow, as plain JSON: say so instead of failing runs.
        logger.warning("cannot resolve the annotations of %r (%s); using plain JSON", fn, exc)
        hints = {}
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ][skip:]
    types = [hints.get(p.name, Any) for p in params if p.kind != p.VAR_POSITIONAL]
    returns = hints.get("return", Any)
    return types, returns


def dump_args(args: Sequence[Any]) -> str:
    """Positional arguments as the JSON text of a list."""
    if all(type(arg) in _SCALARS for arg in args):
        # Plain already: no converter, and no nesting to measure.
        try:
            return _ENCODER.encode(list(args))
        except ValueError:
            pass  # a float that is not finite: `dumps` says so
    return dumps(list(args))


def check_call(fn: Callable[..., Any], args: Sequence[Any], *, skip: int, target: str) -> str:
    """Positional arguments for ``fn`` (after its first ``skip`` parameters)
    as the JSON text of a list, once they fit its signature.

    They fit when their count is one ``fn`` takes positionally, and each
    reads back, through ``checker``, as its parameter's declared type; a
    top-level attrs instance must be an instance of a declared attrs class.
    This is the check `Engine.start` and the `Context` calls make before they
    write anything.

    Args:
      fn: The step's or workflow's function.
      args: The inputs.
      skip: Leading parameters the inputs do not fill (1 for a workflow's
        context).
      target: Names the callee in messages (``"workflow 'checkout'"``).

    Raises:
      InvalidArgumentsError: The inputs do not fit.
      SerializationError: An input cannot be serialized.
    """
    names, required, variadic = _positional(fn, skip)
    if len(args) < required or (not variadic and len(args) > len(names)):
        if variadic:
            takes = f"at least {required}"
        elif required == len(names):
            takes = str(required)
        else:
            takes = f"{required} to {len(names)}"
        after = " after the context" if skip else ""
        raise InvalidArgumentsError(
            f"{target} takes {takes} positional input{'' if takes == '1' else 's'}{after}"
            f" ({', '.join(names) or 'none'}), but {len(args)}"
            f" {'was' if len(args) == 1 else 'were'} given",
            target=target,
        )
    text = dump_args(args)
    types, _ = signature_types(fn, skip)
    if all(type(arg) in _SCALARS for arg in args) and all(
        type_ is Any or type_ is object or _ACCEPTS.get(type_, _never)(arg)
        for arg, type_ in zip(args, types, strict=False)
    ):
        # Every input is plain JSON (as it reads back) and of its declared
        # type: the checks below would pass.
        return text
    plain = json.loads(text)
    # Only the named parameters declare a type here (as at replay, see
    # `load_args`): inputs past them, into ``*args``, go unchecked.
    for index, (name, type_) in enumerate(zip(names, types, strict=True)):
        if index >= len(args) or type_ is Any or type_ is object:
            continue
        value = args[index]
        # cattrs reads any dict with the right keys as the class: an attrs
        # instance of another class would pass unnoticed.
        if (
            attrs.has(type(value))
            and isinstance(type_, type)
            and attrs.has(type_)
            and not isinstance(value, type_)
        ):
            raise InvalidArgumentsError(
                f"{target}: input {name!r} must be an instance of {type_.__name__},"
                f" not {type(value).__name__}",
                target=target,
                parameter=name,
            )
        try:
            checker.structure(plain[index], type_)
        except Exception as exc:
            reasons = "; ".join(cattrs.transform_error(exc, path=name))
            declared = type_.__name__ if isinstance(type_, type) else str(type_)
            raise InvalidArgumentsError(
                f"{target}: input {name!r} does not fit {declared}: {reasons}",
                target=target,
                parameter=name,
            ) from exc
    return text


class Callee(Protocol):
    """What a call is checked against: a registered step or workflow."""

    @property
    def name(self) -> str: ...

    @property
    def fn(self) -> Callable[..., Any]: ...


def _never(_: Any) -> bool:
    return False


def check_step_args(step: Callee, args: Sequence[Any], compensate: Callee | None = None) -> str:
    """``args`` of a step call as JSON text, once they fit the step (and its
    undo, which is called with the same arguments): see `check_call`."""
    if compensate is not None:
        check_call(compensate.fn, args, skip=0, target=f"step {compensate.name!r}")
    return check_call(step.fn, args, skip=0, target=f"step {step.name!r}")


def check_workflow_args(wf: Callee, args: Sequence[Any]) -> str:
    """``args`` of a run of ``wf`` as JSON text, once they fit it: see
    `check_call`."""
    return check_call(wf.fn, args, skip=1, target=f"workflow {wf.name!r}")


@cache
def _positional(fn: Callable[..., Any], skip: int) -> tuple[tuple[str, ...], int, bool]:
    """The names of ``fn``'s named positional parameters after the first
    ``skip``, how many of them are required, and whether it takes ``*args``."""
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ][skip:]
    named = [p for p in params if p.kind != p.VAR_POSITIONAL]
    required = sum(1 for p in named if p.default is p.empty)
    return tuple(p.name for p in named), required, len(named) < len(params)


def load_args(text: str, fn: Callable[..., Any], skip: int = 0) -> list[Any]:
    """Positional arguments back from JSON, structured by ``fn``'s annotations."""
    plain = json.loads(text)
    types, _ = signature_types(fn, skip)
    out: list[Any] = []
    for index, value in enumerate(plain):
        type_ = types[index] if index < len(types) else Any
        out.append(structure(value, type_))
    return out
