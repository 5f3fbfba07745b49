"""Random tools, schemas and arguments for the tool-syntax property tests (hypothesis)."""

from __future__ import annotations

import json
import keyword
from typing import Any

from hypothesis import strategies as st

from afm_struct.grammar.spec import ToolDef
from afm_struct.tools import load_table

FORMATS = load_table().formats
KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,7}", fullmatch=True).filter(lambda k: not keyword.iskeyword(k))
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
# Assigned code points only: the tokenizer's grammar engine does not write unassigned ones
# (U+40000 in a JSON string is rejected by every syntax's grammar, JSON ones included).
CHARS = st.characters(max_codepoint=0x2FFFF, exclude_categories=("Cn", "Co", "Cs"))
TEXT = st.text(CHARS, max_size=24)


def _leaf_schemas() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.just({"type": "string"}),
        st.just({"type": "integer"}),
        st.just({"type": "number"}),
        st.just({"type": "boolean"}),
        st.lists(st.text(CHARS, min_size=1, max_size=8), min_size=1, max_size=4, unique=True)
        .map(lambda xs: {"type": "string", "enum": xs}),
        st.just({"anyOf": [{"type": "string"}, {"type": "null"}]}),
    )


def _schemas(depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    if depth >= 2:
        return _leaf_schemas()
    return st.one_of(
        _leaf_schemas(),
        _leaf_schemas().map(lambda s: {"type": "array", "items": s}),
        objects(depth + 1),
    )


def objects(depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """Closed object schemas: a few properties, some required."""
    return st.dictionaries(KEYS, st.deferred(lambda: _schemas(depth)), max_size=4).flatmap(
        lambda props: st.sets(st.sampled_from(sorted(props)) if props else st.nothing(),
                              max_size=len(props)).map(
            lambda req: {"type": "object", "properties": props, "required": sorted(req),
                         "additionalProperties": False}))


def values(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Instances of one of the generated schemas."""
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of(*(values(s) for s in schema["anyOf"]))
    kind = schema["type"]
    if kind == "string":
        return TEXT
    if kind == "integer":
        return st.integers(-10**12, 10**12)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        return st.lists(values(schema["items"]), max_size=3)
    props = schema["properties"]
    required = set(schema["required"])

    def build(present: list[str]) -> st.SearchStrategy[dict[str, Any]]:
        keys = [k for k in props if k in required or k in present]  # schema order
        # In the schema's order, which the grammars enforce (fixed_dictionaries may reorder).
        return st.fixed_dictionaries({k: values(props[k]) for k in keys}).map(
            lambda d: {k: d[k] for k in keys})

    optional = [k for k in props if k not in required]
    return st.sets(st.sampled_from(optional) if optional else st.nothing(), max_size=len(optional)).map(
        sorted).flatmap(build)


@st.composite
def tool_calls(draw: Any, *, max_calls: int = 3) -> tuple[tuple[ToolDef, ...], list[tuple[str, Any, Any]]]:
    """Random tools (strict, closed schemas) and calls to them: ``(tools, [(name, args, schema)])``."""
    names = draw(st.lists(NAMES, min_size=1, max_size=3, unique=True))
    tools = tuple(ToolDef(n, parameters=draw(objects()), strict=True) for n in names)
    picks = draw(st.lists(st.sampled_from(tools), min_size=1, max_size=max_calls))
    calls = [(t.name, draw(values(t.parameters)), t.parameters) for t in picks]
    return tools, calls


def chunked(draw: Any, text: str) -> list[str]:
    """``text`` cut at random places."""
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=16)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True) if b > a]


def arguments(call_args: str) -> Any:
    """Arguments as the client reads them."""
    return json.loads(call_args)
