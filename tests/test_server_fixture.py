"""A test that needs a real server's binaries skips when they are missing,
except under ``CI=true``, where that fails it (`servers.fixture.installed`,
which ``real_server`` uses too): a broken CI set-up never passes as skipped
chaos tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_processes import ROOT
from servers import NAMES, module
from servers.fixture import installed


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_server_skips_the_test_or_fails_it_under_ci(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    server = module(name)
    monkeypatch.setattr(server, "available", lambda: False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="is not installed"):
        installed(name)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        installed(name)
    monkeypatch.setattr(server, "available", lambda: True)
    assert installed(name) is server


def test_every_test_asks_for_server_binaries_through_installed() -> None:
    # A test of its own that checks `available()` and skips would skip
    # under CI=true too.
    trees = [ROOT / "tests", *sorted((ROOT / "brokers").glob("*/tests"))]
    asking = [
        str(path.relative_to(ROOT))
        for tree in trees
        for path in sorted(tree.rglob("*.py"))
        if ".available()" in path.read_text()
        and Path(ROOT / "tests" / "servers") not in path.parents
        and path != Path(__file__)
    ]
    assert asking == []
