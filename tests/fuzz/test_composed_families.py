"""Tools and a JSON format in one grammar on a tiny random-weight model of each tool syntax
(issue 49.1; tests/fuzz/driver.py): whatever the model samples, a turn that stops is a valid
answer (content, against the format's schema) or valid calls (against the tool's), never prose,
and ``X-AFM-Constraint-Mode`` says ``exact``.  A random model takes either branch; the seeds
below take both across the families.  ``AFM_STRUCT_RANDOM_EXAMPLES=N`` runs N seeds each."""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import jsonschema
import pytest

from .driver import FamilyServers

ANSWER = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}, "n": {"type": "boolean"}},
          "required": ["q", "n"], "additionalProperties": False}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"],
        "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "lookup", "strict": True, "parameters": CITY}}]
# One family per tool syntax: Hermes, Llama JSON, Mistral's two, Qwen3-Coder XML, GLM, Harmony, pythonic.
SYNTAX_FAMILIES = ["qwen2", "llama", "mistral", "mistral_args", "qwen3_moe", "glm4_moe", "gpt_oss",
                   "llama_pythonic"]
SEEDS = range(int(os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES", "0")) or 2)
BRANCHES: dict[str, set[str]] = {}


@pytest.mark.parametrize("family", SYNTAX_FAMILIES)
def test_every_stopped_turn_is_a_valid_answer_or_valid_calls(family_servers: FamilyServers,
                                                             family: str) -> None:
    server = family_servers.get(family)
    for seed in SEEDS:
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": "Where is Paris?"}], "tools": TOOLS, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER,
                                                                       "strict": True}},
            "max_tokens": 120, "max_reasoning_tokens": 16}
        r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert r.headers["x-afm-constraint-mode"] == "exact" and "x-grammar-constraints" not in r.headers
        choice = r.json()["choices"][0]
        message, finish = choice["message"], choice["finish_reason"]
        if finish == "tool_calls":
            assert not message.get("content"), (family, seed, message)
            for call in message["tool_calls"]:
                assert call["function"]["name"] == "lookup", (family, seed, message)
                jsonschema.validate(json.loads(call["function"]["arguments"]), CITY)
            BRANCHES.setdefault(family, set()).add("calls")
        elif finish == "stop":
            assert not message.get("tool_calls"), (family, seed, message)
            jsonschema.validate(json.loads(message["content"]), ANSWER)
            BRANCHES.setdefault(family, set()).add("answer")
        else:  # cut by the budget: nothing to judge but the header
            assert finish == "length", (family, seed, choice)


def test_both_branches_were_taken() -> None:
    """The seeds above are not all one branch (else the grammar may have lost the other)."""
    if not BRANCHES:
        pytest.skip("run with the family tests")
    print("branches taken:", BRANCHES)  # shown with -s
    taken = set().union(*BRANCHES.values())
    assert taken == {"answer", "calls"}, BRANCHES
