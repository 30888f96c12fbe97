"""``python -m trio_durable.testing.simulate --seeds 1..N``: the built-in
workload over many seeds, one line per seed, then a summary.

Exits non-zero when any seed fails; the first failing seed is then run again
alone with its full trace printed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .._front._app import App
from ._faults import Faults
from ._harness import simulate
from ._scheduling import UnseededSchedulingWarning, unseeded_reason
from ._simulation import SimulationReport, Workload
from ._workloads import simulate_builtin


def parse_seeds(text: str) -> list[int]:
    """``"1..200"``, ``"7"`` or ``"1,5,9"``."""
    seeds: list[int] = []
    for part in text.split(","):
        if ".." in part:
            first, last = part.split("..", 1)
            seeds.extend(range(int(first), int(last) + 1))
        else:
            seeds.append(int(part))
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trio_durable.testing.simulate")
    parser.add_argument("--seeds", default="1..20", help="e.g. 1..200, 7, or 1,5,9")
    parser.add_argument("--engines", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--no-faults", action="store_true", help="inject no faults")
    parser.add_argument("--verbose", action="store_true", help="show the engines' log")
    args = parser.parse_args(argv)
    faults = Faults.none() if args.no_faults else Faults.everything()
    with quiet_engines(not args.verbose), unseeded_told_once():
        with stopwatch() as elapsed:
            reports = run_seeds(
                parse_seeds(args.seeds),
                engines=args.engines,
                workers=args.workers,
                faults=faults,
                duration=args.duration,
                on_report=print_seed,
            )
        print(summary_line(reports, elapsed[0]))
        failed = [r.seed for r in reports if not r.ok]
        if not failed:
            return 0
        print_replay(
            replay(
                failed[0],
                engines=args.engines,
                workers=args.workers,
                faults=faults,
                duration=args.duration,
            )
        )
        return 1


@contextmanager
def quiet_engines(quiet: bool = True) -> Iterator[None]:
    """Silence the engines' log while the block runs, if ``quiet``: injected
    faults make the engines log a warning each, and the report says what
    was injected."""
    engine_log = logging.getLogger("trio_durable")
    was_disabled = engine_log.disabled
    if quiet:
        engine_log.disabled = True
    try:
        yield
    finally:
        engine_log.disabled = was_disabled


@contextmanager
def unseeded_told_once() -> Iterator[None]:
    """On a trio that cannot seed its scheduling, say so once on stderr
    and keep every seed of the block from warning it again."""
    reason = unseeded_reason()
    with warnings.catch_warnings():
        if reason is not None:
            print(f"{UnseededSchedulingWarning.__name__}: {reason}", file=sys.stderr)
            warnings.simplefilter("ignore", UnseededSchedulingWarning)
        yield


def run_seeds(
    seeds: Sequence[int],
    *,
    engines: int = 2,
    workers: int = 2,
    faults: Faults,
    duration: float = 3600.0,
    on_report: Callable[[SimulationReport], None] = lambda report: None,
    app: App | None = None,
    workload: Workload | None = None,
) -> list[SimulationReport]:
    """Simulate ``workload`` on ``app`` (by default the built-in workload)
    once per seed, in order; ``on_report`` is called with each report as
    soon as it is made."""
    reports: list[SimulationReport] = []
    for seed in seeds:
        report = _one(seed, engines, workers, faults, duration, app, workload, keep_trace=False)
        reports.append(report)
        on_report(report)
    return reports


def replay(
    seed: int,
    *,
    engines: int = 2,
    workers: int = 2,
    faults: Faults,
    duration: float = 3600.0,
    app: App | None = None,
    workload: Workload | None = None,
) -> SimulationReport:
    """One seed again, with its trace kept (to show a failing seed)."""
    return _one(seed, engines, workers, faults, duration, app, workload, keep_trace=True)


def _one(
    seed: int,
    engines: int,
    workers: int,
    faults: Faults,
    duration: float,
    app: App | None,
    workload: Workload | None,
    *,
    keep_trace: bool,
) -> SimulationReport:
    if app is None or workload is None:
        return simulate_builtin(
            seed,
            engines=engines,
            workers=workers,
            faults=faults,
            duration=duration,
            keep_trace=keep_trace,
        )
    return simulate(
        app,
        workload,
        seed=seed,
        engines=engines,
        workers=workers,
        faults=faults,
        duration=duration,
        keep_trace=keep_trace,
    )


def seed_lines(report: SimulationReport) -> list[str]:
    """A seed's line, then one line per violation."""
    injected = sum(report.faults.values())
    outcome = "ok  " if report.ok else "FAIL"
    return [
        f"seed {report.seed:>6} {outcome} trace {report.trace_hash} "
        f"faults {injected:>3} simulated {report.simulated_time / 3600:6.2f} h "
        f"runs {report.statuses}",
        *(f"    {violation}" for violation in report.violations),
    ]


def print_seed(report: SimulationReport) -> None:
    """Print `seed_lines` at once (a long sweep shows each seed as it ends)."""
    print("\n".join(seed_lines(report)), flush=True)


def summary_line(reports: Sequence[SimulationReport], seconds: float) -> str:
    """``N passed, M failed (H simulated hours, R seeds/s)``, for reports
    made in ``seconds`` of real time."""
    failed = sum(not r.ok for r in reports)
    simulated = sum(r.simulated_time for r in reports)
    return (
        f"{len(reports) - failed} passed, {failed} failed"
        f" ({simulated / 3600:.1f} simulated hours, {seeds_per_second(reports, seconds)} seeds/s)"
    )


def seeds_per_second(reports: Sequence[SimulationReport], seconds: float) -> str:
    """How many seeds a second were simulated, two significant digits."""
    return f"{len(reports) / seconds:.2g}" if seconds > 0 else "inf"


@contextmanager
def stopwatch(wall_clock: Callable[[], float] = time.time) -> Iterator[list[float]]:
    """Real seconds the block took, in the list it yields once it ends (a
    figure for people: seeds per second), read from ``wall_clock`` as an
    engine's `Clock` reads it (each seed runs a Trio run of its own, under
    a clock of its own, so no Trio clock spans them)."""
    elapsed: list[float] = []
    start = wall_clock()
    try:
        yield elapsed
    finally:
        elapsed.append(wall_clock() - start)


def print_replay(report: SimulationReport) -> None:
    """A failing seed run again: its trace, then its violations."""
    print(f"\nseed {report.seed} again, with its trace:")
    for line in report.trace:
        print(f"  {line}")
    for violation in report.violations:
        print(f"  violation: {violation}")


class _CallableModule(types.ModuleType):
    """Importing this module rebinds ``trio_durable.testing.simulate`` from
    the harness function to the module: keep it callable as the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return simulate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


if __name__ == "__main__":
    sys.exit(main())
