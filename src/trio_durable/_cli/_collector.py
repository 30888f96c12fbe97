"""The garbage collector of the ``engine`` and ``worker`` processes.

A process with thousands of runs in flight holds a few hundred thousand
container objects (each run's coroutines, records and messages); with
Python's thresholds (700, 10, 10) a full collection walks them all every
few thousand turns, and the collector takes a third of the process's CPU
(docs/performance.md, "The garbage collector"). The engine leaves the
collector of a program that embeds it alone; these processes are ours, so
they raise its thresholds and freeze what loading the app made (modules,
classes, functions: tens of thousands of objects no collection can free).
``--gc python`` keeps Python's settings.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

import click

from ._common import F

PROCESS_THRESHOLDS: Final = (10_000, 50, 100)
"""The collector's thresholds of an engine or worker process unless
``--gc`` says otherwise: a young collection every 10,000 allocations, a
full one after 50 x 100 of them (and, as always in CPython, only once the
objects that survived since the last one are a quarter of all)."""

_PYTHON: Final = "python"


def _thresholds(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...] | None:
    text = value.strip().lower()
    if text == _PYTHON:
        return None
    try:
        found = tuple(int(part) for part in text.split(","))
    except ValueError:
        found = ()
    if not 1 <= len(found) <= 3 or any(n < 0 for n in found):
        raise click.BadParameter(
            f"give one to three whole numbers, none negative (N[,N,N]), or {_PYTHON!r},"
            f" not {value!r}"
        )
    return found


def gc_option(fn: F) -> F:
    """``--gc N[,N,N]|python``: the collector's thresholds for the process
    (see `collector`)."""
    option: Callable[[F], F] = click.option(
        "--gc",
        "gc_thresholds",
        metavar="N[,N,N]|python",
        default=",".join(map(str, PROCESS_THRESHOLDS)),
        show_default=True,
        callback=_thresholds,
        help="The garbage collector's thresholds for this process, after freezing what"
        " loading the app made; 'python' leaves the collector as Python sets it"
        " (700,10,10, nothing frozen).",
    )
    return option(fn)


@contextmanager
def collector(thresholds: tuple[int, ...] | None) -> Iterator[str]:
    """While the block runs, the collector with ``thresholds`` and what
    exists now frozen (`gc.freeze`), so that full collections walk only
    what the process makes after; None leaves it alone. Yields how it is
    set, for the process's ready line; undone on exit (a command run in
    process: tests, a caller of ``main()``)."""
    if thresholds is None:
        yield f"collector as Python sets it {gc.get_threshold()}"
        return
    was = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    try:
        yield (
            f"collector thresholds {','.join(map(str, thresholds))},"
            f" {gc.get_freeze_count()} objects frozen"
        )
    finally:
        gc.set_threshold(*was)
        gc.unfreeze()
