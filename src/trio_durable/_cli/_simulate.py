"""``trio-durable simulate``: the deterministic simulation of the built-in
workload over many seeds (`trio_durable.testing.simulate`), with the flags
and the output of ``python -m trio_durable.testing.simulate``, a progress
bar on stderr when a person watches, and ``--json``."""

from __future__ import annotations

from typing import Any

import click

from ._common import EXIT_FAILED, json_option, print_json, progress


def _seeds(_: click.Context, __: click.Parameter, value: str) -> list[int]:
    from ..testing.simulate import parse_seeds

    try:
        seeds = parse_seeds(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not like 1..200, 7 or 1,5,9") from None
    if not seeds:
        raise click.BadParameter(f"{value!r} names no seed")
    return seeds


@click.command("simulate", short_help="Simulate the built-in workload over many seeds.")
@click.option(
    "--seeds", default="1..20", show_default=True, callback=_seeds, help="e.g. 1..200, 7, or 1,5,9"
)
@click.option("--engines", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--duration", type=click.FloatRange(min=0), default=3600.0, show_default=True)
@click.option("--no-faults", is_flag=True, help="Inject no faults.")
@click.option("--verbose", is_flag=True, help="Show the engines' log.")
@json_option
@click.pass_context
def simulate_command(
    ctx: click.Context,
    seeds: list[int],
    engines: int,
    workers: int,
    duration: float,
    no_faults: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Simulate the built-in workload once per seed, with injected faults.

    One line per seed, then a summary; if a seed fails, it is run again with
    its trace printed, and the command exits with status 1.
    """
    # Imported here: the harness is large, and other commands never need it.
    from ..testing import Faults
    from ..testing.simulate import (
        print_replay,
        print_seed,
        quiet_engines,
        replay,
        run_seeds,
        stopwatch,
        summary_line,
    )

    faults = Faults.none() if no_faults else Faults.everything()
    settings: dict[str, Any] = {
        "engines": engines,
        "workers": workers,
        "faults": faults,
        "duration": duration,
    }
    with quiet_engines(not verbose):
        with progress(len(seeds), "simulating seeds", quiet=as_json) as advance:

            def done(report: Any) -> None:
                if not as_json:
                    print_seed(report)
                advance()

            with stopwatch() as elapsed:
                reports = run_seeds(seeds, on_report=done, **settings)
        failed = [r.seed for r in reports if not r.ok]
        again = replay(failed[0], **settings) if failed else None
    if as_json:
        print_json(
            {
                "seeds": [
                    {
                        "seed": r.seed,
                        "ok": r.ok,
                        "trace_hash": r.trace_hash,
                        "faults": r.faults,
                        "simulated_time": r.simulated_time,
                        "statuses": r.statuses,
                        "violations": list(r.violations),
                    }
                    for r in reports
                ],
                "passed": len(reports) - len(failed),
                "failed": len(failed),
                "seconds": round(elapsed[0], 3),
                "seeds_per_second": round(len(reports) / elapsed[0], 3) if elapsed[0] else None,
                "replay": None
                if again is None
                else {
                    "seed": again.seed,
                    "trace": list(again.trace),
                    "violations": list(again.violations),
                },
            }
        )
    else:
        print(summary_line(reports, elapsed[0]))
        if again is not None:
            print_replay(again)
    if failed:
        ctx.exit(EXIT_FAILED)
