"""Every GGUF family end to end on tiny random-weight models (no downloads).

For each architecture: mlx-lm's class with random weights is written to GGUF as llama.cpp would
(tests/models/gguf_factory.py), loaded back by our loader, and must give mlx-lm's logits; its
tokenizer must round-trip; and a strict tool call through the real server with the family's chat
template must stream as deltas that parse into a call with valid arguments.  A random model's
text is garbage, but the grammar forces a valid call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mlx.core as mx
import pytest

from afm_struct.models.loader import LoadedModel, load_model

from .gguf_factory import FAMILIES, Tiny, tiny_gguf

FAMILY_NAMES = sorted(FAMILIES)
TOKENS = [5, 77, 130, 9, 250, 3, 44, 61, 200, 12, 33, 100, 7, 8]
TEXTS = ["the city of Paris", 'Weather: {"city": "Oslo", "unit": "celsius"}\n\n  ok', "naïve — 東京 🌧"]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather", "strict": True,
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Tiny, LoadedModel]]:
    """Each family's reference model and the model our loader reads back from its GGUF."""
    directory = tmp_path_factory.mktemp("gguf")
    out = {}
    for name in FAMILY_NAMES:
        tiny, path = tiny_gguf(name, directory)
        out[name] = (tiny, load_model(str(path), weights="float32"))
    return out


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_logits_match_mlx_lm(built, family: str) -> None:
    tiny, loaded = built[family]
    tokens = mx.array([[t % len(tiny.vocab.tokens) for t in TOKENS]])
    expected, got = tiny.reference(tokens), loaded.model(tokens)
    assert got.shape == expected.shape
    assert float(mx.max(mx.abs(expected - got))) < 1e-4


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_forward_pass_from_a_fresh_thread(tmp_path: Path, family: str) -> None:
    """The server runs the model on its scheduler thread, not the one that loaded it: every
    array the model holds must be usable there (a lazy RoPE table built at load was not:
    "There is no Stream(cpu, 0) in current thread" on every request).  A fresh load: the
    module's shared models may already have been run on this thread."""
    import threading

    from afm_struct.decoding.generator import GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams

    tiny, path = tiny_gguf(family, tmp_path)
    loaded = load_model(str(path), weights="float32")
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            logits = loaded.model(mx.array([[t % len(tiny.vocab.tokens) for t in TOKENS]]))
            mx.eval(logits)
            got["logits"] = logits
            # What the scheduler thread does: warm up, then generate (prefill, decode steps).
            gen = Generator.from_loaded(loaded)
            gen.warm_up()
            prompt = loaded.tokenizer.encode_chat([{"role": "user", "content": "hi"}])
            got["end"] = list(gen.generate(GenerationRequest(prompt, SamplingParams(max_tokens=4))))[-1]
        except Exception as exc:  # reported on the test's thread below
            got["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert "error" not in got, got.get("error")
    assert got["end"].reason in ("stop", "length") and got["end"].error is None, got["end"].error
    expected = tiny.reference(mx.array([[t % len(tiny.vocab.tokens) for t in TOKENS]]))
    assert float(mx.max(mx.abs(expected - got["logits"]))) < 1e-4


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_tokenizer_round_trips_with_specials(built, family: str) -> None:
    tiny, loaded = built[family]
    tok, vocab = loaded.tokenizer, tiny.vocab
    prefix = " " if vocab.model == "llama" and vocab.add_space_prefix else ""
    for text in TEXTS:
        assert tok.decode(tok.encode(text)) == prefix + text
    for i, kind in enumerate(vocab.types):
        if kind in (3, 4):  # control and user-defined tokens are matched whole
            assert tok.encode(vocab.tokens[i]) == [i]
    assert vocab.eos in tok.eos_token_ids
    assert tok.add_bos == vocab.add_bos
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    ids = tok.encode(prompt)
    for i, kind in enumerate(vocab.types):
        if kind == 3 and vocab.tokens[i] in prompt:  # the template's markers stay single tokens
            assert i in ids, vocab.tokens[i]
    if vocab.model == "gpt2":
        assert tok.decode(ids) == prompt
    else:  # llama.cpp's SentencePiece writes a space after each special token, as here
        assert tok.decode(ids).replace(" ", "") == prompt.replace(" ", "")


def stream_chat(url: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """The deltas of a streamed chat completion and its finish reason."""
    deltas, finish = [], None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json={**body, "stream": True},
                      timeout=60) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk.get("choices", ()):
                deltas.append(choice["delta"])
                finish = choice.get("finish_reason") or finish
    return deltas, finish


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Text appended, reasoning appended, tool-call fragments merged by index."""
    out: dict[str, Any] = {"content": "", "reasoning": "", "calls": {}}
    for d in deltas:
        out["content"] += d.get("content") or ""
        out["reasoning"] += d.get("reasoning_content") or ""
        for frag in d.get("tool_calls") or ():
            call = out["calls"].setdefault(frag["index"], {"name": None, "arguments": ""})
            fn = frag.get("function") or {}
            call["name"] = call["name"] or fn.get("name")
            call["arguments"] += fn.get("arguments") or ""
    out["calls"] = [out["calls"][i] for i in sorted(out["calls"])]
    return out


@pytest.fixture
def served(built) -> Iterator[Any]:
    """``serve(family)`` → the URL of a live server on that family's tiny model.  Reasoning is
    off: a random model that opens a thinking block may never close it (the Qwen3 test below
    covers reasoning then a call)."""
    from server.live import start_server
    from server.settings import ServerSettings

    servers = []

    def serve(family: str) -> str:
        servers.append(start_server(built[family][1], ServerSettings(reasoning="off")))
        return servers[-1].url

    yield serve
    for server in servers:
        server.stop()


def assert_one_valid_call(deltas: list[dict[str, Any]], tool: dict[str, Any]) -> dict[str, Any]:
    """Exactly one call of ``tool`` whose arguments validate against its parameters."""
    result = assemble(deltas)
    assert [c["name"] for c in result["calls"]] == [tool["function"]["name"]], result
    jsonschema.validate(json.loads(result["calls"][0]["arguments"]), tool["function"]["parameters"])
    return result


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_strict_tool_call_through_the_server(served, built, family: str) -> None:
    url = served(family)
    deltas, finish = stream_chat(url, {
        "model": family, "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False,
        "temperature": 0, "max_tokens": 160})
    assert finish in ("tool_calls", "length")
    result = assert_one_valid_call(deltas, WEATHER)
    assert "<tool_call>" not in result["content"] and "[TOOL_CALLS]" not in result["content"]


def test_tool_format_chosen_from_each_template(built) -> None:
    from afm_struct.tools.formats import chat_template_of, detect_format

    expected = {"qwen2": "hermes", "qwen3": "hermes", "llama": "llama3_json", "mistral": "mistral",
                "mistral_args": "mistral_args", "phi3": "hermes", "gemma2": "hermes", "gemma3": "hermes"}
    for family in FAMILY_NAMES:
        fmt = detect_format(chat_template_of(built[family][1].tokenizer))
        assert fmt.name == expected[family], family


def test_weights_file_is_gone_after_loading(built, tmp_path: Path) -> None:
    """Nothing keeps the GGUF open or mapped: the loaded model outlives its file."""
    tiny, path = tiny_gguf("qwen2", tmp_path)
    loaded = load_model(str(path), weights="float32")
    path.unlink()
    assert loaded.model(mx.array([[1, 2, 3]])).shape[-1] == len(tiny.vocab.tokens)


def _thinks_first(tiny: Tiny) -> None:
    """Bias a random Qwen3 so greedy decoding opens and closes a thinking block: one embedding
    dimension is a large constant (it dominates the normed residual), and only the LM-head rows
    of ``</think>`` (most) and ``<think>`` (next) read it."""
    model, vocab = tiny.reference, tiny.vocab
    emb = model.model.embed_tokens.weight
    model.model.embed_tokens.weight = mx.concatenate([mx.full((emb.shape[0], 1), 20.0), emb[:, 1:]], 1)
    head = model.lm_head.weight
    column = mx.zeros((head.shape[0], 1))
    column[vocab.id("</think>")] = 5.0
    column[vocab.id("<think>")] = 3.0
    model.lm_head.weight = mx.concatenate([column, head[:, 1:]], 1)
    mx.eval(model.parameters())


def test_qwen3_reasons_then_calls_through_the_server(tmp_path: Path) -> None:
    from server.live import start_server

    from .gguf_factory import build_reference, qwen3, write_gguf

    tiny = qwen3()
    build_reference(tiny)
    _thinks_first(tiny)
    loaded = load_model(str(write_gguf(tiny, tmp_path / "qwen3.gguf")), weights="float32")
    # The setup works: <think> beats the call opener, then </think> is the greedy choice.
    v = tiny.vocab
    prompt = loaded.tokenizer.encode_chat([{"role": "user", "content": "Weather?"}], tools=[WEATHER])
    first = loaded.model(mx.array([prompt]))[0, -1]
    assert float(first[v.id("<think>")]) > float(first[v.id("<tool_call>")])
    after = loaded.model(mx.array([[*prompt, v.id("<think>")]]))[0, -1]
    assert int(mx.argmax(after)) == v.id("</think>")
    server = start_server(loaded)
    try:
        deltas, finish = stream_chat(server.url, {
            "model": "qwen3", "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 64})
    finally:
        server.stop()
    result = assert_one_valid_call(deltas, WEATHER)
    # The block went to the reasoning channel (empty: the bias closes it at once), not the content.
    assert "<think>" not in result["content"] and "</think>" not in result["content"]
    first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert not any(d.get("reasoning_content") for d in deltas[first_call:])
    assert finish in ("tool_calls", "length")


def test_qwen3_enable_thinking_false_closes_the_block_in_the_prompt(built) -> None:
    from afm_struct.decoding.reasoning_gate import detect_reasoning_tags

    tok = built["qwen3"][1].tokenizer
    user = [{"role": "user", "content": "hi"}]
    thinking = tok.hf.apply_chat_template(user, add_generation_prompt=True, tokenize=False)
    quiet = tok.hf.apply_chat_template(user, add_generation_prompt=True, tokenize=False,
                                       enable_thinking=False)
    assert thinking.endswith("<|im_start|>assistant\n")
    assert quiet.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    tags = detect_reasoning_tags(tok, thinking)
    assert tags is not None and (tags.open, tags.close) == ("<think>", "</think>")
    assert not tags.opened_in_prompt
    assert detect_reasoning_tags(tok, quiet) is None  # the template closed the block: no thinking
    assert tok.decode(tok.encode_chat(user, template_kwargs={"enable_thinking": False})).endswith(
        "<think>\n\n</think>\n\n")


def test_qwen3_enable_thinking_false_through_the_server(built) -> None:
    """``chat_template_kwargs: {"enable_thinking": false}`` reaches the template (the prompt ends
    with the closed block), thinking is off for that request only, and the call still streams."""
    import asyncio

    from server.admission import prepare
    from server.chat.adapter import plan_chat
    from server.live import start_server
    from server.schemas import ChatCompletionRequest

    async def prepared(state, body, request_id):
        plan = await plan_chat(state, ChatCompletionRequest.model_validate(body), request_id=request_id,
                               profile_key=None)
        return await prepare(state, plan)

    loaded = built["qwen3"][1]
    server = start_server(loaded)
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 64}
    quiet_body = {**body, "chat_template_kwargs": {"enable_thinking": False}}
    try:
        quiet, finish = stream_chat(server.url, quiet_body)
        plans = [asyncio.run(prepared(server.state, b, f"r{i}")) for i, b in enumerate((body, quiet_body))]
    finally:
        server.stop()
    tok = loaded.tokenizer
    assert plans[0].reasoning is not None and not tok.decode(plans[0].generation.prompt_ids).endswith(
        "</think>\n\n")
    assert plans[1].reasoning is None and tok.decode(plans[1].generation.prompt_ids).endswith(
        "<think>\n\n</think>\n\n")
    assert_one_valid_call(quiet, WEATHER)
    assert not any("reasoning_content" in d for d in quiet) and finish in ("tool_calls", "length")
