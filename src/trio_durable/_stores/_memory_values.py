"""The memory store's keyed values: the write of `PutValue`, with its undo,
and the reads `Store.get_value` and `Store.list_values`.

`MemoryValues` is a part of `MemoryStore` (a base class), kept apart so each
file stays about one thing. Each scope keeps its rows by key and its keys in
a sorted list, so a page of `list_values` is a bisection and a slice, not a
sort of the scope.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from itertools import islice

from .._records import StoredValue
from ._ops import PutValue
from ._rules import value_conflict

_Undo = Callable[[], None]


class MemoryValues:
    """Keyed values over `MemoryStore`'s dictionaries."""

    # scope -> key -> row, and scope -> its keys in order (code point by
    # code point, as the SQL stores compare them).
    _values: dict[str, dict[str, StoredValue]]
    _value_keys: dict[str, list[str]]

    async def _enter(self) -> None:
        raise NotImplementedError

    def _put_value(self, op: PutValue, journal: list[_Undo]) -> int | None:
        old = self._values.get(op.scope, {}).get(op.key)
        # 0 stands for "absent": a stored row's version is 1 or more.
        stored = 0 if old is None else old.version
        if op.expect_version is not None and op.expect_version != stored:
            if op.strict:
                raise value_conflict(op)
            return None
        new = None
        if op.value is not None:
            new = StoredValue(
                scope=op.scope, key=op.key, value=op.value, version=stored + 1, updated_at=op.at
            )
        if old is not None or new is not None:
            self._replace_value(op.scope, op.key, old, new)
            journal.append(lambda: self._replace_value(op.scope, op.key, new, old))
        return 0 if new is None else new.version

    def _replace_value(
        self, scope: str, key: str, old: StoredValue | None, new: StoredValue | None
    ) -> None:
        rows = self._values.setdefault(scope, {})
        keys = self._value_keys.setdefault(scope, [])
        if new is not None:
            rows[key] = new
            if old is None:
                bisect.insort(keys, key)
            return
        if old is not None:
            del rows[key]
            del keys[bisect.bisect_left(keys, key)]
        if not rows:
            del self._values[scope], self._value_keys[scope]

    async def get_value(self, scope: str, key: str) -> StoredValue | None:
        await self._enter()
        return self._values.get(scope, {}).get(key)

    async def list_values(
        self, scope: str, *, prefix: str = "", after: str | None = None, limit: int = 100
    ) -> list[StoredValue]:
        await self._enter()
        rows = self._values.get(scope, {})
        keys = self._value_keys.get(scope, [])
        # The keys starting with ``prefix`` are the run of keys from it on.
        start = bisect.bisect_left(keys, prefix)
        if after is not None:
            start = max(start, bisect.bisect_right(keys, after))
        found: list[StoredValue] = []
        for key in islice(keys, start, None):
            if len(found) >= limit or not key.startswith(prefix):
                break
            found.append(rows[key])
        return found
