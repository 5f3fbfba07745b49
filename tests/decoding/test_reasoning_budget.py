"""A reasoning budget (``max_reasoning_tokens``): after that many thinking tokens the close tag
is forced, and the constrained answer follows in the budget that is left."""

from __future__ import annotations

import json

import jsonschema
import pytest

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.reasoning_gate import ReasoningTags
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import scripted_loaded_model

SCHEMA = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
          "required": ["color"], "additionalProperties": False}
THOUGHT = "Let me consider every colour there is, one by one, at great length and in detail. " * 3
SCRIPT = f'<think>{THOUGHT}</think>\n{{"color": "blue"}}'


def run(tokenizer, tags: ReasoningTags, max_tokens: int = 200) -> Finished:
    prompt = tokenizer.encode_chat([{"role": "user", "content": "A colour, as JSON."}])
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(SCHEMA))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, SCRIPT))
    *_, fin = gen.generate(GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=max_tokens),
                                             constraint=constraint, reasoning=tags))
    assert isinstance(fin, Finished)
    return fin


@pytest.mark.parametrize("budget", [0, 1, 5, 12])
def test_the_close_tag_is_forced_when_the_budget_is_spent(tokenizer, budget: int) -> None:
    fin = run(tokenizer, ReasoningTags(budget=budget))
    assert fin.reason == "stop", fin
    assert fin.text.startswith("<think>") and "</think>" in fin.text
    thought, answer = fin.text[len("<think>"):].split("</think>", 1)
    assert len(tokenizer.encode(thought)) <= budget + 1  # tokens re-tokenized may merge, not grow
    assert thought == THOUGHT[:len(thought)]  # the model's own thinking, cut
    jsonschema.validate(json.loads(answer), SCHEMA)


def test_without_a_budget_the_model_thinks_to_its_own_close(tokenizer) -> None:
    fin = run(tokenizer, ReasoningTags())
    assert fin.text == SCRIPT


def test_the_budget_counts_from_a_block_the_prompt_opened(tokenizer) -> None:
    fin = run(tokenizer, ReasoningTags(opened_in_prompt=True, budget=3))
    thought, answer = fin.text.split("</think>", 1)
    assert len(tokenizer.encode(thought)) <= 4
    jsonschema.validate(json.loads(answer), SCHEMA)
