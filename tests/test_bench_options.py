"""Every name a bench's ``--help`` offers for its list options (``--stores``,
``--brokers``, ``--bridges``, ``--cases``) runs: each bench below is run
once per offered value, at a tiny size, against the real servers the value
names (``real_server``). The figures' values are not checked, only that the
run ends well and reports a figure of each name it was asked for."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_processes import WITHIN

BENCH = Path(__file__).resolve().parents[1] / "bench"

TINY: dict[str, tuple[str, ...]] = {
    "bench_engine.py": (
        "--sequential", "2", "--one-by-one", "2", "--concurrent", "2", "--fan", "2",
        "--input-mb", "0",
    ),
    "bench_dbos.py": ("--sequential", "2", "--one-by-one", "2", "--concurrent", "2", "--fan", "2"),
    "bench_remote_workflows.py": ("--runs", "3", "--nats-runs", "3"),
    "bench_ops.py": ("--repeat", "1", "--concurrent", "3", "--sequential", "2"),
    "bench_signal_latency.py": ("--signals", "2", "--gap", "0.001"),
    "bench_time_skipping.py": ("--days", "0.1", "--limit", "60"),
    "bench_nats.py": ("--raw", "20", "--fan", "5", "--runs", "3"),
    "bench_amqp.py": ("--raw", "20", "--fan", "5", "--runs", "3"),
    "bench_starts.py": ("--repeat", "1", "--sequential", "2", "--one-by-one", "2", "--concurrent", "2"),
}  # fmt: skip
"""The scripts with list options, and the arguments that make them tiny."""

SERVERS = {"postgres": "postgres", "nats": "nats", "amqp": "rabbitmq"}
"""The names of a list option that need a real server, and which."""

NEEDS: dict[str, tuple[str, ...]] = {"bench_nats.py": ("nats",), "bench_amqp.py": ("rabbitmq",)}
"""The servers a script needs whatever its options."""

ENV = {"postgres": "POSTGRES_URL", "nats": "NATS_URL", "rabbitmq": "AMQP_URL"}

_OFFERED = re.compile(
    r"(--[a-z-]+) NAME\[,NAME\.\.\.\]\s+any of (.+?), comma-separated, or (.+?) \(default"
)


def offered(script: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """What ``script``'s ``--help`` offers for its list options: (option,
    value, the names the value runs)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=WITHIN,
    )
    text = " ".join(done.stdout.split())
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for option, names, every in _OFFERED.findall(text):
        known = tuple(n.strip() for n in names.split(","))
        found += [(option, name, (name,)) for name in known]
        found += [(option, word, known) for word in every.split(" or ")]
    return found


def reported(option: str, name: str, cases: set[str]) -> bool:
    """Whether a figure of ``cases`` is one of ``name`` (a part of its case
    name; a bridge other than the default one is ``bridge_<name>``)."""
    parts = [case.split(".") for case in cases]
    if option != "--bridges":
        return any(name in part for part in parts)
    if name == "thread":
        return any(not any(p.startswith("bridge_") for p in part) for part in parts)
    return any(f"bridge_{name.replace('-', '_')}" in part for part in parts)


CASES = [
    pytest.param(script, option, value, names, id=f"{script[:-3]}-{option[2:]}-{value}")
    for script in sorted(TINY)
    for option, value, names in offered(script)
]


def test_every_script_with_a_list_option_offers_it() -> None:
    assert {script for script, *_ in (case.values for case in CASES)} == set(TINY)


@pytest.mark.parametrize(("script", "option", "value", "names"), CASES)
def test_each_offered_value_runs_at_a_tiny_size(
    real_server: Callable[[str], str],
    tmp_path: Path,
    script: str,
    option: str,
    value: str,
    names: tuple[str, ...],
) -> None:
    servers = {SERVERS[name] for name in names if name in SERVERS} | set(NEEDS.get(script, ()))
    env = {**os.environ, "TRIO_DURABLE_BENCH_JSON": str(tmp_path / "figures.jsonl")}
    for server in servers:
        env[ENV[server]] = real_server(server)
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *TINY[script], option, value],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
        timeout=WITHIN,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "Traceback" not in done.stderr
    if script == "bench_dbos.py" and "skipped: DBOS is not installed" in done.stdout:
        return  # DBOS is the peer's, not a test dependency: the options parsed
    figures = tmp_path / "figures.jsonl"
    cases = {json.loads(line)["case"] for line in figures.read_text().splitlines()}
    missing = [name for name in names if not reported(option, name, cases)]
    assert not missing, f"no figure of {missing} among {sorted(cases)}"


@pytest.mark.parametrize("script", ["bench_engine.py", "bench_remote.py"])
def test_the_collector_thresholds_option_is_taken_and_checked(script: str, tmp_path: Path) -> None:
    tiny = {
        "bench_engine.py": TINY["bench_engine.py"],
        "bench_remote.py": ("--fans=", "--runs", "3"),
    }
    args = [sys.executable, str(BENCH / script), *tiny[script]]
    done = subprocess.run(
        [*args, "--gc-threshold", "10000,50,100"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=WITHIN,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    refused = subprocess.run(
        [*args, "--gc-threshold", "many"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=WITHIN,
    )
    assert refused.returncode == 2
    assert "not integers: 'many'" in refused.stderr
