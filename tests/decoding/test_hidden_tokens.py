"""Which tokens have no text (special tokens, markup no parser of the request reads), per family."""

from __future__ import annotations

from pathlib import Path

import pytest

from afm_struct.decoding.detokenizer import StreamingDetokenizer
from afm_struct.decoding.hidden_tokens import hidden_token_ids
from afm_struct.models.loader import load_model

gguf_factory = pytest.importorskip("tests.models.gguf_factory")


def _tokenizer(name: str, tmp_path: Path):
    _, path = gguf_factory.tiny_gguf(name, tmp_path)
    return load_model(str(path)).tokenizer


def test_control_tokens_and_unread_markup_are_hidden_read_markers_kept(tmp_path: Path) -> None:
    tok = _tokenizer("mistral_args", tmp_path)
    vocab = tok.hf.get_vocab()
    hidden = hidden_token_ids(tok)
    control = ("[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]", "</s>")
    assert {vocab[t] for t in control} <= hidden
    assert vocab["a"] not in hidden
    with_tools = hidden_token_ids(tok, keep=("[TOOL_CALLS]", "[ARGS]"))
    assert vocab["[TOOL_CALLS]"] not in with_tools and vocab["[ARGS]"] not in with_tools
    assert vocab["[INST]"] in with_tools


def test_thinking_tags_are_kept_only_when_the_block_is_split(tmp_path: Path) -> None:
    tok = _tokenizer("qwen3", tmp_path)
    vocab = tok.hf.get_vocab()
    assert {vocab["<think>"], vocab["<tool_call>"], vocab["<|im_start|>"]} <= hidden_token_ids(tok)
    split = hidden_token_ids(tok, keep=("<think>", "</think>"))
    assert vocab["<think>"] not in split and vocab["</think>"] not in split and vocab["<tool_call>"] in split


def test_the_detokenizer_gives_hidden_tokens_no_text(tmp_path: Path) -> None:
    tok = _tokenizer("qwen3", tmp_path)
    ids = tok.encode("ab<|im_start|>cd")
    detok = StreamingDetokenizer(tok, hidden_token_ids(tok))
    assert "".join(detok.add(t) for t in ids) + detok.flush() == "abcd"
    plain = StreamingDetokenizer(tok)
    assert "".join(plain.add(t) for t in ids) + plain.flush() == "ab<|im_start|>cd"
