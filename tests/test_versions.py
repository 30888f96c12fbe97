"""Each distribution has its version in one place, its package's
``__version__``, which its pyproject.toml reads (``dynamic``) and its
installed metadata reports."""

from __future__ import annotations

import importlib
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DISTRIBUTIONS = [
    (ROOT, "trio-durable", "trio_durable"),
    (ROOT / "brokers" / "rabbitmq", "trio-durable-rabbitmq", "trio_durable_rabbitmq"),
    (ROOT / "brokers" / "nats", "trio-durable-nats", "trio_durable_nats"),
]


@pytest.mark.parametrize(("project", "distribution", "package"), DISTRIBUTIONS)
def test_one_version_per_distribution(project: Path, distribution: str, package: str) -> None:
    config = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["project"]["name"] == distribution
    assert "version" not in config["project"]
    assert config["project"]["dynamic"] == ["version"]
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": f"{package}.__version__"}
    assert version(distribution) == importlib.import_module(package).__version__


def test_the_adapters_require_this_core() -> None:
    import trio_durable

    for project, _, _ in DISTRIBUTIONS[1:]:
        config = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
        [core] = [d for d in config["project"]["dependencies"] if d.startswith("trio-durable")]
        assert core == "trio-durable>=0.1.0,<0.2"
        assert trio_durable.__version__.startswith("0.1.")
