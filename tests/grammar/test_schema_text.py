"""What the compiler reads from a schema's JSON text instead of walking the schema (the cache
key's compact dump, made once per compile): each shortcut must answer as the walk would.

* ``longest_forced_run(schema, text)``: a short text with no counted repeat is under the budget
  (:func:`~afm_struct.grammar.closer.literal_budget.bounded_by_text`): checked here on the bound it
  rests on, forced bytes at most twice the text, for patterns and literals built from every
  kind of atom (escapes, quotes, control and non-ASCII characters, groups, alternations);
* ``schema_limits_reason(schema, options, text)``: the size and depth verdicts of the walk;
* ``rewrite_schema(schema, text)``: no triggering keyword in the text, no rewrite;
  :func:`~afm_struct.grammar.schema.rewrites.mentioned_triggers` never misses a keyword used as a key.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from afm_struct.grammar.closer.literal_budget import (
    MAX_FORCED_RUN,
    bounded_by_text,
    forced_run,
    longest_forced_run,
)
from afm_struct.grammar.compiler import schema_key
from afm_struct.grammar.schema.check import schema_limits_reason
from afm_struct.grammar.schema.keywords import TRIGGERS
from afm_struct.grammar.schema.rewrites import mentioned_triggers, rewrite_schema
from afm_struct.grammar.spec import CompileOptions

from ..decoding.randomized import examples
from .schema_strategies import leaf

# Regex atoms, each as written in a pattern: plain, escaped, quote and backslash (escaped again
# in JSON output), control characters raw and as escapes, non-ASCII raw and as escapes.
ATOMS = ["a", "Z", "0", "-", '"', "\\\\", "\\.", "\\n", "\\t", "\\x01", "\\u0007", "\\u00e9", "\x01",
         "\x7f", "é", "€", "😀", "\\/", "[ab]", ".", "\\d", "[^x]"]


@functools.cache
def patterns(depth: int = 0) -> st.SearchStrategy[str]:
    """A regex without counted repeats: atoms, groups, alternations and ``+ * ?`` (one
    strategy object per depth: a new one in every draw was validated again each time)."""
    return _patterns(depth)


@st.composite
def _patterns(draw: Any, depth: int) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 6))):
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            inner = draw(st.lists(patterns(depth + 1), min_size=1, max_size=3))
            part = "(" + "|".join(inner) + ")"
        else:
            part = draw(st.sampled_from(ATOMS))
        parts.append(part + draw(st.sampled_from(["", "", "+", "*", "?"])))
    return "".join(parts)


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(pattern=patterns(), anchored=st.booleans())
def test_a_pattern_without_counted_repeats_forces_at_most_twice_its_text(pattern: str,
                                                                          anchored: bool) -> None:
    pattern = f"^{pattern}$" if anchored else pattern
    text = schema_key({"pattern": pattern})
    assert forced_run(pattern) <= 2 * len(text)
    assert bounded_by_text(text) == (2 * len(text) <= MAX_FORCED_RUN)


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(value=st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                    st.text()),
                          lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                          max_leaves=6))
def test_a_literal_forces_at_most_its_text(value: Any) -> None:
    # const, enum values and property names: the bytes they force (JSON with ", " and ": "
    # separators, UTF-8) against their length in the compact, ASCII text.
    forced = len(json.dumps(value, ensure_ascii=False).encode())
    assert forced <= 2 * len(schema_key(value))
    if isinstance(value, str):  # a string (a property name too) is at most its text
        assert forced <= len(schema_key(value))


def test_the_text_shortcut_never_hides_a_run_over_the_budget() -> None:
    # Over the budget, each way a schema can force a run: the walk finds it, and the text says
    # it cannot vouch for the schema (too long, or a counted repeat in it).
    over = MAX_FORCED_RUN + 1
    for schema in ({"pattern": f"^a{{{over}}}$"}, {"pattern": "^(ab){9000}$"}, {"pattern": "x{20000,}"},
                   {"const": "a" * over}, {"enum": ["b", "é" * (over // 2 + 1)]},
                   {"properties": {"k" * over: {}}}, {"pattern": "\\x01" * (over // 6 + 1)}):
        text = schema_key(schema)
        assert longest_forced_run(schema) is not None
        assert not bounded_by_text(text)
        assert longest_forced_run(schema, text) is not None


@settings(max_examples=examples(200), deadline=None, derandomize=True, database=None)
@given(schema=leaf(), depth=st.integers(0, 80), pad=st.integers(0, 300))
def test_the_limits_read_from_the_text_are_the_walks(schema: Any, depth: int, pad: int) -> None:
    for _ in range(depth):  # nested down to around the depth limit
        schema = {"items": schema} if depth % 2 else {"anyOf": [schema]}
    schema = {**schema, "description": "{[" * pad} if isinstance(schema, dict) else schema
    for options in (CompileOptions(), CompileOptions(max_depth=8, max_schema_bytes=900)):
        walked = schema_limits_reason(schema, options)
        assert schema_limits_reason(schema, options, schema_key(schema)) == walked


@settings(max_examples=examples(300), deadline=None, derandomize=True, database=None)
@given(schema=leaf(), extra=st.sampled_from(sorted(TRIGGERS)),
       where=st.sampled_from(["key", "value", "none"]))
def test_no_trigger_in_the_text_means_no_rewrite(schema: Any, extra: str, where: str) -> None:
    if isinstance(schema, dict) and where == "key":
        schema = {**schema, "properties": {extra: {"type": "string"}}}  # a property named like it
    elif isinstance(schema, dict) and where == "value":
        schema = {**schema, "description": f'"{extra}": no key'}
    text = schema_key(schema)
    used = _keys(schema) & TRIGGERS
    assert used <= mentioned_triggers(text)
    assert mentioned_triggers(json.dumps(schema)) == mentioned_triggers(text)  # any separators
    fast, walked = rewrite_schema(schema, text), rewrite_schema(schema)
    assert fast.applied == walked.applied
    if not walked.applied:
        assert fast.schema == walked.schema or schema_key(fast.schema) == schema_key(schema)


def _keys(node: Any) -> set[str]:
    out: set[str] = set()
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.update(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return out
