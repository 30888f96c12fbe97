"""The core's modules import each other without cycles at run time.

Read from the source with `ast`: every import counts, those inside
functions too (a lazy import that hides a cycle is still a cycle), except
imports under ``if TYPE_CHECKING:``, which never run. Importing a module of
a subpackage runs the subpackage's ``__init__`` too, so that counts as an
import of the subpackage, except from inside it; the top package
``trio_durable`` does not count (every module is imported through it).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trio_durable

PACKAGE = "trio_durable"
ROOT = Path(trio_durable.__file__).parent


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _run_time_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of ``tree`` outside ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for branch in node.orelse:
                visit(branch)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _with_packages(module: str) -> set[str]:
    """``module`` and the subpackages whose ``__init__`` importing it runs."""
    parts = module.split(".")
    return {".".join(parts[:n]) for n in range(2, len(parts) + 1)} & MODULES.keys()


def imports_of(module: str) -> set[str]:
    """The core modules ``module`` imports at run time."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in _run_time_imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets |= _with_packages(alias.name)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        targets |= _with_packages(source)
        for alias in node.names:
            targets |= _with_packages(f"{source}.{alias.name}")
    # A module's own packages are being imported already when it runs.
    return targets - _with_packages(module)


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (its modules in import order), or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph.get(module, ())):
            cycle = visit(target)
            if cycle is not None:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        if cycle is not None:
            return cycle
    return None


def test_the_core_imports_without_cycles_at_run_time() -> None:
    graph = {module: imports_of(module) for module in MODULES if module != PACKAGE}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or ())


def test_the_graph_sees_the_imports_that_run() -> None:
    # The engine's façade imports its parts at the top; the app imports the
    # Context it makes bodies run with; the Context's type-only import of
    # the runtime is left out.
    assert {"trio_durable._kernel._runtime", "trio_durable._kernel._scheduler"} <= imports_of(
        "trio_durable._front._engine"
    )
    assert "trio_durable._front._context" in imports_of("trio_durable._front._app")
    assert "trio_durable._kernel._runtime" not in imports_of(
        "trio_durable._features.children._fans"
    )
    # A store module pulls in its subpackage (`_control` imports only
    # `._stores._base` and `._stores._ops`).
    assert "trio_durable._stores" in imports_of("trio_durable._front._control")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n    from ._b import x\n", ["trio_durable._b"]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ._b import x\n", []),
        (
            "import typing\nif typing.TYPE_CHECKING:\n    pass\nelse:\n    from ._b import x\n",
            ["trio_durable._b"],
        ),
        ("from . import _b\n", ["trio_durable._b"]),
    ],
)
def test_imports_inside_functions_count_and_type_only_ones_do_not(
    source: str, expected: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "_a.py").write_text(source, encoding="utf-8")
    (tmp_path / "_b.py").write_text("x = 1\n", encoding="utf-8")
    monkeypatch.setattr(
        f"{__name__}.MODULES",
        {"trio_durable._a": tmp_path / "_a.py", "trio_durable._b": tmp_path / "_b.py"},
    )
    assert sorted(imports_of("trio_durable._a")) == expected


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# "About 600 lines": a module past this has usually become two things.
MODULE_LINE_LIMIT = 650


def test_no_core_module_is_much_over_600_lines() -> None:
    too_long = {
        name: lines
        for name, path in MODULES.items()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MODULE_LINE_LIMIT
    }
    assert too_long == {}
