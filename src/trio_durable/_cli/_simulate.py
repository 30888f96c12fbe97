"""``trio-durable simulate [MODULE:APP --workload MODULE:FUNC]``: the
deterministic simulation of your app's workload (or the built-in one) over
many seeds (`trio_durable.testing.simulate`), with the flags and the output
of ``python -m trio_durable.testing.simulate``, a progress bar on stderr
when a person watches, and ``--json``. A failing seed is run again with its
trace, and the command that replays it alone is printed."""

from __future__ import annotations

import shlex
from typing import Any

import click

from ._apps import load_app, load_callable
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


@click.command("simulate", short_help="Simulate a workload over many seeds.")
@click.argument("app_spec", metavar="[MODULE:APP]", required=False)
@click.option(
    "--workload",
    "workload_spec",
    metavar="MODULE:FUNC",
    help="The async def (sim: Simulation) that drives the runs of MODULE:APP (default FUNC:"
    " workload).",
)
@click.option(
    "--seeds", default="1..20", show_default=True, callback=_seeds, help="e.g. 1..200, 7, or 1,5,9"
)
@click.option("--engines", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--duration", type=click.FloatRange(min=0), default=3600.0, show_default=True)
@click.option(
    "--faults",
    "fault_set",
    type=click.Choice(["everything", "none"], case_sensitive=False),
    default="everything",
    show_default=True,
    help="Which faults to inject (Faults.everything() or Faults.none()).",
)
@click.option("--no-faults", is_flag=True, help="Inject no faults (as --faults none).")
@click.option("--verbose", is_flag=True, help="Show the engines' log.")
@json_option
@click.pass_context
def simulate_command(
    ctx: click.Context,
    app_spec: str | None,
    workload_spec: str | None,
    seeds: list[int],
    engines: int,
    workers: int,
    duration: float,
    fault_set: str,
    no_faults: bool,
    verbose: bool,
    as_json: bool,
) -> None:
    """Simulate MODULE:APP's workload (--workload), or without them the
    built-in workload, once per seed, with injected faults.

    One line per seed, then a summary; if a seed fails, it is run again with
    its trace printed, then the command that replays that seed alone, and
    the command exits with status 1.
    """
    if (app_spec is None) != (workload_spec is None):
        raise click.UsageError(
            "give both MODULE:APP and --workload MODULE:FUNC, or neither (the built-in workload)"
        )
    app = None if app_spec is None else load_app(app_spec)
    workload = None if workload_spec is None else load_callable(workload_spec, "workload", "FUNC")
    no_faults = no_faults or fault_set.lower() == "none"
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
        unseeded_told_once,
    )

    faults = Faults.none() if no_faults else Faults.everything()
    settings: dict[str, Any] = {
        "engines": engines,
        "workers": workers,
        "faults": faults,
        "duration": duration,
        "app": app,
        "workload": workload,
    }
    with quiet_engines(not verbose), unseeded_told_once():
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
                    "command": replay_command(ctx, again.seed),
                },
            }
        )
    else:
        print(summary_line(reports, elapsed[0]))
        if again is not None:
            print_replay(again)
            print(f"\nreplay it: {replay_command(ctx, again.seed)}")
    if failed:
        ctx.exit(EXIT_FAILED)


def replay_command(ctx: click.Context, seed: int) -> str:
    """The command line that runs ``seed`` alone with the same settings."""
    params = ctx.params
    words = ["trio-durable", "simulate"]
    if params["app_spec"] is not None:
        words += [params["app_spec"], "--workload", params["workload_spec"]]
    words += ["--seeds", str(seed)]
    words += ["--engines", str(params["engines"]), "--workers", str(params["workers"])]
    words += ["--duration", f"{params['duration']:g}"]
    faults = (
        "none" if params["no_faults"] or params["fault_set"].lower() == "none" else "everything"
    )
    words += ["--faults", faults]
    return shlex.join(words)
