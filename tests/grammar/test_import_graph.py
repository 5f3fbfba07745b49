"""The grammar package's modules import each other without cycles at module level, and the
admission checks (schema_check, satisfiability) and the rewrites without cycles at all,
deferred imports included (a function-level import that closes a cycle hides it from the
interpreter, not from readers).

The tokenizer state (tokenizer_state.py) is a hub on purpose: it builds the closing
vocabulary, the compiler and the token table on first use, with deferred imports of the
modules that in turn ask it for their part; those deferred edges are left out of the
module-level check."""

from __future__ import annotations

import ast
from pathlib import Path

import afm_struct.grammar

PACKAGE = Path(afm_struct.grammar.__file__).parent


def _imports(*, deferred: bool) -> dict[str, set[str]]:
    """Module → the sibling modules it imports at module level (or anywhere, ``deferred``)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        deps: set[str] = set()
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree) if deferred else tree.body:
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
    graph = _imports(deferred=False)
    assert "satisfiability" in graph and "schema_check" in graph
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_admission_and_rewrites_have_no_cycle_even_deferred() -> None:
    full = _imports(deferred=True)
    # Reachable from the admission checks and the rewrites (none of them needs a tokenizer).
    roots = {"schema_check", "satisfiability", "rewrites"}
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(full.get(name, ()))
    assert "tokenizer_state" not in seen, sorted(seen)
    sub = {name: deps & seen for name, deps in full.items() if name in seen}
    assert _cycle(sub) is None, " -> ".join(_cycle(sub) or [])
