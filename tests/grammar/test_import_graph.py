"""The grammar package's modules import each other without cycles, deferred imports included
(a function-level import that closes a cycle hides it from the interpreter, not from readers)."""

from __future__ import annotations

import ast
from pathlib import Path

import afm_struct.grammar

PACKAGE = Path(afm_struct.grammar.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Module → the sibling modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(alias.name for alias in node.names)
        graph[path.stem] = deps & {p.stem for p in PACKAGE.glob("*.py")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph.get(name, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)):
            return found
    return None


def test_grammar_modules_have_no_import_cycle() -> None:
    graph = _imports()
    assert "satisfiability" in graph and "schema_check" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
