"""Every call in the tests, benches and examples that waits for another
process to finish on its own has a bound: a hung process fails its test (or
bench) instead of blocking the whole run until CI's own limit.

Read from the source: ``subprocess.run`` (and ``check_output``,
``check_call``, ``call``), ``Popen.communicate`` and ``Popen.wait`` take
``timeout=``; ``trio.run_process`` runs inside ``trio.fail_after`` (or
``move_on_after``). A wait right after the process was killed is bounded
by the kernel and needs none."""

from __future__ import annotations

import ast
from pathlib import Path

from cli_processes import ROOT

_RUNS = {"run", "check_output", "check_call", "call"}


def _trees() -> list[Path]:
    return [ROOT / "tests", ROOT / "bench", ROOT / "examples", *(ROOT / "brokers").glob("*/tests")]


def _bounded_by_scope(node: ast.AST, parents: dict[ast.AST, ast.AST], source: str) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                text = ast.get_source_segment(source, item.context_expr) or ""
                if any(name in text for name in ("fail_after", "fail_at", "move_on_after")):
                    return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return False
    return False


def _after_a_kill(node: ast.AST, parents: dict[ast.AST, ast.AST], source: str) -> bool:
    """Whether a statement before ``node``'s, in its block or an enclosing
    one of its function, kills the process."""
    while node in parents and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        block = parents[node]
        for field in ("body", "orelse", "finalbody", "handlers"):
            body = getattr(block, field, None)
            if isinstance(body, list) and node in body:
                before = body[: body.index(node)]
                if any(_kills(statement) for statement in before):
                    return True
        node = block
    return False


def _kills(statement: ast.AST) -> bool:
    for node in ast.walk(statement):
        if isinstance(node, ast.Attribute) and node.attr in ("kill", "SIGKILL"):
            return True
    return False


def unbounded_calls(path: Path) -> list[str]:
    source = path.read_text()
    tree = ast.parse(source)
    lines = source.splitlines()
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name not in (*_RUNS, "run_process", "wait", "communicate"):
            continue
        owner = ast.unparse(node.func.value)
        timeout = any(keyword.arg == "timeout" for keyword in node.keywords)
        if owner == "subprocess" and name in _RUNS:
            bounded = timeout
        elif owner == "trio" and name == "run_process":
            bounded = _bounded_by_scope(node, parents, source)
        elif name in ("wait", "communicate") and "process" in owner.lower() and not node.args:
            # A trio process's wait: bounded by a scope; a Popen's: by
            # timeout=; one that runs until its task is cancelled says so.
            bounded = (
                timeout
                or _bounded_by_scope(node, parents, source)
                or _after_a_kill(node, parents, source)
                or "until cancelled" in lines[node.lineno - 1]
            )
        else:
            continue
        if not bounded:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {owner}.{name}")
    return found


def test_every_wait_for_another_process_is_bounded() -> None:
    found = [
        call
        for tree in _trees()
        for path in sorted(tree.rglob("*.py"))
        for call in unbounded_calls(path)
    ]
    assert found == []
