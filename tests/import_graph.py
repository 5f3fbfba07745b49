"""The file-level import graph of the engine (``afm_struct/``) and the HTTP face (``server/``).

Every ``import`` and ``from … import`` anywhere in a file counts: inside functions (a deferred
import that closes a circle hides it from the interpreter, not from a reader) and under ``if
TYPE_CHECKING:`` (a type named in a signature is knowledge of the module that defines it).
``from pkg import name`` is an arrow to ``pkg.name`` when that is a module, else to ``pkg``.

``python -m tests.import_graph`` prints the graph in Graphviz dot form, one node per file;
``--folders`` draws one node per package instead.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Top-level packages of the checkout and the names they import each other by.  The HTTP package
# is ``server`` in a checkout and ``afm_struct.server`` in a wheel; both spellings mean one file.
PACKAGES = ("afm_struct", "afm_struct_bench", "server")


def module_files() -> dict[str, Path]:
    """Dotted module name → file, for every module of the checked packages."""
    files: dict[str, Path] = {}
    for package in PACKAGES:
        base = ROOT / package
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join(parts)] = path
    return files


def _normalize(name: str) -> str:
    return name.removeprefix("afm_struct.") if name.startswith("afm_struct.server") else name


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    """The checked module ``target`` names (itself, or the nearest package above it)."""
    target = _normalize(target)
    while target:
        if target in modules:
            return target
        target = target.rpartition(".")[0]
    return None


def imports(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The checked modules ``module`` (at ``path``) imports."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    deps: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (found := _resolve(alias.name, modules)) is not None:
                    deps.add(found)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                # A submodule when ``name`` is one, else the module (or package) ``prefix``.
                if (found := _resolve(f"{prefix}.{alias.name}", modules)) is not None:
                    deps.add(found)
    deps.discard(module)
    return deps


def graph() -> dict[str, set[str]]:
    """Module → the checked modules it imports."""
    modules = module_files()
    return {name: imports(name, path, modules) for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> list[str] | None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(edges.get(name, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep, stack)):
                return found
        stack.pop()
        state[name] = 2
        return None

    # Deep import chains need more than the default recursion limit; restored after, because
    # the rest of the worker's tests share it (a server's JSON depth refusal rides on it).
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for name in sorted(edges):
            if name not in state and (found := visit(name, [])):
                return found
        return None
    finally:
        sys.setrecursionlimit(limit)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (each one circle or more)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    counter = [0]

    def strongconnect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for dep in edges.get(node, ()):
            if dep not in index:
                strongconnect(dep)
                low[node] = min(low[node], low[dep])
            elif dep in on_stack:
                low[node] = min(low[node], index[dep])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            strongconnect(node)
    return groups


def _folder(module: str) -> str:
    path = module_files()[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def main(argv: list[str] | None = None) -> None:
    """Print the graph as Graphviz dot (one node per file, or per folder with ``--folders``)."""
    argv = sys.argv[1:] if argv is None else argv
    edges = graph()
    if "--folders" in argv:
        folded: dict[str, set[str]] = {}
        for name, deps in edges.items():
            folded.setdefault(_folder(name), set()).update(_folder(d) for d in deps)
        edges = {name: deps - {name} for name, deps in folded.items()}
    print("digraph imports {")
    for name in sorted(edges):
        for dep in sorted(edges[name]):
            print(f'  "{name}" -> "{dep}";')
    print("}")


if __name__ == "__main__":
    main()
