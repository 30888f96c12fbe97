"""Trio's scheduling made to follow a seed (`trio_durable.testing._scheduling`),
and a trio without the private switch that does it: the simulation runs with
Trio's ordinary scheduler and says so with `UnseededSchedulingWarning`.
"""

from __future__ import annotations

import logging
import random
import subprocess
import sys
import types

import pytest
import trio
from trio._core import _run as trio_run

from cli_processes import WITHIN
from trio_durable.testing import (
    Faults,
    UnseededSchedulingWarning,
    _scheduling,
    deterministic_scheduling,
)
from trio_durable.testing._workloads import simulate_builtin

MISSING = "trio._core._no_scheduling_switch"
"""A module no trio has: a trio that moved or dropped the switch."""


async def _race() -> tuple[int, ...]:
    """Five tasks that each append their index at four checkpoints: the
    order is exactly Trio's scheduling order."""
    order: list[int] = []

    async def racer(index: int) -> None:
        for _ in range(4):
            await trio.lowlevel.checkpoint()
            order.append(index)

    async with trio.open_nursery() as nursery:
        for index in range(5):
            nursery.start_soon(racer, index)
    return tuple(order)


def _scheduled(seed: int) -> tuple[int, ...]:
    with deterministic_scheduling(seed):
        return trio.run(_race)


def test_trio_scheduling_follows_the_seed() -> None:
    # Determinism rests on private parts of Trio: the flag
    # trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING and its random source
    # trio._core._run._r, which `deterministic_scheduling` sets and seeds.
    # CI runs this on the oldest trio the project supports and on the
    # newest; when a trio renames or stops honouring them, this test fails
    # there (and the simulation warns, see below).
    flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING

    assert {_scheduled(3) for _ in range(10)} == {_scheduled(3)}
    # The seed picks the order (so distinct seeds explore distinct schedules) ...
    assert len({_scheduled(seed) for seed in range(10)}) > 1
    # ... and left alone Trio varies it, so the equality above is not vacuous.
    assert len({trio.run(_race) for _ in range(20)}) > 1
    # The switch is put back as it was.
    assert trio_run._ALLOW_DETERMINISTIC_SCHEDULING is flag


@pytest.mark.parametrize("where", ["missing", "changed"])
def test_a_trio_without_the_switch_schedules_as_usual_and_warns(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = trio_run._ALLOW_DETERMINISTIC_SCHEDULING
    if where == "missing":
        monkeypatch.setattr(_scheduling, "_SWITCH_MODULE", MISSING)
    else:
        # A trio whose switch is no longer a plain flag.
        changed = types.ModuleType("trio_changed_run")
        changed._ALLOW_DETERMINISTIC_SCHEDULING = "always"  # type: ignore[attr-defined]
        changed._r = random.Random()  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, changed.__name__, changed)
        monkeypatch.setattr(_scheduling, "_SWITCH_MODULE", changed.__name__)
    with pytest.warns(UnseededSchedulingWarning, match=r"ordinary scheduler") as warned:
        orders = {_scheduled(3) for _ in range(20)}
    assert f"trio {trio.__version__} has no switch" in str(warned[0].message)
    # Trio's own shuffle, unseeded: the same seed gives several orders, and
    # Trio's switch was left alone.
    assert len(orders) > 1
    assert trio_run._ALLOW_DETERMINISTIC_SCHEDULING is flag


def test_a_simulation_runs_without_the_switch_and_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logging.getLogger("trio_durable"), "disabled", True)
    monkeypatch.setattr(_scheduling, "_SWITCH_MODULE", MISSING)
    with pytest.warns(UnseededSchedulingWarning):
        report = simulate_builtin(2, faults=Faults.none())
    # The workload ran to its end, and every invariant was checked.
    assert report.ok, report.violations
    assert sum(report.statuses.values()) > 70


def test_the_command_says_when_scheduling_does_not_follow_the_seed() -> None:
    # What a user of `trio-durable simulate` sees on such a trio: the
    # warning on stderr, once, and the seeds run and pass all the same.
    code = (
        "import sys\n"
        "from trio_durable.testing import _scheduling\n"
        f"_scheduling._SWITCH_MODULE = {MISSING!r}\n"
        "from trio_durable._cli import main\n"
        "sys.exit(main(['simulate', '--seeds', '1..2', '--no-faults']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=WITHIN, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "2 passed, 0 failed" in done.stdout
    assert done.stderr.count("UnseededSchedulingWarning: trio ") == 1, done.stderr
    assert "has no switch to make its scheduling follow a seed" in done.stderr
