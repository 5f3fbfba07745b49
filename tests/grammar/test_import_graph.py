"""Inside grammar/: the schema analysis (admission checks and rewrites) needs no tokenizer and no
engine, and each sub-package's ``__init__`` says its job.

The whole tree's circles and layers are checked in tests/test_layers.py; this file checks the
rooms of grammar/: a schema can be checked and rewritten with nothing loaded (the admission
checks run before any model is asked for), so what ``schema/`` reaches stays in ``schema/``,
``patterns/`` and the grammar's base values.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import afm_struct.grammar

from ..import_graph import graph

PACKAGE = Path(afm_struct.grammar.__file__).parent
ROOMS = ("closer", "engines", "patterns", "schema")


def _reachable(edges: dict[str, set[str]], roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(edges.get(name, ()))
    return seen


def test_schema_analysis_reaches_no_tokenizer_and_no_engine() -> None:
    edges = graph()
    roots = {f"afm_struct.grammar.schema.{n}" for n in ("check", "satisfiability", "rewrites")}
    assert roots <= edges.keys()
    seen = _reachable(edges, roots)
    allowed = ("afm_struct.grammar.schema.", "afm_struct.grammar.patterns.")
    base = {"afm_struct.errors", "afm_struct.grammar.spec", "afm_struct.grammar.diagnostics"}
    assert sorted(n for n in seen if not n.startswith(allowed) and n not in base) == []


def test_each_room_says_its_job_and_exports_only_what_it_has() -> None:
    for room in ROOMS:
        init = PACKAGE / room / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc.split("\n\n")[0]) > 40, room
        module = importlib.import_module(f"afm_struct.grammar.{room}")
        assert module.__all__, room
        for name in module.__all__:
            assert hasattr(module, name), (room, name)
    # The ladder and the one compile API sit at the top, where a reader starts.
    assert (PACKAGE / "ladder.py").is_file() and (PACKAGE / "compiler.py").is_file()
    assert afm_struct.grammar.compile_constraint.__module__ == "afm_struct.grammar.compiler"
