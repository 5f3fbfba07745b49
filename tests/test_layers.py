"""The import graph of afm_struct/, afm_struct_bench/ and server/ has no circle between files and
no arrow from a lower layer to a higher one.

Every import counts, those inside functions and under ``TYPE_CHECKING`` included
(:mod:`tests.import_graph`).  The layers, lowest first (a module may import its own layer and
the ones below it):

    errors, resources,  the error values, where the data folders are, lazy package exports
    lazy_exports,       and the imports deferred to first use
    deferred_imports
    store               the response store (SQLite, PostgreSQL)
    models              weights, the tokenizer facade (and a generic store of its derived parts)
    grammar             compile: schema analysis, engines, closing, patterns; the ladder on top
    turn                what the model writes, read as it streams: outputs, markers, reasoning,
                        the turn's state and its answer events
    tools               tool-call formats, prompts, grammars and the call parsers
    decoding            the generation loop: scheduler, generator, masks, sampling, stops
    serving             one request as the engine serves it (the plan), protocol-neutral
    library, client,    the library's surfaces: extraction, the stream client, test models
    testing
    afm_struct          the package facade (``afm_struct/__init__.py``)
    cli                 the command line
    afm_struct_bench    the benchmark harness (``afm-struct bench`` reaches it through cli)
    server              the HTTP face
"""

from __future__ import annotations

import functools

from .import_graph import cycles, find_cycle
from .import_graph import graph as read_graph

LAYERS: list[tuple[str, ...]] = [
    ("afm_struct.errors", "afm_struct.resources", "afm_struct.lazy_exports", "afm_struct.deferred_imports"),
    ("afm_struct.store",),
    ("afm_struct.models",),
    ("afm_struct.grammar",),
    ("afm_struct.turn",),
    ("afm_struct.tools",),
    ("afm_struct.decoding",),
    ("afm_struct.serving",),
    ("afm_struct.library", "afm_struct.client", "afm_struct.testing"),
    ("afm_struct",),
    ("afm_struct.cli",),
    ("afm_struct_bench",),
    ("server",),
]


def layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the longest entry ``module`` is (or lies under); the
    facade ``afm_struct`` matches itself only."""
    best: tuple[int, int] | None = None
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            under = module == entry or (module.startswith(entry + ".") and entry != "afm_struct")
            if under and (best is None or len(entry) > best[0]):
                best = (len(entry), index)
    return None if best is None else best[1]


@functools.cache
def _tree_graph() -> dict[str, frozenset[str]]:
    # Read once per module (~1.4 s of CPU: every file of the three packages parsed), not per test.
    return {name: frozenset(deps) for name, deps in read_graph().items()}


def graph() -> dict[str, set[str]]:
    """The tree's import graph, a copy each test may change."""
    return {name: set(deps) for name, deps in _tree_graph().items()}


def upward_arrows(edges: dict[str, set[str]]) -> list[str]:
    """Every import from a module to one in a higher layer."""
    return sorted(f"{name} -> {dep}" for name, deps in edges.items() for dep in deps
                  if (layer_of(dep) or 0) > (layer_of(name) or 0))


def test_the_graph_is_read_from_the_tree() -> None:
    edges = graph()
    # A few arrows every layout has: the check reads real imports, deferred and typing ones too.
    assert "afm_struct.errors" in edges["afm_struct.models.tokenizer"]
    assert any("afm_struct.grammar.compiler" in deps for deps in edges.values())
    assert len(edges) > 200


def test_no_import_circle_between_files() -> None:
    edges = graph()
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])
    assert cycles(edges) == []


def test_every_module_has_a_layer() -> None:
    assert [name for name in graph() if layer_of(name) is None] == []


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    assert upward_arrows(graph()) == []


def test_the_checks_see_a_circle_and_an_upward_arrow() -> None:
    """The checks themselves: an added arrow back up (the tokenizer facade importing the
    compiler, as it once did through its derived state) is both."""
    edges = graph()
    edges["afm_struct.models.tokenizer"] |= {"afm_struct.grammar.compiler"}
    assert "afm_struct.models.tokenizer -> afm_struct.grammar.compiler" in upward_arrows(edges)
    assert find_cycle(edges) is not None
