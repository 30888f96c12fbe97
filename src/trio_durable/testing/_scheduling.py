"""Trio's scheduling made to follow a seed, where the installed trio allows it.

Trio shuffles each batch of runnable tasks with a random source of its own,
and honours a switch that makes the shuffle follow that source's seed:
``_ALLOW_DETERMINISTIC_SCHEDULING`` and ``_r`` in ``trio._core._run``. Both
are private. A trio that drops them, or changes what they are, runs the
simulation with its ordinary scheduler: `deterministic_scheduling` then warns
with `UnseededSchedulingWarning` and changes nothing, rather than failing on
a trio the rest of the code supports.
"""

from __future__ import annotations

import importlib
import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Final

import trio

_SWITCH_MODULE: Final = "trio._core._run"
"""Where Trio keeps the switch and its random source (a test points this
elsewhere to play a trio without them)."""

_FLAG: Final = "_ALLOW_DETERMINISTIC_SCHEDULING"
"""The switch: a module global that Trio reads at each batch it schedules."""


class UnseededSchedulingWarning(RuntimeWarning):
    """Warned by `deterministic_scheduling`, and so by `simulate` and
    ``trio-durable simulate``, when the installed trio has no switch that
    makes its scheduling follow a seed.

    The simulation still runs, injects the seed's faults and checks every
    invariant, but Trio orders runnable tasks at random: the same seed may
    give another trace hash, and a failing seed may not fail again when
    replayed. Not warned on a trio that has the switch.
    """


def _scheduling_switch() -> ModuleType | None:
    """Trio's module holding the switch and its random source, or None when
    this trio has no such switch (or one of another shape)."""
    try:
        module = importlib.import_module(_SWITCH_MODULE)
    except ImportError:
        return None
    flag = getattr(module, _FLAG, None)
    source = getattr(module, "_r", None)
    if isinstance(flag, bool) and isinstance(source, random.Random):
        return module
    return None


def unseeded_reason() -> str | None:
    """Why Trio's scheduling cannot follow a seed on the installed trio, or
    None when it can."""
    if _scheduling_switch() is not None:
        return None
    return (
        f"trio {trio.__version__} has no switch to make its scheduling follow a seed "
        f"({_SWITCH_MODULE}.{_FLAG}): running with Trio's "
        "ordinary scheduler, so a seed may not replay the same trace"
    )


@contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Make Trio's scheduling order follow ``seed`` inside the block.

    Every trio the project supports has the private switch this sets; on a
    trio without it, the block runs with Trio's ordinary scheduler.

    Args:
      seed: Seeds Trio's random source for the block; the switch and the
        source's state are put back when it ends.

    Warns:
      UnseededSchedulingWarning: The installed trio has no such switch.
    """
    switch = _scheduling_switch()
    if switch is None:
        warnings.warn(UnseededSchedulingWarning(unseeded_reason()), stacklevel=3)
        yield
        return
    previous = getattr(switch, _FLAG)
    state = switch._r.getstate()
    setattr(switch, _FLAG, True)
    switch._r.seed(seed)
    try:
        yield
    finally:
        setattr(switch, _FLAG, previous)
        switch._r.setstate(state)
