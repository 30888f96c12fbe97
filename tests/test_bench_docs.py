"""docs/performance.md's commands name scripts and options that exist: each
``python bench/SCRIPT.py --option ...`` line of its shell blocks is checked
against the script's ``--help``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_page_has_commands() -> None:
    scripts = {re.search(r"bench/(\w+)\.py", c).group(1) for c in COMMANDS}  # type: ignore[union-attr]
    assert {"all", "compare", "profile_layers", "bench_dbos", "bench_scale"} <= scripts


@pytest.mark.parametrize("command", COMMANDS)
def test_command_names_a_script_and_its_options(command: str) -> None:
    script = re.search(r"bench/\w+\.py", command)
    assert script is not None
    path = ROOT / script.group(0)
    assert path.exists(), command
    # Only the script's own options: after "--", profile_layers passes the rest on.
    own = command[script.end() :].partition(" -- ")[0]
    options = re.findall(r"(?<!\S)(--[a-z][a-z-]*)", own)
    done = subprocess.run(
        [sys.executable, str(path), "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    for option in options:
        assert option in done.stdout, f"{option} is not an option of {script.group(0)}"
