"""docs/performance.md's commands name scripts and options that exist: each
``python bench/SCRIPT.py --option ...`` line of its shell blocks is checked
against the script's ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cli_processes import WITHIN

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "performance.md"
BLOCKS = re.findall(r"```sh\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
COMMANDS = sorted(
    {
        line.strip()
        for block in BLOCKS
        for line in block.splitlines()
        if line.strip().startswith(("python bench/", "flock /tmp/td-servers.lock python bench/"))
    }
)


def _options_by_script() -> dict[str, set[str]]:
    """Each script the page runs, and the options the page gives it (after
    ``--``, profile_layers passes the rest to the bench it runs)."""
    found: dict[str, set[str]] = {}
    for command in COMMANDS:
        script = re.search(r"bench/\w+\.py", command)
        assert script is not None
        own = command[script.end() :].partition(" -- ")[0]
        found.setdefault(script.group(0), set()).update(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", own))
    return found


SCRIPTS = _options_by_script()


def test_the_page_has_commands() -> None:
    assert {
        "bench/all.py",
        "bench/compare.py",
        "bench/profile_layers.py",
        "bench/bench_dbos.py",
        "bench/bench_scale.py",
    } <= SCRIPTS.keys()


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_scripts_and_options_exist(script: str) -> None:
    path = ROOT / script
    assert path.exists(), script
    done = subprocess.run(
        [sys.executable, str(path), "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=WITHIN,
    )
    assert done.returncode == 0, done.stderr
    for option in sorted(SCRIPTS[script]):
        assert option in done.stdout, f"{option} is not an option of {script}"
