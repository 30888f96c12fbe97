"""Search attributes fleet-wide: the types the store records for them, and
the checks of a start's attributes and of a filter's.

An app declares its attributes (`App.search_attribute`); an engine records
each declaration in its store when it opens (a keyed value of scope
``"search-attribute"``), unless the store holds one for that name already,
which must then agree. So one name has one type for good, across every
engine, client and tool sharing the store, and those without the app (a
client started by name, the command line, the console) read the types from
the store to check values and filters (see docs/search-attributes.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from ..._base._exceptions import SearchAttributeError
from ..._base._search_values import (
    TYPES,
    SearchAttributeType,
    SearchCondition,
    SearchValue,
    check_attributes,
    conditions,
)
from ..._stores._ops import PutValue

if TYPE_CHECKING:
    from ..._kernel._definitions import Registry
    from ..._stores._base import Store

SCOPE: Final = "search-attribute"
"""The scope of the keyed values that record the attributes' types."""


def _stored_type(name: str, text: str) -> SearchAttributeType:
    kind = json.loads(text).get("type")
    if kind not in TYPES:
        raise SearchAttributeError(f"the store records an unknown type for {name!r}: {text!r}")
    return kind  # type: ignore[no-any-return]


async def stored_types(store: Store) -> dict[str, SearchAttributeType]:
    """The types the store records, by name."""
    found: dict[str, SearchAttributeType] = {}
    after: str | None = None
    while True:
        page = await store.list_values(SCOPE, after=after, limit=100)
        for value in page:
            found[value.key] = _stored_type(value.key, value.value)
        if len(page) < 100:
            return found
        after = page[-1].key


def _disagreement(
    declared: Mapping[str, SearchAttributeType], stored: Mapping[str, SearchAttributeType]
) -> None:
    for name, kind in declared.items():
        if stored.get(name, kind) != kind:
            raise SearchAttributeError(
                f"search attribute {name!r} is declared as {kind}, but the store records it"
                f" as {stored[name]}: a name keeps its first type (declare a new name)"
            )


def _record(name: str, kind: SearchAttributeType, now: float) -> PutValue:
    # Only if no writer recorded one first (then the stored type stands).
    text = json.dumps({"type": kind}, separators=(",", ":"))
    return PutValue(SCOPE, name, text, now, expect_version=0, strict=False)


async def register(store: Store, app: Registry, now: float) -> None:
    """Record ``app``'s declarations in the store, checked against what it
    records already (`open_engine`).

    Raises:
      SearchAttributeError: A declaration disagrees with the store.
    """
    declared = app.search_attributes
    if not declared:
        return
    stored = await stored_types(store)
    _disagreement(declared, stored)
    missing = [_record(name, kind, now) for name, kind in declared.items() if name not in stored]
    if missing:
        await store.apply(missing)
        # Another engine may have recorded another type meanwhile.
        _disagreement(declared, await stored_types(store))


async def learned_records(
    store: Store, learned: Mapping[str, SearchAttributeType], now: float
) -> list[PutValue]:
    """The writes that record the types of search attributes a remote
    workflow's decision named (as its workers declare them), for those the
    store does not know yet.

    Raises:
      SearchAttributeError: The store records another type for one.
    """
    if not learned:
        return []
    stored = await stored_types(store)
    _disagreement(learned, stored)
    return [
        _record(name, kind, now) for name, kind in sorted(learned.items()) if name not in stored
    ]


async def start_attributes(
    store: Store, app: Registry | None, attributes: object, now: float
) -> tuple[dict[str, SearchValue], list[PutValue]]:
    """A start's attributes, checked, and the writes that record the types
    of any the store does not know yet (a client's app may declare them).

    Raises:
      SearchAttributeError: An attribute is undeclared or of another type.
    """
    if attributes is None or (isinstance(attributes, Mapping) and not attributes):
        return {}, []
    declared = {} if app is None else app.search_attributes
    stored = await stored_types(store)
    _disagreement(declared, stored)
    checked = check_attributes(attributes, {**declared, **stored}, removals=False)
    records = [_record(name, declared[name], now) for name in sorted(checked) if name not in stored]
    return {name: value for name, value in sorted(checked.items()) if value is not None}, records


async def filter_conditions(store: Store, filters: Any) -> tuple[SearchCondition, ...]:
    """The conditions of a ``search_attributes=`` filter, by the types the
    store records.

    Raises:
      SearchAttributeError: The filter is malformed or names an attribute
        the store does not know.
    """
    if filters is None or (isinstance(filters, Mapping) and not filters):
        return ()
    return conditions(filters, await stored_types(store))
