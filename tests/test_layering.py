"""The engine's layering: two rules, two numbers that may only fall, and
one that stays at zero.

- The kernel (``_kernel/``) imports no feature (``_features/``) and nothing
  of the front (``_front/``), counting the imports under ``if
  TYPE_CHECKING:``: features reach the kernel through `Feature`'s hooks,
  and the kernel reads an app through `Registry`.
- No import cycle between the core's packages, counting those imports
  too: each package imports only the packages below it (see
  docs/architecture.md, "Packages").

- The modules in the largest import cycle, counting the imports under
  ``if TYPE_CHECKING:`` (which `tests/test_import_graph.py` leaves out,
  since they never run): within a package, the typing of its central
  objects (the kernel's `Turn`, `Replay` and `Runtime`) ties modules into
  one strongly connected component.
- The reserved seqs written as literals (``999_999_xxx``): state kept in
  checkpoint rows at magic seqs rather than in records of its own. The
  store migration modules, which must name the seqs of rows written
  before to move them, and `_wire_records`, which carries records at the
  seqs the releases before read them at, do not count.

- The casts to the runtime type (``cast("Runtime", ...)``): none. A body
  replays on a `ReplayHost` (an engine's `Runtime`, or a worker's or a
  reader's stand-in, checked against it), and engine-only code takes the
  `Runtime` from `Replay.engine`, so nothing needs to switch the type
  checker off.

Each number is pinned at its measured value. A change that raises one
fails here; a change that lowers one fails too, with a message saying to
lower the pin, so that the next change cannot raise it back unnoticed.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import trio_durable

PACKAGE: Final = "trio_durable"
ROOT: Final = Path(trio_durable.__file__).parent

LARGEST_CYCLE_PIN: Final = 16
"""Modules in the largest import cycle counting ``TYPE_CHECKING`` imports."""

RESERVED_SEQ_LITERALS_PIN: Final = 0
"""Integer literals from 999,999,000 to 999,999,999 outside migrations."""

RESERVED_SEQS: Final = range(999_999_000, 1_000_000_000)

MIGRATION_MODULES: Final = ("_stores/_migrations_*.py", "_stores/*_schema.py")
"""Where a store's schema migrations live (the schema modules hold today's);
the seqs the releases before used are named there alone."""


def _module_name(path: Path) -> str:
    parts = [PACKAGE, *path.relative_to(ROOT).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Final = {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _with_packages(module: str) -> set[str]:
    """``module`` and the subpackages whose ``__init__`` importing it runs
    (as `tests/test_import_graph.py` reads them)."""
    parts = module.split(".")
    return {".".join(parts[:n]) for n in range(2, len(parts) + 1)} & MODULES.keys()


def _imports(module: str, tree: ast.Module) -> set[str]:
    """Every core module ``module`` imports, at run time or for typing."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                targets |= _with_packages(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            targets |= _with_packages(source)
            for alias in node.names:
                targets |= _with_packages(f"{source}.{alias.name}")
    return targets - _with_packages(module)


def _components(graph: dict[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected components of ``graph`` (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(module: str) -> Iterator[list[str]]:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                yield from visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            yield sorted(component)

    for module in sorted(graph):
        if module not in index:
            yield from visit(module)


def _runtime_casts(tree: ast.Module) -> int:
    """The calls ``cast("Runtime", ...)`` (or ``cast(Runtime, ...)``)."""
    return sum(
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "cast")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "cast")
        )
        and bool(node.args)
        and (
            (isinstance(node.args[0], ast.Constant) and node.args[0].value == "Runtime")
            or (isinstance(node.args[0], ast.Name) and node.args[0].id == "Runtime")
        )
        for node in ast.walk(tree)
    )


def _is_migration(path: Path) -> bool:
    relative = path.relative_to(ROOT)
    return any(relative.match(pattern) for pattern in MIGRATION_MODULES)


def _reserved_seq_literals(tree: ast.Module) -> int:
    return sum(
        isinstance(node, ast.Constant) and type(node.value) is int and node.value in RESERVED_SEQS
        for node in ast.walk(tree)
    )


@functools.cache
def _trees() -> dict[str, ast.Module]:
    """Every core module's syntax tree, read once, when a test first asks."""
    return {module: ast.parse(path.read_text(encoding="utf-8")) for module, path in MODULES.items()}


def _ratchet(what: str, measured: int, pin: int, name: str) -> None:
    assert measured <= pin, (
        f"{what} rose from {pin} to {measured}: a change made it worse (see this module's docstring)"
    )
    assert measured >= pin, (
        f"{what} fell from {pin} to {measured}: good; lower {name} in {Path(__file__).name}"
        f" to {measured}"
    )


def test_the_largest_import_cycle_counting_type_checking_does_not_grow() -> None:
    largest = max((len(c) for c in _components(_graph())), default=0)
    _ratchet(
        "the largest import cycle counting TYPE_CHECKING imports",
        largest,
        LARGEST_CYCLE_PIN,
        "LARGEST_CYCLE_PIN",
    )


def package_of(module: str) -> str:
    """The package of the core ``module`` belongs to: ``_kernel``,
    ``_front``, one feature's ``_features.<feature>``, ...; a module of the
    package's top level (the public modules) stands for itself."""
    parts = module.removeprefix(f"{PACKAGE}.").split(".")
    if len(parts) == 1:
        return parts[0]
    return ".".join(parts[:2]) if parts[0] == "_features" else parts[0]


def _graph() -> dict[str, set[str]]:
    return {m: _imports(m, tree) for m, tree in _trees().items() if m != PACKAGE}


def kernel_reaches_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports from a kernel module into a feature or the front."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        if package_of(module) == "_kernel"
        for target in targets
        if package_of(target).startswith(("_features.", "_front"))
        and MODULES[target].name != "__init__.py"
    )


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which package imports which, from the imports of their modules (the
    ``_features`` package's own ``__init__``, which every feature's import
    runs, is left out: it imports nothing)."""
    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        edges = packages.setdefault(package_of(module), set())
        for target in targets:
            if package_of(target) not in (package_of(module), "_features"):
                edges.add(package_of(target))
    for targets in list(packages.values()):
        for target in targets:
            packages.setdefault(target, set())
    return packages


def test_the_kernel_imports_no_feature_nor_the_front() -> None:
    reaching = kernel_reaches_up(_graph())
    assert not reaching, "the kernel imports features or the front: " + "; ".join(
        f"{_short(m)} -> {_short(t)}" for m, t in reaching
    )


def test_no_import_cycle_between_packages() -> None:
    cycles = [c for c in _components(package_graph(_graph())) if len(c) > 1]
    assert not cycles, f"packages that import each other: {cycles}"


def _short(module: str) -> str:
    return module.removeprefix(f"{PACKAGE}.")


def test_reserved_seq_literals_outside_store_migrations_do_not_grow() -> None:
    counts = {
        module: _reserved_seq_literals(tree)
        for module, tree in _trees().items()
        if not _is_migration(MODULES[module])
    }
    where = ", ".join(f"{m} {n}" for m, n in sorted(counts.items()) if n)
    _ratchet(
        f"the reserved seq literals ({where})",
        sum(counts.values()),
        RESERVED_SEQ_LITERALS_PIN,
        "RESERVED_SEQ_LITERALS_PIN",
    )


def test_nothing_is_cast_to_the_runtime_type() -> None:
    casts = {module: _runtime_casts(tree) for module, tree in _trees().items()}
    assert not {m: n for m, n in casts.items() if n}


def test_the_readers_see_what_they_count() -> None:
    # A reader that missed type-only imports or literals would keep both
    # ratchets green while counting nothing.
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from ._runtime import Runtime\n"
        "from .._base import _records\n"
        "SEQ = 999_999_990\n"
        "NOT = (999_998_999, 1_000_000_000, True, '999999999')\n"
        "rt = cast('Runtime', host)\n"
        "other = typing.cast(Runtime, host), cast('Run', host)\n"
    )
    assert _imports("trio_durable._kernel._turn", tree) == {
        "trio_durable._kernel._runtime",
        "trio_durable._base",
        "trio_durable._base._records",
    }
    assert _reserved_seq_literals(tree) == 1
    assert _runtime_casts(tree) == 2
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(map(len, _components(graph))) == [1, 3]
    assert _is_migration(ROOT / "_stores" / "_sqlite_schema.py")
    assert not _is_migration(ROOT / "_base" / "_records.py")
    # A kernel module that imports a feature, which imports it back.
    turn, children = "trio_durable._kernel._turn", "trio_durable._features.children._children"
    made_up = {turn: {children, "trio_durable._base._records"}, children: {turn}}
    assert kernel_reaches_up(made_up) == [(turn, children)]
    assert package_of(children) == "_features.children"
    assert package_of(turn) == "_kernel"
    assert package_of("trio_durable.stores") == "stores"
    assert [len(c) for c in _components(package_graph(made_up)) if len(c) > 1] == [2]
