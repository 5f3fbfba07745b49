"""scripts/module_moves.py rewrites code written against the old layout, and leaves the new alone.

The lead reruns it after merging branches written before the layout moved (issue 44): an import
of a moved module, absolute or relative, a string naming one (``monkeypatch.setattr``), a path in
a doc, each comes out pointing at the module's new place, and a second run changes nothing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("module_moves", ROOT / "scripts" / "module_moves.py")
assert _spec is not None and _spec.loader is not None
moves = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(moves)

OLD_DECODING = '''from __future__ import annotations

from ..grammar.engine import Matcher
from ..grammar import closing_vocab, compiler
from ..text.reasoning import THINK
from .events import GenerationRequest


def f(monkeypatch):
    from ..grammar.closing_search import fork_of
    monkeypatch.setattr("afm_struct.grammar.compiler.compile_constraint", None)
    return fork_of, "see grammar/closing_search.py and afm_struct/bench/serve.py"
'''


def _rewrite(text: str, module: str, *, package: bool = False) -> str:
    out = moves._rewrite_imports(text, module, package, moves.existing_modules())
    return moves._rewrite_names(out)


def test_old_imports_strings_and_paths_point_at_the_new_modules() -> None:
    new = _rewrite(OLD_DECODING, "afm_struct.decoding.some_new_file")
    assert "from ..grammar.engines.protocol import Matcher" in new
    assert "from ..grammar.closer import vocab as closing_vocab" in new
    assert "from ..grammar import compiler" in new
    assert "from ..turn.reasoning import THINK" in new
    assert "from .requests import GenerationRequest" in new
    assert "    from ..grammar.closer.search import fork_of" in new
    assert '"afm_struct.grammar.compiler.compile_constraint"' in new  # not moved: unchanged
    assert "grammar/closer/search.py" in new and "afm_struct_bench/serve.py" in new
    assert _rewrite(new, "afm_struct.decoding.some_new_file") == new  # idempotent


def test_a_moved_file_with_imports_relative_to_its_old_place_is_read_from_there() -> None:
    # grammar/closing_search.py as a branch left it, merged to its new place closer/search.py.
    old = "from ..errors import AfmError\nfrom .closing_vocab import ClosingVocab\nfrom .spec import X\n"
    new = _rewrite(old, "afm_struct.grammar.closer.search")
    assert new == "from ...errors import AfmError\nfrom .vocab import ClosingVocab\nfrom ..spec import X\n"
    assert _rewrite(new, "afm_struct.grammar.closer.search") == new


def test_every_move_lands_on_a_module_of_the_tree_and_none_is_left_behind() -> None:
    modules = moves.existing_modules()
    # (a data folder, such as afm_struct_bench.data, is a package without an __init__)
    assert [new for new in moves.MOVES.values() if new not in modules and not moves._is_package(new)] == []
    assert [old for old in moves.MOVES if old in modules] == []
