"""The broker adapters in ``brokers/`` are written against the public API
alone: no module under ``brokers/`` (adapter code and its tests) imports a
private module of trio-durable (``trio_durable._...``, or a ``_``-name out of
a public one). What an adapter needs is in `trio_durable.brokers`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BROKERS = Path(__file__).resolve().parent.parent / "brokers"


def _is_private(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "trio_durable" and any(part.startswith("_") for part in parts[1:])


def private_imports(source: str) -> list[str]:
    """The private trio-durable modules and names ``source`` imports, as
    ``module`` or ``module.name``, including imports inside functions."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names if _is_private(alias.name))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_private(node.module):
                found.append(node.module)
            elif node.module.split(".")[0] == "trio_durable":
                found.extend(
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_")
                )
    return found


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import trio_durable._base._serde", ["trio_durable._base._serde"]),
        ("from trio_durable._brokers._base import RESULTS", ["trio_durable._brokers._base"]),
        ("from trio_durable import _serde", ["trio_durable._serde"]),
        ("from trio_durable.brokers import _bridge", ["trio_durable.brokers._bridge"]),
        (
            "def f():\n    from trio_durable._wire._messages import Task",
            ["trio_durable._wire._messages"],
        ),
        ("import trio_durable.testing._harness as h", ["trio_durable.testing._harness"]),
        ("import trio_durable, trio_durable.brokers", []),
        ("from trio_durable.brokers import Bridge, open_bridge", []),
        ("from trio_durable.testing.conformance import BROKER_CHECKS", []),
        ("from trio_durable_rabbitmq._amqp import AmqpBroker", []),
        ("from ._nats_url import token", []),
        ("import trio._core", []),
    ],
)
def test_the_scan_finds_private_imports(source: str, expected: list[str]) -> None:
    assert private_imports(source) == expected


def test_adapters_import_only_public_names() -> None:
    modules = sorted(BROKERS.rglob("*.py"))
    # The adapters, their tests, and the conformance runs are all scanned.
    assert {p.relative_to(BROKERS).parts[0] for p in modules} == {"nats", "rabbitmq"}
    assert any(p.name == "_amqp.py" for p in modules)
    assert any(p.name == "_nats.py" for p in modules)
    offenders = {
        str(path.relative_to(BROKERS)): found
        for path in modules
        if (found := private_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}
