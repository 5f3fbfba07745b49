"""Every module move of the layout redesign (issue 44), and the rewrite of what names them.

:data:`MOVES` maps each old dotted module path to its new one.  ``main()`` rewrites, across
afm_struct/, afm_struct_bench/, server/, tests/, benchmarks/, scripts/, docs/ and the top-level
README and Makefile:

* ``from X import …`` statements, relative ones included: a relative import is resolved against
  the file's place (or, when that names no module, against the place the file moved from, so a
  file merged from a branch that still had it at its old path is read as written there), and
  is written back relative, from where the file is now;
* ``from pkg import module`` where ``pkg.module`` moved (split per new parent);
* every other dotted mention of an old path (``import X``, ``X.attr`` in code and strings, such
  as ``monkeypatch.setattr("X.attr", …)`` and ``mock.patch("X.…")``, docs) and file paths
  (``afm_struct/grammar/closing_search.py``, ``grammar/closing_search.py``).

It is idempotent: a name that already starts with a new path is left alone, so the lead can run
it again after merging branches written against the old layout::

    .venv/bin/python scripts/module_moves.py           # rewrite references
    .venv/bin/python scripts/module_moves.py --move    # also ``git mv`` files not yet moved
    .venv/bin/python scripts/module_moves.py --check   # list what would change; exit 1 if any
    .venv/bin/ruff check --fix .                       # then: import order, line lengths to review

tests/test_module_moves.py checks the rewrite on code written against the old layout.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("afm_struct", "afm_struct_bench", "server", "tests", "benchmarks", "scripts", "docs")
TOP_FILES = ("README.md", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".md", ".sh", ".toml", ".txt", ".cfg"}
# Top-level packages a module path may start with, and where each one's files live.
PACKAGE_DIRS = {"afm_struct": "afm_struct", "afm_struct_bench": "afm_struct_bench", "server": "server"}

G = "afm_struct.grammar"
MOVES: dict[str, str] = {
    # 1. The tokenizer facade keeps a generic store of derived parts; each layer builds its own.
    f"{G}.tokenizer_state": "afm_struct.models.derived",
    # 2. One reasoning module (syntaxes and the turn's state); the gate named for its job;
    #    text/ dissolved into the turn package (what the model writes, read as it streams).
    "afm_struct.text.reasoning": "afm_struct.turn.reasoning",
    "afm_struct.text.markers": "afm_struct.turn.markers",
    "afm_struct.text.values": "afm_struct.serving.value_checks",
    "afm_struct.decoding.reasoning": "afm_struct.decoding.reasoning_gate",
    "afm_struct.serving.turn": "afm_struct.turn.turn",
    "afm_struct.serving.events": "afm_struct.turn.events",
    "afm_struct.decoding.outputs": "afm_struct.turn.outputs",
    "afm_struct.decoding.events": "afm_struct.decoding.requests",
    "afm_struct.decoding.closing": "afm_struct.decoding.length_close",
    "afm_struct.tools.stream": "afm_struct.tools.call_stream",
    "server.logprobs": "server.logprob_routing",
    # 3. grammar/ in rooms: engines/, schema/, closer/, patterns/; the ladder and
    #    compile_constraint stay at the top.
    f"{G}.engine": f"{G}.engines.protocol",
    f"{G}.llguidance_backend": f"{G}.engines.llguidance_engine",
    f"{G}.outlines_backend": f"{G}.engines.outlines_engine",
    f"{G}.engine_numbers": f"{G}.engines.llguidance_numbers",
    f"{G}.engine_options": f"{G}.engines.options",
    f"{G}.special_text": f"{G}.engines.special_text",
    f"{G}.key_presence": f"{G}.engines.key_presence",
    f"{G}.any_order": f"{G}.engines.any_order",
    f"{G}.closing": f"{G}.closer.completion",
    f"{G}.closing_hints": f"{G}.closer.hints",
    f"{G}.closing_search": f"{G}.closer.search",
    f"{G}.closing_vocab": f"{G}.closer.vocab",
    f"{G}.literal_budget": f"{G}.closer.literal_budget",
    f"{G}.lark_budget": f"{G}.closer.lark_budget",
    f"{G}.pattern_lang": f"{G}.patterns.pattern_lang",
    f"{G}.regex_classify": f"{G}.patterns.classify",
    f"{G}.regex_writer": f"{G}.patterns.writer",
    f"{G}.regular": f"{G}.patterns.regular",
    f"{G}.automata": f"{G}.patterns.automata",
    f"{G}.charsets": f"{G}.patterns.charsets",
    f"{G}.json_escapes": f"{G}.patterns.json_escapes",
    f"{G}.closed_objects": f"{G}.schema.closed_objects",
    f"{G}.disjoint": f"{G}.schema.disjoint",
    f"{G}.drafts": f"{G}.schema.drafts",
    f"{G}.formats": f"{G}.schema.string_formats",
    f"{G}.keywords": f"{G}.schema.keywords",
    f"{G}.meta_schema": f"{G}.schema.meta_schema",
    f"{G}.min_length": f"{G}.schema.min_length",
    f"{G}.negation": f"{G}.schema.negation",
    f"{G}.negation_kinds": f"{G}.schema.negation_kinds",
    f"{G}.rewrite_finite": f"{G}.schema.rewrite_finite",
    f"{G}.rewrite_logic": f"{G}.schema.rewrite_logic",
    f"{G}.rewrite_objects": f"{G}.schema.rewrite_objects",
    f"{G}.rewrite_values": f"{G}.schema.rewrite_values",
    f"{G}.rewrites": f"{G}.schema.rewrites",
    f"{G}.satisfiability": f"{G}.schema.satisfiability",
    f"{G}.schema_check": f"{G}.schema.check",
    f"{G}.schema_merge": f"{G}.schema.merge",
    f"{G}.schema_paths": f"{G}.schema.paths",
    f"{G}.value_kinds": f"{G}.schema.value_kinds",
    # 4. Loose top-level modules into their packages; the bench harness out of the engine.
    "afm_struct.downgrade": f"{G}.downgrade",
    "afm_struct.thread_stack": "afm_struct.models.thread_stack",
    "afm_struct.heap": "afm_struct.decoding.heap",
    "afm_struct.tool_calls": "afm_struct.tools.call_deltas",
    "afm_struct.extraction": "afm_struct.library.extraction",
    "afm_struct.confidence": "afm_struct.library.confidence",
    "afm_struct.bench": "afm_struct_bench",
    **{f"afm_struct.bench.{name}": f"afm_struct_bench.{name}" for name in (
        "completions", "decode", "environment", "extract", "gguf_vocab", "hostile", "hostile_client",
        "masks", "report", "scoring", "serve", "soak", "soak_summary", "step", "tokenizer_corpus",
        "tokenizer_parity", "vocabularies")},
    "afm_struct.bench.data": "afm_struct_bench.data",
}


_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_PATH = re.compile(r"(?<![\w/.])(?:[A-Za-z_]\w*/)+[A-Za-z_]\w*\.py\b")


def _is_package(module: str) -> bool:
    top, _, rest = module.partition(".")
    if top not in PACKAGE_DIRS:
        return False
    return (ROOT / PACKAGE_DIRS[top]).joinpath(*(rest.split(".") if rest else [])).is_dir()


def _defines(package: str, name: str) -> bool:
    """True when the ``__init__`` of ``package`` mentions ``name`` (defines or imports it)."""
    top, _, rest = package.partition(".")
    init = (ROOT / PACKAGE_DIRS[top]).joinpath(*(rest.split(".") if rest else []), "__init__.py")
    return init.is_file() and re.search(rf"\b{re.escape(name)}\b", init.read_text()) is not None


def _path_key(module: str, *, full: bool = False) -> str | None:
    """``grammar/closing_search.py`` for ``afm_struct.grammar.closing_search`` (the path docs
    write, from the engine package's folder), or from the checkout's root (``full``)."""
    top, _, rest = module.partition(".")
    if not rest:
        return None
    if top == "afm_struct" and not full:
        return rest.replace(".", "/") + ".py"
    return f"{PACKAGE_DIRS[top]}/{rest.replace('.', '/')}.py"


def existing_modules() -> set[str]:
    """Every module of the checked packages, as the tree holds them now."""
    found: set[str] = set()
    for top, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.add(".".join([top, *parts]))
    return found


def _module_name(path: Path) -> str | None:
    rel = path.relative_to(ROOT)
    for top, folder in PACKAGE_DIRS.items():
        if rel.parts[0] == folder:
            parts = [top, *rel.with_suffix("").parts[1:]]
            if parts[-1] == "__init__":
                parts.pop()
            return ".".join(parts)
    if rel.parts[0] in ("tests", "benchmarks", "scripts"):
        parts = list(rel.with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return None


def _old_name(module: str) -> str:
    back = {new: old for old, new in MOVES.items()}
    return back.get(module, module)


def _map(name: str) -> str:
    """``name`` with its longest moved prefix rewritten (unchanged if it starts with a new path)."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in _NEW:
            return name
        if head in MOVES:
            return ".".join([MOVES[head], *parts[n:]])
    return name


def _resolve_relative(module: str, is_package: bool, level: int, target: str | None) -> str:
    base = module.split(".")
    drop = level - 1 if is_package else level
    if drop:
        base = base[: len(base) - drop]
    return ".".join(base + ([target] if target else []))


def _relative(module: str, is_package: bool, target: str) -> str | None:
    """``target`` as a relative import from ``module`` (None when they share no top package)."""
    here = module.split(".") if is_package else module.split(".")[:-1]
    there = target.split(".")
    common = 0
    while common < min(len(here), len(there)) and here[common] == there[common]:
        common += 1
    if common == 0:
        return None
    return "." * (len(here) - common + 1) + ".".join(there[common:])


def _render(indent: str, base: str, names: list[str], width: int = 110) -> str:
    one = f"{indent}from {base} import {', '.join(names)}"
    if len(one) <= width:
        return one
    body = "".join(f"{indent}    {n},\n" for n in names)
    return f"{indent}from {base} import (\n{body}{indent})"


def _rewrite_imports(text: str, module: str, is_package: bool, modules: set[str]) -> str:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module == "__future__":
            continue
        if node.level:
            base = _resolve_relative(module, is_package, node.level, node.module)
            known = base in modules and (not _is_package(base) or all(
                f"{base}.{a.name}" in modules or _defines(base, a.name) for a in node.names))
            if not known:  # written where the file used to be
                old = _old_name(module)
                base = _resolve_relative(old, is_package, node.level, node.module)
        else:
            base = node.module or ""
        groups: dict[str, list[str]] = {}
        for alias in node.names:
            full = f"{base}.{alias.name}"
            moved = _map(full)
            if full in MOVES and moved != full:
                parent, _, last = moved.rpartition(".")
                bound = alias.asname or alias.name
                name = last if last == bound else f"{last} as {bound}"
                groups.setdefault(parent, []).append(name)
            else:
                name = alias.name if alias.asname is None else f"{alias.name} as {alias.asname}"
                groups.setdefault(_map(base), []).append(name)
        rendered = []
        for new_base, names in groups.items():
            if node.level:
                spelled = _relative(module, is_package, new_base) or new_base
            else:
                spelled = new_base
            rendered.append((spelled, names))
        original_base = "." * node.level + (node.module or "")
        if len(rendered) == 1 and rendered[0][0] == original_base and all(
                n == (a.name if a.asname is None else f"{a.name} as {a.asname}")
                for n, a in zip(rendered[0][1], node.names, strict=True)):
            continue
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        if first.lstrip()[: 4] != "from" or node.col_offset != len(indent):
            continue  # shares its line with other code: left to the dotted-name pass
        new = "\n".join(_render(indent, b, n) for b, n in rendered) + "\n"
        edits.append((node.lineno - 1, node.end_lineno or node.lineno, new))
    for start, end, new in sorted(edits, reverse=True):
        lines[start:end] = [new]
    return "".join(lines)


def _rewrite_names(text: str) -> str:
    def dotted(match: re.Match[str]) -> str:
        name = match.group(0)
        if name.startswith("afm_struct.server."):
            return "afm_struct." + _map(name.removeprefix("afm_struct."))
        return _map(name)

    def path(match: re.Match[str]) -> str:
        name = match.group(0)
        if name.startswith("afm_struct/"):
            return _FULL_PATHS.get(name, name)
        return _PATHS.get(name, name)

    return _PATH.sub(path, _DOTTED.sub(dotted, text))


def rewrite_file(path: Path, modules: set[str]) -> bool:
    """Rewrite ``path`` in place; True when it changed."""
    text = path.read_text()
    new = text
    if path.suffix == ".py" and (module := _module_name(path)) is not None:
        new = _rewrite_imports(new, module, path.name == "__init__.py", modules)
    new = _rewrite_names(new)
    if new != text:
        path.write_text(new)
        return True
    return False


# The script and its test hold old paths on purpose (the table; code written against the old layout).
SELF = {Path(__file__).resolve(), (ROOT / "tests" / "test_module_moves.py").resolve()}


def files() -> list[Path]:
    """Every file the rewrite reads."""
    out = [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]
    for root in ROOTS:
        base = ROOT / root
        if base.is_dir():
            out += [p for p in sorted(base.rglob("*")) if p.is_file() and p.suffix in SUFFIXES
                    and "__pycache__" not in p.parts and p.resolve() not in SELF]
    return out


def move_files() -> None:
    """``git mv`` every move whose old file is still there (packages get an ``__init__``)."""
    for old, new in MOVES.items():
        top = old.partition(".")[0]
        rest = old.partition(".")[2]
        old_dir = (ROOT / PACKAGE_DIRS[top]).joinpath(*rest.split("."))
        ntop, _, nrest = new.partition(".")
        new_base = ROOT / PACKAGE_DIRS.get(ntop, ntop)
        new_dir = new_base.joinpath(*nrest.split(".")) if nrest else new_base
        if old_dir.is_dir():  # a whole package (its modules are listed too, for the rewrite)
            if not new_dir.exists():
                subprocess.run(["git", "mv", str(old_dir), str(new_dir)], cwd=ROOT, check=True)
            continue
        src = old_dir.with_suffix(".py")
        if not src.is_file():
            continue
        dst = new_dir.with_suffix(".py")
        dst.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "mv", str(src), str(dst)], cwd=ROOT, check=True)


_NEW = set(MOVES.values())
_PATHS = {k: v for k, v in ((_path_key(o), _path_key(n)) for o, n in MOVES.items()) if k and v}
_FULL_PATHS = {k: v for k, v in ((_path_key(o, full=True), _path_key(n, full=True))
                                 for o, n in MOVES.items()) if k and v}


def main(argv: list[str] | None = None) -> int:
    """Rewrite every reference to a moved module; ``--move`` first moves files not yet moved,
    ``--check`` only lists the files that would change."""
    argv = sys.argv[1:] if argv is None else argv
    if "--move" in argv:
        move_files()
    modules = existing_modules()
    changed = []
    for path in files():
        if "--check" in argv:
            text = path.read_text()
            try:
                if rewrite_file(path, modules):
                    changed.append(path)
            finally:
                path.write_text(text)
        elif rewrite_file(path, modules):
            changed.append(path)
    for path in changed:
        print(path.relative_to(ROOT))
    return 1 if "--check" in argv and changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
