"""Hypothesis strategies for small JSON Schemas and the JSON values around them, shared by the
negation, rewrite and regular-language tests."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from hypothesis import strategies as st

# 30 in `make test` (60 until the suite passed 15 minutes); `make fuzz` runs 200.
EXAMPLES = int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 30

KEYS = ["a", "b", "c"]
ALPHABET = "ab1@_ .\n"
STRINGS = st.one_of(st.text(ALPHABET, max_size=4), st.sampled_from(["a", "b", "ab", "@@x", "x1", "é"]))
PATTERNS = ["^a", "b$", "^[ab]+$", "^(?!a)[a-z]*$", "(a|$)", "\\d", "^\\w+$", "a.b", "^(?!@@)[\\w@]+$",
             "^(?=.*1)", "^[^@]*$", "^(ab)*$", "x|^b"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-4, 4),
                     st.floats(-4, 4, allow_nan=False).filter(lambda f: not f.is_integer()), STRINGS)
INSTANCES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from([*KEYS, "x", "@@"]), inner, max_size=3)),
    max_leaves=8)
TYPES = st.sampled_from(["null", "boolean", "integer", "number", "string", "array", "object",
                          ["string", "null"], ["integer", "string"], ["object", "array"]])


# Built once: a strategy made inside a draw is validated again on every draw (hypothesis walks
# it to decide whether it can be empty), which was most of the CPU of the files drawing leaves.
_N, _K = st.integers(-3, 3), st.integers(0, 3)
_WORD = st.one_of(
    st.builds(lambda t: {"type": t}, TYPES),
    st.builds(lambda v: {"const": v}, SCALARS),
    st.builds(lambda vs: {"enum": vs}, st.lists(SCALARS, min_size=1, max_size=3, unique_by=json.dumps)),
    st.builds(lambda v: {"minimum": v}, _N), st.builds(lambda v: {"exclusiveMaximum": v}, _N),
    st.builds(lambda v: {"minLength": v}, _K), st.builds(lambda v: {"maxLength": v}, _K),
    st.builds(lambda p: {"pattern": p}, st.sampled_from(PATTERNS)),
    st.builds(lambda r: {"required": r},
              st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)),
    st.builds(lambda v: {"minItems": v}, _K), st.builds(lambda v: {"maxItems": v}, _K),
    st.builds(lambda v: {"maxProperties": v}, _K),
)


def word(draw: Any) -> dict[str, Any]:
    """One constraint: a keyword and its value."""
    return draw(_WORD)


@functools.cache
def leaf(depth: int = 0) -> st.SearchStrategy[Any]:
    """A small schema: one to three constraints, sometimes with subschemas (one strategy
    object per depth, made once: see ``_WORD``)."""
    return _leaf(depth)


@st.composite
def _leaf(draw: Any, depth: int) -> Any:
    out: dict[str, Any] = {}
    for _ in range(draw(st.integers(1, 3))):
        out.update(word(draw))
    if depth < 1 and draw(st.booleans()):
        key = draw(st.sampled_from(["properties", "items", "anyOf", "allOf", "not"]))
        sub = draw(leaf(depth + 1))
        if key == "properties":
            out["properties"] = {draw(st.sampled_from(KEYS)): sub}
            if draw(st.booleans()):
                out["additionalProperties"] = False
        elif key in ("anyOf", "allOf"):
            out[key] = [sub, draw(leaf(depth + 1))]
        else:
            out[key] = sub
    return draw(st.sampled_from([out, out, out, True, False])) if depth else out


def with_type(draw: Any, node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "type": draw(TYPES)} if draw(st.booleans()) else node
