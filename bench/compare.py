"""Compare two files of bench figures (JSON lines, see ``_figures.py``).

Usage: ``python bench/compare.py OLD.jsonl NEW.jsonl``.

For each (bench, case) present in both files it prints the old and the new
value, the ratio new/old, and whether the new one is better or worse, as the
figure's ``better`` key says ("higher" or "lower"). A case that appears
several times in a file (repetitions, or files appended to) counts as the
median of its values. Cases found in only one file are counted at the end.

Figures are for reading: the exit status is 0 whatever the ratios say, and
2 only when a file cannot be read (missing, or a line that is not a figure).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

Key = tuple[str, str]


class FiguresFileError(Exception):
    """A figures file is missing, unreadable, or holds a line that is not a
    figure (a JSON object with ``bench``, ``case`` and a numeric ``value``)."""


@attrs.frozen
class Figure:
    """The median of one case's values in one file."""

    value: float
    unit: str
    better: str
    count: int


@attrs.frozen
class Row:
    """One case present in both files."""

    bench: str
    case: str
    old: Figure
    new: Figure

    @property
    def ratio(self) -> float:
        """new / old (inf when old is 0 and new is not; 1.0 when both are 0)."""
        if self.old.value == 0:
            return 1.0 if self.new.value == 0 else math.inf
        return self.new.value / self.old.value

    @property
    def verdict(self) -> str:
        """``better``, ``worse`` or ``same``, by the new figure's ``better``."""
        if self.new.value == self.old.value:
            return "same"
        higher = self.new.value > self.old.value
        return "better" if higher == (self.new.better != "lower") else "worse"


def read_figures(path: Path) -> dict[Key, Figure]:
    """Each (bench, case) of a JSON-lines file, as the median of its values.

    Raises:
        FiguresFileError: the file cannot be read or a line is not a figure.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise FiguresFileError(f"cannot read {path}: {exc}") from exc
    values: dict[Key, list[float]] = {}
    meta: dict[Key, tuple[str, str]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FiguresFileError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise FiguresFileError(f"{path}:{number}: not a JSON object")
        missing = [k for k in ("bench", "case", "value") if k not in record]
        if missing:
            raise FiguresFileError(f"{path}:{number}: no {', '.join(missing)} key")
        value = record["value"]
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FiguresFileError(f"{path}:{number}: value {value!r} is not a number")
        key = (str(record["bench"]), str(record["case"]))
        values.setdefault(key, []).append(float(value))
        meta[key] = (str(record.get("unit", "")), str(record.get("better", "higher")))
    return {
        key: Figure(
            value=statistics.median(found),
            unit=meta[key][0],
            better=meta[key][1],
            count=len(found),
        )
        for key, found in values.items()
    }


def compare(old: dict[Key, Figure], new: dict[Key, Figure]) -> list[Row]:
    """The cases present in both, in the new file's order."""
    return [
        Row(bench=bench, case=case, old=old[bench, case], new=figure)
        for (bench, case), figure in new.items()
        if (bench, case) in old
    ]


def _number(value: float) -> str:
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:,.3g}" if abs(value) < 1 else f"{value:,.2f}"


def format_rows(rows: Sequence[Row]) -> list[str]:
    """A table: bench, case, old, new, unit, new/old, verdict."""
    table = [("bench", "case", "old", "new", "unit", "new/old", "")]
    for row in rows:
        ratio = "n/a" if math.isinf(row.ratio) else f"{row.ratio:.2f}x"
        table.append(
            (
                row.bench,
                row.case,
                _number(row.old.value),
                _number(row.new.value),
                row.new.unit,
                ratio,
                row.verdict,
            )
        )
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    right = {2, 3, 5}
    return [
        "  ".join(
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ).rstrip()
        for line in table
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="figures before (JSON lines)")
    parser.add_argument("new", type=Path, help="figures after (JSON lines)")
    args = parser.parse_args(argv)
    try:
        old, new = read_figures(args.old), read_figures(args.new)
    except FiguresFileError as exc:
        print(f"compare.py: {exc}", file=sys.stderr)
        return 2
    rows = compare(old, new)
    if rows:
        print("\n".join(format_rows(rows)))
    else:
        print("no case is present in both files")
    better = sum(row.verdict == "better" for row in rows)
    worse = sum(row.verdict == "worse" for row in rows)
    print(f"\n{len(rows)} cases in both: {better} better, {worse} worse")
    only_old, only_new = old.keys() - new.keys(), new.keys() - old.keys()
    if only_old or only_new:
        print(f"only in {args.old}: {len(only_old)}; only in {args.new}: {len(only_new)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
