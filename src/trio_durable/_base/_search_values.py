"""Search attributes' values: their types, the checks a value passes, how a
run's attributes are kept as text, and the conditions that filter runs by
them (see docs/search-attributes.md).

An attribute has one of six types, named as a store keeps them: ``str``,
``int``, ``float``, ``bool``, ``datetime`` and ``keywords`` (a list of
strings). A run keeps its attributes as JSON text, ``{name: [type,
value]}``, sorted by name: a datetime as whole microseconds since the epoch
(UTC), keywords as a list. The SQL stores index that text (one row per value,
a keyword list one per item, by triggers that read it), and a condition says
which of the index's three value columns it compares (``text``, ``int`` for
ints, bools and datetimes, ``real`` for floats). This module imports nothing
of the engine's, so the store records can use it.
"""

from __future__ import annotations

import datetime
import json
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, final, get_args

import attrs

from ._bounds import is_finite
from ._exceptions import SearchAttributeError
from ._index_text import refuse_nul

SearchAttributeType = Literal["str", "int", "float", "bool", "datetime", "keywords"]
SearchValue = str | int | float | bool | datetime.datetime | tuple[str, ...]
Column = Literal["text", "int", "real"]
Op = Literal["=", ">", ">=", "<", "<="]

TYPES: Final[tuple[SearchAttributeType, ...]] = get_args(SearchAttributeType)

MAX_TEXT: Final = 500
"""The longest string value (or keyword) in characters: an index entry of
PostgreSQL holds at most about 2,700 bytes."""

MAX_KEYWORDS: Final = 100
"""The most keywords one attribute holds."""

MAX_ATTRIBUTES: Final = 100
"""The most attributes one run holds."""

_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MICROSECOND: Final = datetime.timedelta(microseconds=1)
_INT64: Final = (-(2**63), 2**63 - 1)
_RANGED: Final[frozenset[str]] = frozenset({"int", "float", "datetime"})
_COLUMNS: Final[dict[str, Column]] = {
    "str": "text",
    "keywords": "text",
    "int": "int",
    "bool": "int",
    "datetime": "int",
    "float": "real",
}

_PYTHON_TYPES: Final[dict[object, SearchAttributeType]] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    datetime.datetime: "datetime",
    list[str]: "keywords",
}


def declared_type(declared: object) -> SearchAttributeType:
    """The type a declaration names: ``str``, ``int``, ``float``, ``bool``,
    ``datetime.datetime`` or ``list[str]`` (or one of `TYPES` by name).

    Raises:
      SearchAttributeError: It names none of them.
    """
    if isinstance(declared, str) and declared in TYPES:
        return declared
    try:
        found = _PYTHON_TYPES.get(declared)
    except TypeError:  # unhashable
        found = None
    if found is None:
        raise SearchAttributeError(
            f"a search attribute's type is str, int, float, bool, datetime.datetime or"
            f" list[str], not {declared!r}"
        )
    return found


def check_name(name: object) -> str:
    """``name``, checked to be a search attribute's name.

    Raises:
      SearchAttributeError: It is not 1 to 64 letters, digits and ``_``,
        starting with a letter or ``_``.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SearchAttributeError(
            "a search attribute's name is 1 to 64 letters, digits and '_', starting with a"
            f" letter or '_', not {name!r}"
        )
    return name


def _text(name: str, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise SearchAttributeError(f"search attribute {name!r} takes {what}, not {value!r}")
    # Indexed: SQLite's index would cut it at a NUL, PostgreSQL refuse it.
    refuse_nul(f"search attribute {name!r}", value, SearchAttributeError)
    if len(value) > MAX_TEXT:
        raise SearchAttributeError(
            f"search attribute {name!r}: a string is at most {MAX_TEXT} characters"
            f" (got {len(value)})"
        )
    return value


def check_value(name: str, kind: SearchAttributeType, value: object) -> SearchValue:
    """``value`` as the attribute ``name`` of type ``kind`` keeps it: a float
    for an int given to a float attribute, a datetime in UTC, keywords as a
    tuple without repeats (in their first order).

    Raises:
      SearchAttributeError: ``value`` is not of that type (or out of range).
    """
    if kind == "str":
        return _text(name, value, "a str")
    if kind == "bool":
        if not isinstance(value, bool):
            raise SearchAttributeError(f"search attribute {name!r} takes a bool, not {value!r}")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SearchAttributeError(f"search attribute {name!r} takes an int, not {value!r}")
        if not _INT64[0] <= value <= _INT64[1]:
            raise SearchAttributeError(
                f"search attribute {name!r}: {value} does not fit in 64 bits"
            )
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SearchAttributeError(f"search attribute {name!r} takes a float, not {value!r}")
        if not is_finite(value):
            raise SearchAttributeError(
                f"search attribute {name!r} takes a finite float, not {value!r}"
            )
        return float(value)
    if kind == "datetime":
        if not isinstance(value, datetime.datetime) or value.tzinfo is None:
            raise SearchAttributeError(
                f"search attribute {name!r} takes an aware datetime (with a tzinfo), not {value!r}"
            )
        return value.astimezone(datetime.UTC)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise SearchAttributeError(
            f"search attribute {name!r} takes a list of strings (keywords), not {value!r}"
        )
    items = [_text(name, item, "a list of strings (keywords)") for item in value]
    kept = tuple(dict.fromkeys(items))
    if len(kept) > MAX_KEYWORDS:
        raise SearchAttributeError(
            f"search attribute {name!r} holds at most {MAX_KEYWORDS} keywords (got {len(kept)})"
        )
    return kept


def type_of(value: SearchValue) -> SearchAttributeType:
    """The type of a value `check_value` returned."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, datetime.datetime):
        return "datetime"
    if isinstance(value, tuple):
        return "keywords"
    return "str"


def check_attributes(
    mapping: object, types: Mapping[str, SearchAttributeType], *, removals: bool
) -> dict[str, SearchValue | None]:
    """``mapping``'s attributes checked against their declared ``types``;
    with ``removals``, a value None (removing the attribute) is kept.

    Raises:
      SearchAttributeError: ``mapping`` is not a mapping, a name is not
        declared, or a value does not fit its type.
    """
    if not isinstance(mapping, Mapping):
        raise SearchAttributeError(
            f"search attributes are a mapping of names to values, not {mapping!r}"
        )
    checked: dict[str, SearchValue | None] = {}
    for name, value in mapping.items():
        check_name(name)
        kind = types.get(name)
        if kind is None:
            known = ", ".join(sorted(types)) or "none"
            raise SearchAttributeError(
                f"search attribute {name!r} is not declared (declare it with"
                f" app.search_attribute(name, type); declared: {known})"
            )
        if value is None and removals:
            checked[name] = None
            continue
        checked[name] = check_value(name, kind, value)
    if len(checked) > MAX_ATTRIBUTES:
        raise SearchAttributeError(f"a run holds at most {MAX_ATTRIBUTES} search attributes")
    return checked


def merged(
    current: Mapping[str, SearchValue], changes: Mapping[str, SearchValue | None]
) -> dict[str, SearchValue]:
    """``current`` with ``changes`` applied (None removes), sorted by name."""
    result = dict(current)
    for name, value in changes.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    if len(result) > MAX_ATTRIBUTES:
        raise SearchAttributeError(f"a run holds at most {MAX_ATTRIBUTES} search attributes")
    return dict(sorted(result.items()))


def _encoded(value: SearchValue) -> Any:
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // _MICROSECOND
    if isinstance(value, tuple):
        return list(value)
    return value


def dump_attributes(attributes: Mapping[str, SearchValue]) -> str:
    """A run's attributes as its row keeps them (``"{}"`` for none)."""
    if not attributes:
        return "{}"
    return json.dumps(
        {name: [type_of(value), _encoded(value)] for name, value in sorted(attributes.items())},
        separators=(",", ":"),
    )


def load_attributes(text: str | None) -> dict[str, SearchValue]:
    """The attributes `dump_attributes` wrote."""
    if not text or text == "{}":
        return {}
    loaded: dict[str, SearchValue] = {}
    for name, (kind, value) in json.loads(text).items():
        if kind == "datetime":
            loaded[name] = _EPOCH + value * _MICROSECOND
        elif kind == "keywords":
            loaded[name] = tuple(value)
        elif kind == "float":
            loaded[name] = float(value)
        else:
            loaded[name] = value
    return loaded


def plain_value(value: SearchValue) -> Any:
    """A value as JSON for people and tools: a datetime in ISO 8601, keywords
    as a list."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return value


def search_terms(attributes: Mapping[str, SearchValue]) -> list[tuple[str, str]]:
    """``(name, text)`` of each value as a ``NAME=VALUE`` filter takes it
    (`parse_where`): one per keyword of a list."""
    terms: list[tuple[str, str]] = []
    for name, value in attributes.items():
        if isinstance(value, tuple):
            terms.extend((name, item) for item in value)
        elif isinstance(value, bool):
            terms.append((name, "true" if value else "false"))
        elif isinstance(value, datetime.datetime):
            terms.append((name, value.isoformat()))
        else:
            terms.append((name, str(value)))
    return terms


# -- filters ------------------------------------------------------------------------


@final
@attrs.define(frozen=True, kw_only=True)
class SearchRange:
    """A range filter of an ``int``, ``float`` or ``datetime`` search
    attribute in `Engine.list_runs`: every bound given must hold.

    Attributes:
      gt: The value is greater than this.
      ge: The value is greater than or equal to this.
      lt: The value is less than this.
      le: The value is less than or equal to this.

    ``SearchRange(ge=10, lt=20)`` matches 10 to 19 of an int attribute.
    """

    gt: Any = None
    ge: Any = None
    lt: Any = None
    le: Any = None

    def bounds(self) -> list[tuple[Op, Any]]:
        """The bounds given, as (operator, value)."""
        ops: tuple[Op, ...] = (">", ">=", "<", "<=")
        values = (self.gt, self.ge, self.lt, self.le)
        return [(op, value) for op, value in zip(ops, values, strict=True) if value is not None]


@final
@attrs.define(frozen=True, kw_only=True)
class SearchCondition:
    """One condition of a run filter on a search attribute, as a store
    applies it: the run has an indexed value of attribute ``name`` in
    ``column`` for which ``value_there <op> value`` holds (for a keyword
    list: one of its keywords equals ``value``).

    Attributes:
      name: The attribute.
      column: Which value column it compares: ``text``, ``int`` or ``real``.
      op: ``=``, ``>``, ``>=``, ``<`` or ``<=``.
      value: What it compares with, as the column holds it.
    """

    name: str
    column: Column
    op: Op
    value: str | int | float


def _scalar(value: SearchValue) -> str | int | float:
    if isinstance(value, bool):
        return int(value)
    encoded = _encoded(value)
    assert isinstance(encoded, str | int | float)
    return encoded


def index_entries(value: SearchValue) -> list[tuple[Column, str | int | float]]:
    """The index entries of one attribute's value: one, or one per keyword."""
    column = _COLUMNS[type_of(value)]
    if isinstance(value, tuple):
        return [(column, item) for item in value]
    return [(column, _scalar(value))]


def conditions(
    filters: object, types: Mapping[str, SearchAttributeType]
) -> tuple[SearchCondition, ...]:
    """The conditions of ``list_runs(search_attributes=filters)``: a value
    matches equal values (a keyword list: lists holding it), a `SearchRange`
    the values within it (ints, floats and datetimes).

    Raises:
      SearchAttributeError: A name is unknown, a value does not fit the
        attribute's type, or a range is given for another type.
    """
    if filters is None:
        return ()
    if not isinstance(filters, Mapping):
        raise SearchAttributeError(
            f"search_attributes filters are a mapping of names to values, not {filters!r}"
        )
    found: list[SearchCondition] = []
    for name, wanted in filters.items():
        check_name(name)
        kind = types.get(name)
        if kind is None:
            raise SearchAttributeError(f"no search attribute {name!r} is declared in the store")
        column = _COLUMNS[kind]
        if isinstance(wanted, SearchRange):
            if kind not in _RANGED:
                raise SearchAttributeError(
                    f"search attribute {name!r} is {kind}: ranges apply to int, float and"
                    " datetime attributes"
                )
            bounds = wanted.bounds()
            if not bounds:
                raise SearchAttributeError(f"the SearchRange of {name!r} has no bound")
            for op, bound in bounds:
                value = check_value(name, kind, bound)
                found.append(SearchCondition(name=name, column=column, op=op, value=_scalar(value)))
            continue
        if kind == "keywords":
            value = _text(name, wanted, "a keyword (a str) to look for in its list")
        else:
            value = check_value(name, kind, wanted)
        found.append(SearchCondition(name=name, column=column, op="=", value=_scalar(value)))
    return tuple(found)


_COMPARE: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "=": operator.eq,
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


def matches(where: Iterable[SearchCondition], attributes: Mapping[str, SearchValue]) -> bool:
    """Whether a run with ``attributes`` passes every condition (for stores
    that test in Python)."""
    for condition in where:
        value = attributes.get(condition.name)
        if value is None:
            return False
        compare = _COMPARE[condition.op]
        if not any(
            column == condition.column and compare(entry, condition.value)
            for column, entry in index_entries(value)
        ):
            return False
    return True


# -- filters as text (the command line, the console) ----------------------------------

_WHERE: Final = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|=|>|<)(.*)", re.DOTALL)
_RANGE_KEYS: Final[dict[str, str]] = {">": "gt", ">=": "ge", "<": "lt", "<=": "le"}


def parse_text(name: str, kind: SearchAttributeType, text: str) -> SearchValue:
    """A value of attribute ``name`` written as text: ``true``/``false`` for a
    bool, ISO 8601 with an offset (or ``Z``) for a datetime, a keyword for a
    keyword list.

    Raises:
      SearchAttributeError: ``text`` is no value of that type.
    """
    parsed: object = text
    try:
        if kind == "int":
            parsed = int(text)
        elif kind == "float":
            parsed = float(text)
        elif kind == "bool":
            lowered = text.strip().lower()
            if lowered not in ("true", "false"):
                raise ValueError
            parsed = lowered == "true"
        elif kind == "datetime":
            parsed = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise SearchAttributeError(
            f"search attribute {name!r} is {kind}: {text!r} is not such a value"
        ) from None
    if kind != "str":
        return check_value(name, kind, parsed)
    return _text(name, text, "a str")


def parse_where(texts: Iterable[str], types: Mapping[str, SearchAttributeType]) -> dict[str, Any]:
    """The ``search_attributes`` filter of ``NAME=VALUE`` conditions (also
    ``>``, ``>=``, ``<``, ``<=`` for int, float and datetime attributes), as
    the command line and the console take them.

    Raises:
      SearchAttributeError: A condition is malformed, its attribute unknown,
        or its value not of the attribute's type.
    """
    filters: dict[str, Any] = {}
    for text in texts:
        found = _WHERE.fullmatch(text)
        if found is None:
            raise SearchAttributeError(
                f"a search condition is NAME=VALUE (or NAME>=VALUE, ...), not {text!r}"
            )
        name, op, raw = found.groups()
        kind = types.get(name)
        if kind is None:
            known = ", ".join(sorted(types)) or "none"
            raise SearchAttributeError(
                f"no search attribute {name!r} is declared in the store (declared: {known})"
            )
        if op == "=":
            if name in filters:
                raise SearchAttributeError(f"search attribute {name!r} is given twice")
            filters[name] = raw if kind == "keywords" else parse_text(name, kind, raw)
            continue
        if kind not in _RANGED:
            raise SearchAttributeError(
                f"search attribute {name!r} is {kind}: only = applies to it, not {op}"
            )
        previous = filters.get(name)
        if previous is not None and not isinstance(previous, SearchRange):
            raise SearchAttributeError(f"search attribute {name!r} is given twice")
        key = _RANGE_KEYS[op]
        if previous is not None and getattr(previous, key) is not None:
            raise SearchAttributeError(f"search attribute {name!r} is given {op} twice")
        value = parse_text(name, kind, raw)
        filters[name] = attrs.evolve(previous or SearchRange(), **{key: value})
    return filters
