"""The table of modules in docs/architecture.md says what the source holds.

Every top-level module of the core has a row (its first column names the
module), every module of ``_stores/`` is named in the section, and each
row's last column names exactly the modules of the core, leaves aside, that
the row's modules import at run time. Imports are read from the source with
`ast` as `tests/test_import_graph.py` reads them: those inside functions
count, those under ``if TYPE_CHECKING:`` do not. A row names the module an
import statement names (``from ._stores._ops import PutValue`` names
``_stores._ops``), not the packages around it whose ``__init__`` runs too.

A first column's ``_cli/`` stands for every module of that subpackage. A
row whose last column ends in "(leaf)" makes its modules leaves: they import
only leaves, and no other row needs to name them.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Final

import attrs

from test_import_graph import MODULES, PACKAGE, ROOT, _run_time_imports

PAGE: Final = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"

LEAF: Final = "(leaf)"

TABLED: Final = ("_base", "_payloads", "_wire", "_kernel", "_features", "_front", "_process")
"""The packages each module of which has a row; the stores, brokers, CLI,
console and testing are described as packages."""


@attrs.define(frozen=True, kw_only=True)
class Row:
    """One row of the table."""

    first: str
    """The first column as written."""
    modules: frozenset[str]
    """The modules the first column names, a subpackage's all of them."""
    last: str
    """The last column as written."""
    named: tuple[str, ...]
    """The modules the last column names."""

    @property
    def is_leaf(self) -> bool:
        return self.last.endswith(LEAF)


def _short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.")


def _shown(modules: Iterable[str]) -> str:
    return ", ".join(f"`{_short(m)}`" for m in sorted(modules))


def _section(page: str) -> str:
    """The section "## Modules" of ``page``, up to the next section."""
    start = page.index("\n## Modules\n")
    end = page.find("\n## ", start + 1)
    return page[start : end if end != -1 else len(page)]


def _cells(line: str) -> list[str]:
    # A pipe inside a cell is written escaped (``\|``), as GitHub reads it.
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def _in_backticks(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def _modules_of(first: str) -> frozenset[str]:
    modules: set[str] = set()
    for name in _in_backticks(first):
        full = f"{PACKAGE}.{name.removesuffix('/')}"
        if name.endswith("/"):
            modules |= {m for m in MODULES if m == full or m.startswith(f"{full}.")}
        else:
            modules.add(full)
    return frozenset(modules)


def rows_of(section: str) -> list[Row]:
    """The rows of the table in ``section`` (each line of it that starts
    with a module in backticks)."""
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        cells = _cells(line)
        # An unescaped pipe inside code would split a cell in two, each with
        # half a code span.
        assert len(cells) == 3, f"a row of {len(cells)} cells: {line}"
        assert all(c.count("`") % 2 == 0 for c in cells), f"a code span cut in two: {line}"
        first, _owns, last = cells
        rows.append(
            Row(
                first=first,
                modules=_modules_of(first),
                last=last,
                named=tuple(f"{PACKAGE}.{name}" for name in _in_backticks(last)),
            )
        )
    return rows


def named_imports(module: str, tree: ast.Module) -> set[str]:
    """The modules of the core that ``module``'s import statements name, at
    run time: ``from . import _records`` names ``_records``, ``from
    ._stores._ops import PutValue`` names ``_stores._ops``, ``from ._stores
    import open_store`` names the package ``_stores``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _run_time_imports(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
            continue
        source = node.module or ""
        if node.level:
            parts = package.split(".")
            base = parts[: len(parts) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            found.add(submodule if submodule in MODULES else source)
    return (found & MODULES.keys()) - {module, PACKAGE}


@functools.cache
def _imports(module: str) -> frozenset[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    return frozenset(named_imports(module, tree))


@functools.cache
def _rows() -> list[Row]:
    return rows_of(_section(PAGE.read_text(encoding="utf-8")))


def _problems(row: Row, leaves: frozenset[str]) -> list[str]:
    """What ``row``'s last column says wrong, each naming the modules."""
    known = row.modules & MODULES.keys()
    imports = {
        target: sorted(m for m in known if target in _imports(m))
        for module in known
        for target in _imports(module) - row.modules
    }
    problems = []
    if row.modules - known:
        problems.append(f"stands for {_shown(row.modules - known)}, no module of the core")
    if unknown := [m for m in row.named if m not in MODULES]:
        problems.append(f"names {_shown(unknown)}, no module of the core")
    if false := [m for m in row.named if m in MODULES and m not in imports]:
        problems.append(f"names {_shown(false)}, which its modules do not import")
    for target in sorted(imports.keys() - leaves - set(row.named)):
        problems.append(f"leaves out `{_short(target)}`, which {_shown(imports[target])} imports")
    if row.is_leaf and (above := imports.keys() - leaves):
        problems.append(f"is a leaf, yet imports what is no leaf: {_shown(above)}")
    if row.last.startswith("nothing") and imports:
        problems.append(f"says nothing, yet imports {_shown(imports)}")
    return problems


def test_every_module_of_the_core_has_a_row() -> None:
    top = {
        module
        for module, path in MODULES.items()
        if path.stem.startswith("_")
        and path.stem not in ("__main__", "__init__")
        and path.relative_to(ROOT).parts[0] in TABLED
    }
    listed = set().union(*(row.modules for row in _rows()))
    assert not top - listed, f"modules without a row in {PAGE.name}: {_shown(top - listed)}"


def test_every_module_of_the_stores_is_named() -> None:
    named = set(_in_backticks(_section(PAGE.read_text(encoding="utf-8"))))
    stores = [path.stem for path in sorted((ROOT / "_stores").glob("_*.py"))]
    unnamed = [s for s in stores if s not in named and f"_stores.{s}" not in named]
    assert stores
    assert not unnamed, f"modules of _stores/ that {PAGE.name} does not name: {unnamed}"


def test_each_row_names_what_its_modules_import() -> None:
    rows = _rows()
    leaves = frozenset().union(*(row.modules for row in rows if row.is_leaf))
    problems = [f"{row.first} {p}" for row in rows for p in _problems(row, leaves)]
    assert not problems, f"the last column of {PAGE.name}'s table:\n" + "\n".join(problems)


def test_the_readers_see_the_table_and_the_imports() -> None:
    # A reader that found no rows or no imports would pass every check above.
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "from .._base import _records\n"
        "from .._payloads import _codec\n"
        "from .._stores._ops import PutValue\n"
        "from .._stores import open_store, _base\n"
        "import trio_durable._wire._messages\n"
        "if TYPE_CHECKING:\n"
        "    from ._runtime import Runtime\n"
        "def later() -> None:\n"
        "    from ._replay import Replay\n"
    )
    assert named_imports("trio_durable._kernel._turn", tree) == {
        f"{PACKAGE}.{m}"
        for m in [
            "_base._records",
            "_payloads._codec",
            "_stores._ops",
            "_stores",
            "_stores._base",
            "_wire._messages",
            "_kernel._replay",
        ]
    }
    assert named_imports(
        "trio_durable._stores._sqlite", ast.parse("from .._base._urls import x\n")
    ) == {f"{PACKAGE}._base._urls"}
    [leaf, row, package] = rows_of(
        "| module | owns | imports |\n"
        "|---|---|---|\n"
        "| `_records` | rows | `_search_values` (leaf) |\n"
        "| `_a`, `_b` | `x\\|y` | `_c`, `_stores._ops` |\n"
        "| `_console/` | the console | `_views` |\n"
    )
    assert leaf.is_leaf
    assert leaf.named == (f"{PACKAGE}._search_values",)
    assert not row.is_leaf
    assert row.modules == {f"{PACKAGE}._a", f"{PACKAGE}._b"}
    assert row.named == (f"{PACKAGE}._c", f"{PACKAGE}._stores._ops")
    assert f"{PACKAGE}._console._app" in package.modules
    assert len(_rows()) > 50
