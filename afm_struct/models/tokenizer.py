"""The tokenizer facade the engine uses: encode, decode, chat templates, stop ids.

It wraps a Hugging Face fast tokenizer because that is what llguidance, outlines-core and
mlx-lm all accept, so one object serves the grammar engines, the generator and
``mlx_lm.generate``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..errors import InvalidRequestError

_log = logging.getLogger(__name__)

# ChatML is used only when a model ships no template at all.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_STOP_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>")


class Tokenizer:
    """Encode/decode plus the chat template and the set of end-of-turn token ids."""

    def __init__(self, hf: Any, *, eos_ids: Sequence[int] = (), add_bos: bool = False,
                 vocab_size: int | None = None) -> None:
        self.hf = hf
        self.add_bos = add_bos
        self.bos_token_id: int | None = hf.bos_token_id
        ids = set(eos_ids)
        if hf.eos_token_id is not None:
            ids.add(int(hf.eos_token_id))
        vocab = hf.get_vocab()
        ids.update(vocab[t] for t in _STOP_TEXTS if t in vocab)
        self.eos_token_ids: frozenset[int] = frozenset(ids)
        self.vocab_size = max(vocab_size or 0, len(hf))
        if not getattr(hf, "chat_template", None):
            hf.chat_template = DEFAULT_CHAT_TEMPLATE

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings in it are matched as specials."""
        ids = self.hf.encode(text, add_special_tokens=False)
        if add_special_tokens and self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` exactly as generated (no whitespace clean-up)."""
        return self.hf.decode(list(ids), skip_special_tokens=False,
                              clean_up_tokenization_spaces=False)

    def apply_chat_template(self, messages: list[dict[str, Any]], *,
                            tools: list[dict[str, Any]] | None = None,
                            add_generation_prompt: bool = True,
                            template_kwargs: dict[str, Any] | None = None) -> str:
        """The prompt text for ``messages`` rendered by the model's template.

        ``template_kwargs`` are extra template variables (the request's ``chat_template_kwargs``,
        e.g. Qwen3's ``enable_thinking``); they cannot override the arguments above.
        """
        extra = {k: v for k, v in (template_kwargs or {}).items()
                 if k not in ("messages", "tools", "add_generation_prompt", "tokenize", "conversation")}
        try:
            return self.hf.apply_chat_template(
                messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False,
                **extra)
        except Exception as exc:  # jinja errors: the template rejected these messages
            # A template's own raise_exception("...") is written for users: pass it on. Any other
            # failure (undefined attribute, a TypeError in the template) is jinja's words: log it.
            said = str(exc) if type(exc).__name__ == "TemplateError" else ""
            if not said or len(said) > 300 or "\n" in said:
                _log.warning("chat template failed on the request's messages", exc_info=exc)
                said = "the model's chat template cannot render them (check roles and content)"
            raise InvalidRequestError(f"the chat template rejected the messages: {said}",
                                      param="messages") from exc

    def encode_chat(self, messages: list[dict[str, Any]], *,
                    tools: list[dict[str, Any]] | None = None,
                    template_kwargs: dict[str, Any] | None = None) -> list[int]:
        """Prompt token ids for a chat, BOS added when the model wants one."""
        text = self.apply_chat_template(messages, tools=tools, template_kwargs=template_kwargs)
        ids = self.hf.encode(text, add_special_tokens=False)
        if self.add_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids = [self.bos_token_id, *ids]
        return ids


def from_gguf(contents: Any) -> Tokenizer:
    """The tokenizer of a GGUF file (vocab, merges, specials and template from metadata)."""
    from transformers import PreTrainedTokenizerFast

    from .gguf_tokenizer import build_tokenizer, special_ids

    tok = build_tokenizer(contents)
    ids = special_ids(contents)
    vocab = tok.get_vocab()
    inv = {v: k for k, v in vocab.items()}

    def name(i: int | None) -> str | None:
        return inv.get(i) if i is not None else None

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=name(ids["bos"]), eos_token=name(ids["eos"]),
        pad_token=name(ids["pad"]), unk_token=name(ids["unk"]), clean_up_tokenization_spaces=False)
    template = contents.meta("tokenizer.chat_template")
    if template:
        hf.chat_template = template
    add_bos = bool(contents.meta("tokenizer.ggml.add_bos_token", False))
    eos = [i for i in (ids["eos"], ids["eot"]) if i is not None]
    return Tokenizer(hf, eos_ids=eos, add_bos=add_bos, vocab_size=len(vocab))
