"""A workflow's parameters as workers announce them, and inputs checked
against what they announce.

A worker announces, for each workflow it knows, the parameters of the
version it registered last (the one a run started by name runs) after the
context: ``params``, a list with one JSON object per parameter,

- ``name``;
- ``kind``: ``positional_only``, ``keyword_only``, ``var_positional``
  (``*args``) or ``var_keyword`` (``**kwargs``); left out for the usual
  ``positional_or_keyword``;
- ``default``: true if it has a default; left out if it has none;
- ``type``: the JSON types its annotation takes (``string``, ``integer``,
  ``number``, ``boolean``, ``array``, ``object``, ``null``); left out where
  the annotation maps to no plain JSON type (or there is none): any value.

Left-out keys keep the announcement small (it travels with every
heartbeat). `check_announced_inputs` checks a start's positional inputs
against what the live announcers of the workflow say, for
``trio-durable runs start`` without the App.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Final, final

import attrs

from .._brokers._base import WorkerDescriptor

JSON_TYPES: Final = ("string", "integer", "number", "boolean", "array", "object", "null")
"""The JSON type names a parameter's ``type`` lists, in the order it lists them."""

_KINDS: Final = frozenset(
    {"positional_only", "positional_or_keyword", "keyword_only", "var_positional", "var_keyword"}
)
_POSITIONAL: Final = frozenset({"positional_only", "positional_or_keyword"})
_IDS_SHOWN: Final = 3
_SPOKEN: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


@final
@attrs.define(frozen=True, kw_only=True)
class AnnouncedParam:
    """One parameter of a workflow as announced (see the module's docstring).

    Attributes:
      name: Its name.
      kind: How it is passed, named as `inspect.Parameter.kind` is, in
        lower case (``positional_or_keyword``, ...).
      default: Whether it has a default.
      types: The JSON types it takes, or None for any value.
    """

    name: str
    kind: str = "positional_or_keyword"
    default: bool = False
    types: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """As announced: the keys that hold their usual value left out."""
        plain: dict[str, Any] = {"name": self.name}
        if self.kind != "positional_or_keyword":
            plain["kind"] = self.kind
        if self.default:
            plain["default"] = True
        if self.types is not None:
            plain["type"] = list(self.types)
        return plain

    def shown(self) -> str:
        """For people: ``*rest``, ``qty: integer|null = ...``."""
        stars = {"var_positional": "*", "var_keyword": "**"}.get(self.kind, "")
        text = stars + self.name
        if self.types is not None:
            text += ": " + "|".join(self.types)
        return text + (" = ..." if self.default else "")


def json_types(hint: Any) -> tuple[str, ...] | None:
    """The JSON types a value of the annotation ``hint`` is on the wire, or
    None where it maps to no plain JSON type (any value).

    ``str`` is a string, ``int`` an integer, ``float`` a number, ``bool`` a
    boolean, a list, tuple, set or `Sequence` an array, a dict, `Mapping`,
    `TypedDict`, attrs class or dataclass an object, None null; a union (an
    ``Optional``) and a ``Literal`` take their members' types.
    """
    if hint is None or hint is type(None):
        return ("null",)
    if hint is Any or hint is object or hint is inspect.Parameter.empty:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType or origin is typing.Literal:
        members = typing.get_args(hint)
        if origin is typing.Literal:
            members = tuple(type(value) for value in members)
        found: set[str] = set()
        for member in members:
            kinds = json_types(member)
            if kinds is None:
                return None
            found.update(kinds)
        return tuple(name for name in JSON_TYPES if name in found)
    if typing.is_typeddict(hint):
        return ("object",)
    cls = origin if origin is not None else hint
    if not isinstance(cls, type):
        return None
    # bool before int (a bool is an int), str and bytes before Sequence.
    for base, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string")):
        if issubclass(cls, base):
            return (name,)
    if attrs.has(cls) or dataclasses.is_dataclass(cls) or issubclass(cls, collections.abc.Mapping):
        return ("object",)
    if issubclass(cls, bytes | bytearray | memoryview):
        return None
    if issubclass(cls, collections.abc.Sequence | collections.abc.Set):
        return ("array",)
    return None


@cache
def announced_params(fn: Callable[..., Any], skip: int = 1) -> tuple[AnnouncedParam, ...]:
    """The parameters of the workflow function ``fn`` after its context
    (those of a step's function, all of them, with ``skip=0``).

    Cached: a worker describes itself at every heartbeat.
    """
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        # Annotations that do not resolve here say nothing of the inputs.
        hints = {}
    return tuple(
        AnnouncedParam(
            name=p.name,
            kind=p.kind.name.lower(),
            default=p.default is not p.empty,
            types=json_types(hints.get(p.name, Any)),
        )
        for p in list(inspect.signature(fn).parameters.values())[skip:]
    )


def read_params(entry: dict[str, Any]) -> tuple[AnnouncedParam, ...] | None:
    """The parameters a workflow's announced entry lists, or None where it
    lists none (a worker older than ``params``) or lists them malformed."""
    plain = entry.get("params")
    if not isinstance(plain, list):
        return None
    params: list[AnnouncedParam] = []
    for item in plain:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        kind = item.get("kind", "positional_or_keyword")
        kinds = item.get("type")
        if (
            kind not in _KINDS
            or not isinstance(item.get("default", False), bool)
            or not (kinds is None or isinstance(kinds, list))
            or any(name not in JSON_TYPES for name in kinds or ())
        ):
            return None
        params.append(
            AnnouncedParam(
                name=item["name"],
                kind=kind,
                default=item.get("default", False),
                types=None if kinds is None else tuple(kinds),
            )
        )
    return tuple(params)


def signature_shown(workflow: str, params: Sequence[AnnouncedParam] | None) -> str:
    """``greet(name: string)`` for people; ``greet(?)`` for no announced
    parameters."""
    if params is None:
        return f"{workflow}(?)"
    parts: list[str] = []
    for index, param in enumerate(params):
        before = params[index - 1].kind if index else ""
        if before == "positional_only" and param.kind != "positional_only":
            parts.append("/")
        if param.kind == "keyword_only" and before not in ("keyword_only", "var_positional"):
            parts.append("*")
        parts.append(param.shown())
    if params and params[-1].kind == "positional_only":
        parts.append("/")
    return f"{workflow}({', '.join(parts)})"


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits(value: Any, kinds: tuple[str, ...]) -> bool:
    kind = _json_type(value)
    # A JSON number takes an integer, as a float parameter takes an int.
    return kind in kinds or (kind == "integer" and "number" in kinds)


def input_problem(workflow: str, params: Sequence[AnnouncedParam], args: Sequence[Any]) -> str:
    """Why the positional inputs ``args`` (JSON values) do not fit the
    announced ``params``, naming the parameter, or "" if they fit.

    As `Engine.start` checks them against the code: their count, then each
    named positional parameter's JSON types; inputs into ``*args`` go
    unchecked.
    """
    target = f"workflow {workflow!r}"
    named = [p for p in params if p.kind in _POSITIONAL]
    required = sum(1 for p in named if not p.default)
    variadic = any(p.kind == "var_positional" for p in params)
    if len(args) < required or (not variadic and len(args) > len(named)):
        if variadic:
            takes = f"at least {required}"
        elif required == len(named):
            takes = str(required)
        else:
            takes = f"{required} to {len(named)}"
        return (
            f"{target} takes {takes} positional input{'' if takes == '1' else 's'} after the"
            f" context ({', '.join(p.name for p in named) or 'none'}), but {len(args)}"
            f" {'was' if len(args) == 1 else 'were'} given"
        )
    for param, value in zip(named, args, strict=False):
        if param.types is not None and not _fits(value, param.types):
            wanted = " or ".join(_SPOKEN[kind] for kind in param.types)
            given = _json_type(value)
            shown = "" if value is None else f" ({json.dumps(value)[:60]})"
            return f"{target}: input {param.name!r} must be {wanted}, not {_SPOKEN[given]}{shown}"
    return ""


@final
@attrs.define(frozen=True, kw_only=True)
class AnnouncedCheck:
    """What the live announcers of a workflow say of a start's inputs.

    Attributes:
      signatures: Each signature announced (as `signature_shown` writes it;
        ``name(?)`` for announcers that announce no parameters) with the
        instance ids announcing it, in order of the ids.
      problems: For each signature the inputs do not fit, why.
    """

    signatures: dict[str, tuple[str, ...]]
    problems: dict[str, str]

    @property
    def fits(self) -> bool:
        """Whether the inputs fit at least one announced signature (any
        array fits an announcer that announces no parameters)."""
        return len(self.problems) < len(self.signatures)

    @property
    def note(self) -> str:
        """For people, where the announcers disagree (a rollout): each
        signature with who announces it, and those the inputs fit; ""
        where they agree."""
        if len(self.signatures) < 2:
            return ""
        fitting = [s for s in self.signatures if s not in self.problems]
        return (
            f"live workers announce {len(self.signatures)} signatures ({self._listed()});"
            f" the input fits {' and '.join(fitting)}"
        )

    def refusal(self) -> str:
        """Why the inputs are refused (when they fit no signature)."""
        if len(self.signatures) == 1:
            [(shown, problem)] = self.problems.items()
            return f"{problem} (announced: {shown})"
        reasons = "; ".join(f"{shown}: {problem}" for shown, problem in self.problems.items())
        return (
            f"the input fits none of the {len(self.signatures)} signatures live workers"
            f" announce ({self._listed()}): {reasons}"
        )

    def _listed(self) -> str:
        def who(ids: tuple[str, ...]) -> str:
            # A fleet may be large: a few ids say enough.
            more = f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else ""
            return ", ".join(ids[:_IDS_SHOWN]) + more

        return "; ".join(f"{s} by {who(ids)}" for s, ids in self.signatures.items())


def check_announced_inputs(
    descriptors: Sequence[WorkerDescriptor], workflow: str, args: Sequence[Any]
) -> AnnouncedCheck | None:
    """Check the positional inputs ``args`` of a start of ``workflow``
    against the parameters its live announcers announce, or None when none
    announces any (announcers older than ``params``): then only the array
    was checked.

    Each distinct signature is checked: during a rollout, whichever
    announcer runs the run may have its own.
    """
    said: dict[str, list[str]] = {}
    problems: dict[str, str] = {}
    for d in sorted(descriptors, key=lambda d: d.instance_id):
        entry = d.workflows.get(workflow)
        if entry is None:
            continue
        params = read_params(entry)
        shown = signature_shown(workflow, params)
        if shown not in said and params is not None:
            problem = input_problem(workflow, params, args)
            if problem:
                problems[shown] = problem
        said.setdefault(shown, []).append(d.instance_id)
    if list(said) in ([], [signature_shown(workflow, None)]):
        return None
    return AnnouncedCheck(signatures={s: tuple(ids) for s, ids in said.items()}, problems=problems)
