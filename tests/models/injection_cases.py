"""Random chats whose request strings hold a vocabulary's special-token strings (issue 26).

A chat is built from pieces: words, whitespace and punctuation, whole special-token strings and
pieces of one (``<|im_`` / ``end|>``, which two strings joined by a template could complete).
Each request string carries a unique canary word, so that it can be found again in the prompt.
The same chat is also built *neutral*, every special piece replaced by ``x``: its prompt holds
only the special tokens the template writes, the reference for the injected prompt.

The families: each GGUF vocabulary of :mod:`tests.models.gguf_factory` with its template, the
embedded SmolLM2 (ChatML) and the default template (a vocabulary whose GGUF has no template).
Special tokens are read from the GGUF's token types, not from the code under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from afm_struct.models.gguf import read_gguf
from afm_struct.models.loader import embedded_model_path, load_tokenizer
from afm_struct.models.tokenizer import Tokenizer
from afm_struct.tools.plan import plan_tools

from .gguf_factory import FAMILIES, build_reference, write_gguf

WORDS = ["alpha", "beta", "the", "city", "Paris", "naïve", "東京", "42", "3.5", "x_y"]
FILLERS = [" ", "\n", "  ", "\n\n", '"', "{", "}", ":", ",", "'", "\\", "<", ">", "[", "]", "|"]
CONTROL = 3  # GGUF token type of control (special) tokens
# Templates that read no ``tools`` get them written into the system message by the tools layer
# (render_history); the others get them as the template's ``tools``.
NAMES = [*sorted(FAMILIES), "smollm2", "default"]


@dataclass
class Family:
    """A tokenizer and its special tokens as the GGUF declares them."""

    name: str
    tokenizer: Tokenizer
    specials: dict[int, str]  # id → string, control tokens only

    @property
    def strings(self) -> list[str]:
        """The special strings a user could type (whitespace-only ones aside)."""
        return sorted(s for s in self.specials.values() if s.strip())


def build_family(name: str, directory: Path) -> Family:
    """The family ``name``'s tokenizer, loaded from a GGUF as the server would."""
    if name == "smollm2":
        path = embedded_model_path()
    else:
        tiny = FAMILIES["qwen2" if name == "default" else name]()
        if name == "default":
            tiny.template = ""  # no template in the file: the tokenizer's default ChatML
        build_reference(tiny)
        path = write_gguf(tiny, directory / f"{name}.gguf")
    meta = read_gguf(path).metadata
    tokens, types = list(meta["tokenizer.ggml.tokens"]), meta["tokenizer.ggml.token_type"]
    types = types.tolist() if hasattr(types, "tolist") else list(types)
    specials = {i: tok for i, (tok, kind) in enumerate(zip(tokens, types, strict=True)) if kind == CONTROL}
    return Family(name, load_tokenizer(str(path)), specials)


@dataclass
class Chat:
    """One random chat, injected and neutral, and the request strings it holds."""

    messages: list[dict[str, Any]]
    neutral_messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    neutral_tools: list[dict[str, Any]] | None
    fields: list[str] = field(default_factory=list)  # every injected request string
    injected: int = 0  # special pieces put in


@st.composite
def _pieces(draw: st.DrawFn, strings: list[str], special: bool) -> list[tuple[str, bool]]:
    """(text, is_special) pieces of one side of a request string."""
    kinds = ["word", "filler", "special", "partial"] if special else ["word", "filler"]
    out = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(kinds))
        if kind == "word":
            out.append((draw(st.sampled_from(WORDS)), False))
        elif kind == "filler":
            out.append((draw(st.sampled_from(FILLERS)), False))
        else:
            s = draw(st.sampled_from(strings))
            if kind == "partial" and len(s) > 1:
                k = draw(st.integers(1, len(s) - 1))
                s = draw(st.sampled_from([s[:k], s[k:]]))
            out.append((s, True))
    return out


class _Builder:
    """Draws request strings: each has a canary, an injected and a neutral spelling."""

    def __init__(self, draw: st.DrawFn, strings: list[str], special: bool) -> None:
        self.draw, self.strings, self.special = draw, strings, special
        self.fields: list[str] = []
        self.injected = 0

    def text(self) -> tuple[str, str]:
        before = self.draw(_pieces(self.strings, self.special))
        after = self.draw(_pieces(self.strings, self.special))
        canary = f"qz{len(self.fields)}k"
        pieces = [*before, (canary, False), *after]
        injected = "".join(p for p, _ in pieces)
        neutral = "".join("x" if s else p for p, s in pieces)
        self.injected += sum(s for _, s in pieces)
        self.fields.append(injected)
        return injected, neutral


@st.composite
def chats(draw: st.DrawFn, strings: list[str], *, special: bool = True) -> Chat:
    """A chat in the shape every family's template takes: [system], user, [assistant call, tool
    result, assistant], user; with tools or not."""
    b = _Builder(draw, strings, special)
    both: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def message(role: str, **extra: Any) -> None:
        text, neutral = b.text()
        both.append(({"role": role, "content": text, **extra}, {"role": role, "content": neutral, **extra}))

    if draw(st.booleans()):
        message("system")
    name = b.text() if draw(st.booleans()) else None
    message("user", **({"name": name[0]} if name else {}))
    if name:  # the neutral chat's name is neutral too
        both[-1][1]["name"] = name[1]
    with_tools = draw(st.booleans())
    tools = neutral_tools = None
    if with_tools:
        tool_name, n_tool_name = b.text()
        desc, n_desc = b.text()
        prop, n_prop = b.text()
        prop_desc, n_prop_desc = b.text()
        enum, n_enum = b.text()
        value, n_value = b.text()

        def tool(name: str, desc: str, prop: str, prop_desc: str, enum: str) -> dict[str, Any]:
            return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
                "type": "object", "properties": {prop: {"type": "string", "description": prop_desc,
                                                        "enum": [enum]}}}}}

        tools = [tool(tool_name, desc, prop, prop_desc, enum)]
        neutral_tools = [tool(n_tool_name, n_desc, n_prop, n_prop_desc, n_enum)]
        call_text, n_call_text = b.text() if draw(st.booleans()) else ("", "")

        def call(name: str, prop: str, value: str, content: str) -> dict[str, Any]:
            return {"role": "assistant", "content": content, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": name, "arguments": json.dumps({prop: value}, ensure_ascii=False)}}]}

        both.append((call(tool_name, prop, value, call_text),
                     call(n_tool_name, n_prop, n_value, n_call_text)))
        message("tool", tool_call_id="call_1")
        message("assistant")
    elif draw(st.booleans()):
        message("assistant")
        message("user")
    if with_tools:
        message("user")
    return Chat([m for m, _ in both], [n for _, n in both], tools, neutral_tools, b.fields, b.injected)


def prompt_of(tokenizer: Tokenizer, messages: list[dict[str, Any]],
              tools: list[dict[str, Any]] | None) -> tuple[list[int], str]:
    """The prompt ids as the server builds them, and the plain rendered text."""
    if tools is None:
        return tokenizer.encode_chat(messages), tokenizer.apply_chat_template(messages)
    plan = plan_tools(tokenizer, tools, "auto", messages=messages, constrain_non_strict=False)
    return plan.encode_prompt(tokenizer), tokenizer.apply_chat_template(plan.messages,
                                                                         tools=plan.template_tools)


def _squash(text: str) -> str:
    # SentencePiece decoding writes a space after each special token: compare without whitespace.
    return "".join(text.split())


def forged_in_fields(family: Family, ids: list[int], fields: list[str]) -> tuple[int, int]:
    """(special tokens inside a request string's span, request strings found in the prompt).

    Spans are found in the decoded prompt (whitespace removed) from each string's verbatim,
    trimmed and JSON-escaped spellings; a special token's place is the length of the decoded
    ids before it."""
    tok = family.tokenizer
    decoded = _squash(tok.decode(ids))
    spans, found = [], 0
    for text in fields:
        hit = False
        for form in {text, text.strip(), json.dumps(text, ensure_ascii=False)[1:-1], json.dumps(text)[1:-1]}:
            form = _squash(form)
            start = decoded.find(form) if form else -1
            while start >= 0:
                spans.append((start, start + len(form)))
                hit = True
                start = decoded.find(form, start + 1)
        found += hit
    forged = 0
    for j, t in enumerate(ids):
        if t in family.specials:
            a = len(_squash(tok.decode(ids[:j])))
            b = a + len(_squash(family.specials[t]))
            forged += any(s < b and a < e for s, e in spans)
    return forged, found


def special_sequence(family: Family, ids: list[int]) -> list[int]:
    """The special tokens of a prompt, in order."""
    return [t for t in ids if t in family.specials]


def same_text(family: Family, ids: list[int], rendered: str) -> bool:
    """True when ``ids`` spell the rendered prompt (whitespace aside), BOS added or not."""
    tok = family.tokenizer
    decoded, rendered = _squash(tok.decode(ids)), _squash(rendered)
    if decoded != rendered and tok.add_bos and ids and ids[0] == tok.bos_token_id:
        return _squash(tok.decode(ids[1:])) == rendered
    return decoded == rendered
