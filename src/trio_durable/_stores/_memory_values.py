"""The memory store's keyed values: the write of `PutValue`, with its undo,
and the reads `Store.get_value` and `Store.list_values`.

`MemoryValues` is a part of `MemoryStore` (a base class), kept apart so each
file stays about one thing. Each scope keeps its rows by key and its keys in
a sorted list, so a page of `list_values` is a bisection and a slice, not a
sort of the scope; the values that go with a run are indexed by run, so
pruning it finds them without a scan.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from itertools import islice

from .._base._records import StoredValue
from ._ops import PutValue
from ._rules import value_conflict

_Undo = Callable[[], None]


class MemoryValues:
    """Keyed values over `MemoryStore`'s dictionaries."""

    # scope -> key -> row, and scope -> its keys in order (code point by
    # code point, as the SQL stores compare them).
    _values: dict[str, dict[str, StoredValue]]
    _value_keys: dict[str, list[str]]
    # run id -> the (scope, key) of the values that go with it.
    _values_of_run: dict[str, dict[tuple[str, str], None]]

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
            # A write that names no run keeps the run the row goes with.
            run_id = op.run_id if op.run_id is not None or old is None else old.run_id
            new = StoredValue(
                scope=op.scope,
                key=op.key,
                value=op.value,
                version=stored + 1,
                updated_at=op.at,
                run_id=run_id,
            )
        if old is not None or new is not None:
            self._replace_value(op.scope, op.key, old, new)
            journal.append(lambda: self._replace_value(op.scope, op.key, new, old))
        return 0 if new is None else new.version

    def _replace_value(
        self, scope: str, key: str, old: StoredValue | None, new: StoredValue | None
    ) -> None:
        if old is not None and old.run_id is not None:
            owned = self._values_of_run[old.run_id]
            del owned[scope, key]
            if not owned:
                del self._values_of_run[old.run_id]
        if new is not None and new.run_id is not None:
            self._values_of_run.setdefault(new.run_id, {})[scope, key] = None
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

    def _forget_values(self, run_id: str) -> None:
        """Delete the values that go with a pruned run."""
        for scope, key in list(self._values_of_run.get(run_id, ())):
            self._replace_value(scope, key, self._values[scope][key], None)

    async def prune_values(self, scope: str, older_than: float, limit: int) -> int:
        await self._enter()
        rows = self._values.get(scope, {})
        doomed = sorted(
            (row.updated_at, row.key)
            for row in rows.values()
            if row.run_id is None and row.updated_at < older_than
        )[: max(limit, 0)]
        for _, key in doomed:
            self._replace_value(scope, key, rows[key], None)
        return len(doomed)
