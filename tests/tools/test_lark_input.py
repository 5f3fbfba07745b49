"""A custom tool's Lark grammar rewritten for its JSON-string input (tools/lark_input.py): the
rewritten grammar accepts the JSON escaping of exactly the texts the original accepts."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
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
    ('start: sep{x, ","}\nx: "b"', "templates"),
    ('start: "a"{,}', "templates"),
])
def test_what_the_rewrite_does_not_support_is_named(definition, named):
    with pytest.raises(LarkInputError, match=named):
        json_string_rules(definition, "x_")


# Repeats as OpenAI's Lark examples write them ({n}, {m,n}, {m,}, {,n}, ~ n, ~ m..n), each with
# the Python regex of the same language.
REPEATS = [('start: "a"{2}', r"a{2}"), ('start: ("a" | "\\"b"){1,3}', r'(a|"b){1,3}'),
           ('start: x ~ 2..3\nx: /[ab]/', r"[ab]{2,3}"), ('start: "c"{,2} /[0-9]/{2,}', r"c{0,2}[0-9]{2,}"),
           ('start: x~2\nx: "\\\\"', r"\\{2}")]


@pytest.fixture(scope="module")
def repeat_grammars(tokenizer):
    out = []
    for i, (definition, _) in enumerate(REPEATS):
        start, rules = json_string_rules(definition, f"r{i}_")
        out.append(compile_constraint(tokenizer, LarkRequest(f'start: "\\"" {start} "\\""\n{rules}')))
    return out


@settings(max_examples=examples(40), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@example(index=0, text="aa")
@example(index=1, text='a"b"b')
@example(index=2, text="bab")
@example(index=3, text="c019")
@example(index=4, text="\\\\")
@example(index=4, text="\\\\\\")
@given(index=st.integers(0, len(REPEATS) - 1), text=st.text(st.sampled_from(list('abc019"\\')), max_size=6))
def test_repeats_are_taken_and_mean_what_they_say(tokenizer, repeat_grammars, index, text):
    matcher = repeat_grammars[index].new_matcher()
    written = json.dumps(text, ensure_ascii=False)
    took = all(matcher.advance(t) for t in tokenizer.encode(written)) and matcher.is_accepting()
    assert took == bool(re.fullmatch(REPEATS[index][1], text)), (REPEATS[index], text, written)
