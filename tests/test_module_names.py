"""The tree reads as a house: no two rooms hold a module of one name doing different jobs, and no
file outgrows what one reader holds in mind.

The names below once meant different jobs in different packages (``grammar/schema/string_formats.py`` the
JSON Schema ``format`` keyword, ``tools/formats.py`` tool-call formats; two ``reasoning.py``;
``decoding/requests.py`` holding requests; ``server/logprob_routing.py`` beside ``decoding/logprobs.py``):
each is now one module.  Per-protocol folders (``server/chat/``, ``server/ollama/``, …) each
have their own ``adapter``, ``encoder``, ``route`` and ``schemas``: that is one job per
protocol, and not checked.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("afm_struct", "afm_struct_bench", "server")
UNIQUE = ("reasoning", "formats", "closing", "events", "logprobs")
MAX_LINES = 450


def _sources() -> list[Path]:
    return [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))
            if "__pycache__" not in p.parts]


def test_no_two_packages_hold_a_module_of_a_shared_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in _sources():
        if path.stem in UNIQUE:
            where[path.stem].append(str(path.relative_to(ROOT)))
        if path.name == "__init__.py" and path.parent.name in UNIQUE:  # a package of that name
            where[path.parent.name].append(str(path.parent.relative_to(ROOT)))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
    assert where["reasoning"] == ["afm_struct/turn/reasoning.py"]


def test_no_file_over_the_line_limit() -> None:
    long = {str(p.relative_to(ROOT)): n for p in _sources()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}
