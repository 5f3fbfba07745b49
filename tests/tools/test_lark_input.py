"""A custom tool's Lark grammar rewritten for its JSON-string input (tools/lark_input.py): the
rewritten grammar accepts the JSON escaping of exactly the texts the original accepts."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import LarkRequest
from afm_struct.tools.lark_input import LarkInputError, json_string_rules

from ..decoding.randomized import examples

# Python regexes, as a Lark grammar's /.../ terminals are written; each is checked against re.
PATTERNS = [r'"[^"\n]*"', r"[a-z_]+( [0-9]+)?", r"\s+\w*", r".", r"[^a-z]{1,3}", r"\d+|\\n|x\"y",
            r"(ab|c\\)*[\t ]?"]
ALPHABET = st.sampled_from(list('ab c\\"\n\t_9Z\x01é'))


@pytest.fixture(scope="module")
def grammars(tokenizer):
    """For each pattern, a compiled grammar of the JSON string of what it matches."""
    out = []
    for i, pattern in enumerate(PATTERNS):
        definition = f"start: TERM\nTERM: /{pattern}/\n"
        start, rules = json_string_rules(definition, f"t{i}_")
        out.append(compile_constraint(tokenizer, LarkRequest(f'start: "\\"" {start} "\\""\n{rules}')))
    return out


@settings(max_examples=examples(40), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(index=st.integers(0, len(PATTERNS) - 1), text=st.text(ALPHABET, max_size=6))
def test_the_rewrite_accepts_the_json_string_of_exactly_what_the_pattern_matches(tokenizer, grammars,
                                                                                 index, text):
    matcher = grammars[index].new_matcher()
    written = json.dumps(text, ensure_ascii=False)
    took = all(matcher.advance(t) for t in tokenizer.encode(written)) and matcher.is_accepting()
    assert took == bool(re.fullmatch(PATTERNS[index], text)), (PATTERNS[index], text, written)


@pytest.mark.parametrize(("definition", "named"), [
    ("%import common.WS\nstart: WS", "directives"),
    ('start: "a"i', "case-insensitive"),
    ('start: "a".."z"', "ranges"),
    ("start: /a/i", "flags"),
    ("start: /^a$/", "not supported"),
    ('item: "a"', "no start rule"),
])
def test_what_the_rewrite_does_not_support_is_named(definition, named):
    with pytest.raises(LarkInputError, match=named):
        json_string_rules(definition, "x_")
