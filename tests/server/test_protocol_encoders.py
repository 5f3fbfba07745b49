"""The text-completion and Ollama encoders are pure: whatever way a run's text and tool calls
are cut into events, the streamed pieces add up to the whole body, and the end is well formed
(hypothesis over event sequences; ``AFM_STRUCT_RANDOM_EXAMPLES`` sets the count)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from afm_struct.errors import GenerationError
from afm_struct.turn.events import (
    CallArguments,
    CallClosed,
    CallOpened,
    Failed,
    Finish,
    ResponseIdentity,
    Text,
    UsageReport,
)
from afm_struct.turn.outputs import FinishReason, TokenLogprob, Usage
from server.completions_api.encoder import CompletionStream, TextCompletion
from server.ollama.encoder import OllamaBody, OllamaStream

from ..tenant_traffic import traffic_settings

IDENT = ResponseIdentity(id="cmpl-1", created=1_700_000_000, model="m")
pieces = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=8)


def _entries(text: str, at: int) -> list[TokenLogprob]:
    return [TokenLogprob(token=text, id=1, logprob=-0.5, bytes=tuple(text.encode()), top=(), offset=at,
                         end=at + len(text))]


def _texts(parts: list[str]) -> list[Text]:
    out, at = [], 0
    for p in parts:
        out.append(Text(p, _entries(p, at)))
        at += len(p)
    return out


def _sse(frames: list[bytes]) -> list[dict]:
    out = []
    for frame in frames:
        data = frame.decode().removeprefix("data: ").strip()
        if data != "[DONE]":
            out.append(json.loads(data))
    return out


@traffic_settings(60)
@given(parts=pieces, echo=st.sampled_from([None, "", "P:"]), reason=st.sampled_from(list(FinishReason)[:3]))
def test_completion_stream_adds_up_to_the_body(parts, echo, reason) -> None:
    ends = [Finish(reason), UsageReport(Usage(prompt_tokens=3, completion_tokens=len(parts)))]
    stream = CompletionStream(IDENT, logprobs=echo is None, include_usage=True, echo=echo)
    body = TextCompletion(IDENT, logprobs=echo is None, echo=echo)
    frames: list[bytes] = []
    for event in [*_texts(parts), *ends]:
        frames += stream.encode(event)
        body.add(event)
    frames += stream.end()
    assert frames[-1] == b"data: [DONE]\n\n"
    chunks = _sse(frames)
    whole = body.body()["choices"][0]
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == whole["text"]
    assert whole["text"] == (echo or "") + "".join(parts)
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == reason
    assert chunks[-1]["usage"]["completion_tokens"] == len(parts)
    if echo is None:  # every token's offset points at its text in the choice
        lp = whole["logprobs"]
        assert [whole["text"][o:o + len(t)] for o, t in zip(lp["text_offset"], lp["tokens"], strict=True)] \
            == lp["tokens"]


@traffic_settings(60)
@given(parts=pieces, args=st.lists(st.text(alphabet="abc", max_size=4), max_size=4), closed=st.booleans())
def test_ollama_stream_adds_up_to_the_body(parts, args, closed) -> None:
    arguments = json.dumps({"x": "".join(args)})
    fragments = [arguments[i:i + 3] for i in range(0, len(arguments), 3)]
    events = [*_texts(parts), CallOpened(0, "call_1", "f", fragments[0]),
              *(CallArguments(0, f) for f in fragments[1:])]
    if closed:
        events.append(CallClosed(0))
    events += [Finish(FinishReason.TOOL_CALLS), UsageReport(Usage(prompt_tokens=2, completion_tokens=5))]
    for kind in ("chat", "generate"):
        stream, body = OllamaStream(IDENT, kind, logprobs=True), OllamaBody(IDENT, kind, logprobs=True)
        lines = []
        for event in events:
            lines += stream.encode(event)
            body.add(event)
        lines += stream.end()
        parsed = [json.loads(x) for x in lines]
        assert all(x.endswith(b"\n") and b"\n" not in x[:-1] for x in lines)
        whole = body.body()
        assert parsed[-1]["done"] is True and all(p["done"] is False for p in parsed[:-1])
        assert parsed[-1]["done_reason"] == whole["done_reason"] == "stop"
        if kind == "chat":
            assert "".join(p["message"]["content"] for p in parsed) == whole["message"]["content"]
            calls = [c for p in parsed for c in p["message"].get("tool_calls", ())]
            assert calls == whole["message"]["tool_calls"]
            assert [c["function"]["arguments"] for c in calls] == [json.loads(arguments)]
        else:
            assert "".join(p["response"] for p in parsed) == whole["response"] == "".join(parts)


def test_ollama_cut_call_is_an_error_not_a_made_up_object() -> None:
    events = [CallOpened(0, "call_1", "f", '{"x": "ab'), Finish(FinishReason.LENGTH),
              UsageReport(Usage(prompt_tokens=2, completion_tokens=5))]
    stream = OllamaStream(IDENT, "chat", logprobs=False)
    lines = [json.loads(x) for e in events for x in stream.encode(e)] + [json.loads(x) for x in stream.end()]
    assert len(lines) == 1 and "tool call 0" in lines[0]["error"]


def test_ollama_failure_is_one_error_line_and_the_stream_ends() -> None:
    stream = OllamaStream(IDENT, "generate", logprobs=False)
    out = stream.encode(Text("a")) + stream.encode(Failed(GenerationError("boom")))
    out += stream.encode(UsageReport(Usage())) + stream.end()
    assert [json.loads(x) for x in out][-1] == {"error": "boom"} and len(out) == 2
