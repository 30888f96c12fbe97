"""``trio-durable simulate MODULE:APP --workload MODULE:FUNC``: the example
app of examples/simulated_orders.py passes 20 seeds with every fault; a copy
with a bug planted (its orders wait for a confirmation forever) fails, and
the command the failing seed prints replays it alone, failing the same way."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from test_cli import invoke

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "simulated_orders.py"


def test_the_example_app_passes_20_seeds_with_every_fault() -> None:
    spec = str(EXAMPLE)
    result = invoke(
        ["simulate", f"{spec}:app", "--workload", f"{spec}:workload", "--seeds", "1..20", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["passed"], document["failed"]) == (20, 0)
    assert all(sum(seed["faults"].values()) > 0 for seed in document["seeds"])
    assert {tuple(sorted(seed["statuses"].items())) for seed in document["seeds"]} == {
        (("cancelled", 1), ("completed", 5), ("failed", 5))
    }


def test_a_planted_bug_fails_a_seed_whose_command_replays_it(tmp_path: Path) -> None:
    planted = tmp_path / "planted_orders.py"
    source = EXAMPLE.read_text()
    assert 'await ctx.wait_signal("confirm", timeout=7200)' in source
    planted.write_text(
        source.replace('ctx.wait_signal("confirm", timeout=7200)', 'ctx.wait_signal("confirm")')
    )
    spec = str(planted)
    result = invoke(["simulate", f"{spec}:app", "--workload", spec, "--seeds", "3..5"])
    assert result.exit_code == 1, result.output
    assert "seed      3 FAIL" in result.stdout
    assert "violation: run order-1 did not end: suspended" in result.stdout
    [line] = [line for line in result.stdout.splitlines() if line.startswith("replay it: ")]
    command = shlex.split(line.removeprefix("replay it: "))
    assert command == [
        "trio-durable",
        "simulate",
        f"{spec}:app",
        "--workload",
        spec,
        "--seeds",
        "3",
        "--engines",
        "2",
        "--workers",
        "2",
        "--duration",
        "3600",
        "--faults",
        "everything",
    ]
    again = invoke(command[1:])
    assert again.exit_code == 1, again.output
    assert "1 passed" not in again.stdout
    assert "0 passed, 1 failed" in again.stdout
    assert "violation: run order-1 did not end: suspended" in again.stdout


def test_the_app_and_the_workload_go_together() -> None:
    spec = str(EXAMPLE)
    for args in ([f"{spec}:app"], ["--workload", f"{spec}:workload"]):
        result = invoke(["simulate", *args, "--seeds", "1"])
        assert result.exit_code == 2, result.output
        assert "give both MODULE:APP and --workload MODULE:FUNC, or neither" in result.stderr
    result = invoke(["simulate", f"{spec}:app", "--workload", f"{spec}:sims", "--seeds", "1"])
    assert result.exit_code == 2
    assert f"{spec}:sims is list" in result.stderr
    assert result.stderr.rstrip().endswith("not callable")
