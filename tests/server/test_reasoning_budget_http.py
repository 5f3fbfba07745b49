"""A reasoning budget over HTTP without a grammar: chat's ``max_reasoning_tokens`` and the
Responses API's ``reasoning.effort`` (a budget per effort, server/responses/adapter.py
EFFORT_BUDGETS).  The scripted model thinks at length, then answers; the budget leaves its block
early (the close tag forced) and the answer still comes, in the rest of the budget."""

from __future__ import annotations

import httpx
import pytest

from server.responses.adapter import EFFORT_BUDGETS

from .conftest import USER, decode, stream_raw

THOUGHT = "Let me weigh each option in turn, slowly and with care, before I answer. " * 2
SCRIPT = f"<think>{THOUGHT}</think>\n\nThe answer is 42."


def chat(url: str, body: dict) -> dict:
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text[:400]
    return r.json()["choices"][0]


@pytest.mark.parametrize("budget", [0, 5])
def test_max_reasoning_tokens_leaves_an_unconstrained_block(serve, tokenizer, budget: int) -> None:
    live = serve(SCRIPT, reasoning="think")
    body = {"messages": USER, "max_tokens": 120, "max_reasoning_tokens": budget}
    choice = chat(live.url, body)
    reasoning = choice["message"].get("reasoning_content") or ""
    assert THOUGHT.startswith(reasoning) and len(tokenizer.encode(reasoning)) <= budget
    # The scripted model goes on with its script: the rest of its thought, then the answer.
    assert choice["message"]["content"].endswith("The answer is 42.")
    assert choice["finish_reason"] == "stop"
    response, payloads = stream_raw(live.url, body)
    assert response.status_code == 200
    deltas = [c["choices"][0]["delta"] for c in decode(payloads) if c.get("choices")]
    assert "".join(d.get("reasoning_content") or "" for d in deltas) == reasoning
    assert "".join(d.get("content") or "" for d in deltas) == choice["message"]["content"]


def test_without_a_budget_the_block_is_the_models(serve) -> None:
    live = serve(SCRIPT, reasoning="think")
    choice = chat(live.url, {"messages": USER, "max_tokens": 120})
    assert choice["message"]["reasoning_content"] == THOUGHT
    assert choice["message"]["content"] == "The answer is 42."


@pytest.mark.parametrize("effort", ["none", "low"])
def test_responses_effort_is_a_reasoning_budget(serve, effort: str) -> None:
    live = serve(SCRIPT, reasoning="think")
    r = httpx.post(f"{live.url}/v1/responses", timeout=60,
                   json={"input": "hi", "max_output_tokens": 120, "reasoning": {"effort": effort}})
    assert r.status_code == 200, r.text[:400]
    out = r.json()["output"]
    thought = "".join(part["text"] for item in out if item["type"] == "reasoning" for part in item["content"])
    text = "".join(part["text"] for item in out if item["type"] == "message" for part in item["content"])
    assert EFFORT_BUDGETS["none"] == 0 and (EFFORT_BUDGETS["low"] or 0) > 64
    # none: the block is left at once; low: a budget far above this thought.
    assert thought == ("" if effort == "none" else THOUGHT)
    assert text.endswith("The answer is 42.")
