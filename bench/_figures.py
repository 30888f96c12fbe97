"""The figures a benchmark prints, also written as JSON lines.

Every bench script reports each figure through `figure`: it is printed as
before, and, when ``--json PATH`` was given (see `add_json_option`) or the
``TRIO_DURABLE_BENCH_JSON`` environment variable names a file, appended to
that file as one JSON object per line::

    {"bench": "bench_engine", "case": "sqlite.sequential", "value": 495.2,
     "unit": "runs/s", "better": "higher", "commit": "c22db11",
     "date": "2026-12-05T01:10:00+00:00", "host": "..."}

``bench/compare.py OLD NEW`` prints the ratio of two such files, case by
case. Figures never pass or fail; they are for reading.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any, Literal

_ENV = "TRIO_DURABLE_BENCH_JSON"
_path: Path | None = None
_commit: str | None = None


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--json PATH`` to a bench's arguments; call `use_args` after
    parsing."""
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=os.environ.get(_ENV),
        help=f"append each figure to PATH as a JSON line (default: ${_ENV})",
    )


def add_names_option(
    parser: argparse.ArgumentParser,
    flag: str,
    known: tuple[str, ...],
    default: tuple[str, ...] | None = None,
) -> None:
    """Add ``flag``, a comma-separated choice among ``known`` (its value a
    tuple of names, in ``known``'s order): ``all`` (and, for two, ``both``)
    names every one; any other name is refused with the known ones.

    Its help lists every accepted value, which tests/test_bench_options.py
    runs one by one at a tiny size.
    """
    every = ("all", "both") if len(known) == 2 else ("all",)

    def names(text: str) -> tuple[str, ...]:
        given = [name.strip() for name in text.split(",") if name.strip()]
        if not given:
            raise argparse.ArgumentTypeError(f"name one of {', '.join(known)}")
        if any(name in every for name in given):
            return known
        unknown = [name for name in given if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown: {', '.join(unknown)} (known: {', '.join(known)}, or {' or '.join(every)})"
            )
        return tuple(name for name in known if name in given)

    names.__name__ = flag.lstrip("-")
    parser.add_argument(
        flag,
        type=names,
        default=known if default is None else default,
        metavar="NAME[,NAME...]",
        help=(
            f"any of {', '.join(known)}, comma-separated, or {' or '.join(every)}"
            f" (default: {','.join(known if default is None else default)})"
        ),
    )


def add_gc_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--gc-threshold N[,N,N]``: the collector's thresholds for the
    bench's process (`gc.set_threshold`), set by `use_args`; Python's own
    (700,10,10) without it."""

    def thresholds(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(part) for part in text.split(","))
        except ValueError:
            raise argparse.ArgumentTypeError(f"not integers: {text!r}") from None
        if not 1 <= len(values) <= 3 or any(value < 0 for value in values):
            raise argparse.ArgumentTypeError("one to three integers, none negative")
        return values

    parser.add_argument(
        "--gc-threshold",
        type=thresholds,
        metavar="N[,N,N]",
        help="the collector's thresholds for this process (e.g. 10000,50,100)",
    )


def use_args(args: argparse.Namespace) -> None:
    """Write figures where ``--json`` said; set the collector's thresholds
    where ``--gc-threshold`` gave them."""
    global _path
    _path = Path(args.json) if getattr(args, "json", None) else None
    thresholds = getattr(args, "gc_threshold", None)
    if thresholds:
        gc.set_threshold(*thresholds)


def _head() -> str:
    global _commit
    if _commit is None:
        try:
            _commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).parent,
                timeout=60,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            _commit = "unknown"
    return _commit


def figure(
    bench: str,
    case: str,
    value: float,
    unit: str,
    *,
    better: Literal["higher", "lower"] = "higher",
    label: str | None = None,
    **extra: Any,
) -> None:
    """Print one figure (``label`` or ``case``, value and unit) and, if
    asked, append it as a JSON line. ``extra`` keys go into the JSON only."""
    print(f"  {label or case}: {value:,.2f} {unit}", flush=True)
    path = _path
    if path is None and os.environ.get(_ENV):
        path = Path(os.environ[_ENV])
    if path is None:
        return
    line = {
        "bench": bench,
        "case": case,
        "value": value,
        "unit": unit,
        "better": better,
        "commit": _head(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        **extra,
    }
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
