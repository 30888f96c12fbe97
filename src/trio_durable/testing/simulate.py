"""``python -m trio_durable.testing.simulate --seeds 1..N``: the built-in
workload over many seeds, one line per seed, then a summary.

Exits non-zero when any seed fails; the first failing seed is then run again
alone with its full trace printed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
from collections.abc import Sequence
from typing import Any

from ._faults import Faults
from ._harness import simulate
from ._workloads import app, default_workload


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
    engine_log = logging.getLogger("trio_durable")
    was_disabled = engine_log.disabled
    if not args.verbose:
        # Injected faults make the engines log a warning each; the report
        # says what was injected.
        engine_log.disabled = True
    try:
        return _run(args)
    finally:
        engine_log.disabled = was_disabled


def _run(args: argparse.Namespace) -> int:
    faults = Faults.none() if args.no_faults else Faults.everything()
    failed: list[int] = []
    simulated = 0.0
    for seed in parse_seeds(args.seeds):
        report = simulate(
            app,
            default_workload,
            seed=seed,
            engines=args.engines,
            workers=args.workers,
            faults=faults,
            duration=args.duration,
        )
        simulated += report.simulated_time
        injected = sum(report.faults.values())
        outcome = "ok  " if report.ok else "FAIL"
        print(
            f"seed {seed:>6} {outcome} trace {report.trace_hash} "
            f"faults {injected:>3} simulated {report.simulated_time / 3600:6.2f} h "
            f"runs {report.statuses}",
            flush=True,
        )
        for violation in report.violations:
            print(f"    {violation}")
        if not report.ok:
            failed.append(seed)
    total = len(parse_seeds(args.seeds))
    print(
        f"{total - len(failed)} passed, {len(failed)} failed"
        f" ({simulated / 3600:.1f} simulated hours)"
    )
    if failed:
        seed = failed[0]
        print(f"\nseed {seed} again, with its trace:")
        report = simulate(
            app,
            default_workload,
            seed=seed,
            engines=args.engines,
            workers=args.workers,
            faults=faults,
            duration=args.duration,
            keep_trace=True,
        )
        for line in report.trace:
            print(f"  {line}")
        for violation in report.violations:
            print(f"  violation: {violation}")
        return 1
    return 0


class _CallableModule(types.ModuleType):
    """Importing this module rebinds ``trio_durable.testing.simulate`` from
    the harness function to the module: keep it callable as the function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return simulate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule


if __name__ == "__main__":
    sys.exit(main())
