"""The tokenizer facade the engine uses: encode, decode, chat templates, stop ids.

It wraps a Hugging Face fast tokenizer because that is what llguidance, outlines-core and
mlx-lm all accept, so one object serves the grammar engines, the generator and
``mlx_lm.generate``.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from typing import Any

from ..errors import InvalidRequestError, ModelLoadError
from .derived import DerivedParts
from .prompt_encoder import PromptEncoder
from .token_bound import TokenBound, check_fits, token_bound
from .user_text import Located, TextMarker

_log = logging.getLogger(__name__)

# ChatML is used only when a model ships no template at all.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
_STOP_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>")
# Harmony (gpt-oss) ends each message with <|end|> and the turn with <|return|> or <|call|>: in a
# vocabulary with Harmony's channels, <|end|> closes the analysis channel, not the turn.
_HARMONY_MARK = "<|channel|>"


def _message_end(text: str, vocab: Mapping[str, int]) -> bool:
    """True when ``text`` ends a message but not the turn in this vocabulary (Harmony's <|end|>)."""
    return text == "<|end|>" and _HARMONY_MARK in vocab


# Template variables a request's chat_template_kwargs cannot set: the call's own arguments and the
# special-token strings the template writes (``bos_token``...), which belong to the model.
_RESERVED_KWARGS = frozenset({"messages", "tools", "add_generation_prompt", "tokenize", "conversation",
                              "bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                              "cls_token", "mask_token", "additional_special_tokens"})

# ``render(None)`` → (messages, tools) as the request gave them; ``render(marker)`` → the same with
# every request string passed through the marker (see :class:`~afm_struct.models.user_text.TextMarker`).
ChatRender = Callable[[TextMarker | None], tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]


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
        # Only as added tokens: Qwen's byte-level vocabulary also has "</s>" as an ordinary
        # word (id 128247), literal text a model may write, not the end of its turn.
        added = hf.get_added_vocab()
        ids.update(added[t] for t in _STOP_TEXTS if t in added and not _message_end(t, vocab))
        self.eos_token_ids: frozenset[int] = frozenset(ids)
        self.vocab_size = max(vocab_size or 0, len(hf))
        if not getattr(hf, "chat_template", None):
            hf.chat_template = DEFAULT_CHAT_TEMPLATE
        self._encoder: PromptEncoder | None = None
        self._fingerprint: str | None = None
        # What the layers above derive from this tokenizer (llguidance's tokenizer, the closing
        # vocabulary, the token table, the compilers), each built by its own layer: kept here
        # so that it is built once and freed with the tokenizer (models/derived.py).
        self.derived = DerivedParts(fingerprint=self.vocabulary_fingerprint)

    def vocabulary_fingerprint(self) -> str | None:
        """A digest of everything the vocabulary-only derived parts read (the serialized Rust
        tokenizer: vocabulary, merges, added tokens, normalizer, decoder; the sizes and end
        ids): equal for two loads of one vocabulary.  None where the tokenizer cannot be
        serialized (then nothing is shared).  ~0.2 s at 49k tokens, computed once."""
        if self._fingerprint is None:
            backend = getattr(self.hf, "backend_tokenizer", None)
            if backend is None:
                self._fingerprint = ""
            else:
                digest = hashlib.sha256(backend.to_str().encode())
                digest.update(repr((self.vocab_size, sorted(self.eos_token_ids), self.bos_token_id,
                                    self.hf.eos_token_id, self.add_bos)).encode())
                self._fingerprint = digest.hexdigest()
        return self._fingerprint or None

    def with_chat_template(self, template: str) -> Tokenizer:
        """This tokenizer under another chat template.  The vocabulary is the same object, so
        what is derived from it (:attr:`derived`: llguidance's tokenizer, the closing vocabulary,
        the compilers: seconds to build) is shared, not rebuilt; setting ``hf.chat_template``
        on the copy leaves this one as it was."""
        clone = copy.copy(self)
        clone.hf = copy.copy(self.hf)  # shares the Rust tokenizer; its own attributes
        clone.hf.chat_template = template
        clone._encoder = None
        return clone

    def encode(self, text: str, *, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; special-token strings in it are matched as specials."""
        ids = self.hf.encode(text, add_special_tokens=False)
        if add_special_tokens and self.add_bos and self.bos_token_id is not None:
            ids = [self.bos_token_id, *ids]
        return ids

    def encode_raw_prompt(self, text: str, *, context_length: int | None = None) -> list[int]:
        """Prompt token ids for a prompt written whole by the caller (text completions): no
        template, BOS added when the model wants one, and special-token strings in ``text``
        read as those tokens.  Unlike chat text, nothing here is untrusted text inside a
        template: the caller writes the turns and their control tokens itself (vLLM's rule for
        ``/v1/completions``).  ``context_length``: as in :meth:`encode_chat`."""
        if context_length is not None:
            check_fits(text, self.token_bound, context_length)
        return self.encode(text, add_special_tokens=True)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` exactly as generated (no whitespace clean-up)."""
        return self.hf.decode(list(ids), skip_special_tokens=False,
                              clean_up_tokenization_spaces=False)

    def _template_kwargs(self, template_kwargs: dict[str, Any] | None) -> dict[str, Any]:
        reserved = _RESERVED_KWARGS | set(getattr(self.hf, "special_tokens_map", None) or ())
        return {k: v for k, v in (template_kwargs or {}).items() if k not in reserved}

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                add_generation_prompt: bool, template_kwargs: dict[str, Any] | None) -> str:
        return self.hf.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False,
            **self._template_kwargs(template_kwargs))

    def apply_chat_template(self, messages: list[dict[str, Any]], *,
                            tools: list[dict[str, Any]] | None = None,
                            add_generation_prompt: bool = True,
                            template_kwargs: dict[str, Any] | None = None) -> str:
        """The prompt text for ``messages`` rendered by the model's template.

        ``template_kwargs`` are extra template variables (the request's ``chat_template_kwargs``,
        e.g. Qwen3's ``enable_thinking``); they cannot override the arguments above nor the
        special-token variables (``bos_token``, ``eos_token``...).
        """
        try:
            return self._render(messages, tools, add_generation_prompt, template_kwargs)
        except Exception as exc:  # jinja errors: the template rejected these messages
            # A template's own raise_exception("...") is written for users: pass it on. Any other
            # failure (undefined attribute, a TypeError in the template) is jinja's words: log it.
            said = str(exc) if type(exc).__name__ == "TemplateError" else ""
            if not said or len(said) > 300 or "\n" in said:
                _log.warning("chat template failed on the request's messages", exc_info=exc)
                said = "the model's chat template cannot render them (check roles and content)"
            raise InvalidRequestError(f"the chat template rejected the messages: {said}",
                                      param="messages") from exc

    @cached_property
    def token_bound(self) -> TokenBound | None:
        """A lower bound on a text's token count from its length (None: this tokenizer has none)."""
        return token_bound(self.hf)

    def encode_chat(self, messages: list[dict[str, Any]], *,
                    tools: list[dict[str, Any]] | None = None,
                    template_kwargs: dict[str, Any] | None = None,
                    context_length: int | None = None) -> list[int]:
        """Prompt token ids for a chat, BOS added when the model wants one.

        Every string of ``messages``, ``tools`` and ``template_kwargs`` is tokenized as plain text:
        special tokens come only from the template (see :meth:`encode_rendered`).  With
        ``context_length``, a prompt certainly too long for it is refused before it is tokenized
        (:class:`~afm_struct.errors.ContextOverflowError`).
        """
        chat = [_as_dict(m) for m in messages]
        tools = [_as_dict(t) for t in tools] if tools is not None else None

        def render(mark: TextMarker | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
            return (chat, tools) if mark is None else (mark.messages(chat), mark.tools(tools))

        return self.encode_rendered(render, template_kwargs=template_kwargs, context_length=context_length)

    def encode_rendered(self, render: ChatRender, *,
                        template_kwargs: dict[str, Any] | None = None,
                        context_length: int | None = None) -> list[int]:
        """Prompt token ids for the chat ``render`` builds, request text read as plain text.

        The chat is rendered as built (``render(None)``), then with the request's strings marked
        (``render(marker)``); the marked rendering says where request text lies in the prompt, and
        a special token found there is tokenized as the text it is.  A prompt in which no request
        text spells a special token keeps exactly the ids it always had.  ``context_length``: as
        in :meth:`encode_chat`.
        """
        messages, tools = render(None)
        kwargs = self._template_kwargs(template_kwargs)
        text = self.apply_chat_template(messages, tools=tools, template_kwargs=kwargs)
        if context_length is not None:  # before the request text is located and encoded
            check_fits(text, self.token_bound, context_length)
        encoder = self._prompt_encoder()
        located = self._locate_request_text(render, text, kwargs, encoder)
        ids = encoder.encode(located.text, located)
        if self.add_bos and self.bos_token_id is not None and (not ids or ids[0] != self.bos_token_id):
            ids = [self.bos_token_id, *ids]
        return ids

    def _prompt_encoder(self) -> PromptEncoder:
        if self._encoder is None:
            backend = getattr(self.hf, "backend_tokenizer", None)
            if backend is None:  # a slow tokenizer: no offsets, no plain-text reading of a span
                raise ModelLoadError("this model's tokenizer has no fast (tokenizers) backend, which "
                                     "prompts need; use a model directory with a tokenizer.json")
            self._encoder = PromptEncoder(backend)
        return self._encoder

    def _locate_request_text(self, render: ChatRender, text: str, kwargs: dict[str, Any],
                             encoder: PromptEncoder) -> Located:
        """Where the request's text lies in ``text`` (the plain rendering).

        First free text is delimited whole and special strings wrapped; a template that reacts to
        the delimiters (``startswith``, ``length``, comparisons) renders differently, and then only
        special strings are wrapped.  If the template reacts to those too, the prompt follows the
        marked rendering (safe: the request's special strings stay text), and says so in the log.
        """
        nothing = Located(text, (), ())
        if encoder.specials.pattern is None:
            return nothing
        for delimit in (True, False):
            marker = TextMarker(encoder.specials, delimit=delimit)
            messages, tools = render(marker)
            marked_kwargs = marker.value(kwargs)
            if marker.marks == 0:  # no request text to mark: the plain rendering is the prompt
                return nothing
            try:
                marked = self._render(messages, tools, True, marked_kwargs)
            except Exception as exc:
                if delimit:
                    _log.debug("the chat template rejects delimited request text", exc_info=exc)
                    continue
                _log.warning("chat template failed once special-token text was marked", exc_info=exc)
                raise _unreadable() from exc
            located = marker.locate(marked)
            if located.text == text:
                return located
            if delimit:
                _log.debug("the chat template renders delimited request text differently; "
                           "marking special-token text only")
                continue
            if marker.leftovers(located.text, text):
                raise _unreadable()
            _log.warning("the chat template renders the messages differently once their "
                         "special-token text is marked; the prompt follows the marked rendering")
            return located
        return nothing  # not reached: the second pass returns or raises


def _unreadable() -> InvalidRequestError:
    return InvalidRequestError(
        "the messages contain special-token text (such as the model's turn markers) that this "
        "model's chat template cannot render as plain text; remove it from the messages",
        param="messages")


def _as_dict(message: Any) -> Any:
    """A message or tool as a plain dict (mappings and pydantic models), as the template sees it."""
    if isinstance(message, Mapping):
        return dict(message)
    dump = getattr(message, "model_dump", None)
    return dump(exclude_none=True) if callable(dump) else message


def from_gguf(contents: Any) -> Tokenizer:
    """The tokenizer of a GGUF file (vocab, merges, specials and template from metadata)."""
    from .gguf_tokenizer import build_tokenizer, tokenizer_meta

    return from_rust_tokenizer(build_tokenizer(contents), tokenizer_meta(contents))


def from_rust_tokenizer(tok: Any, meta: Any) -> Tokenizer:
    """The facade over a ``tokenizers.Tokenizer`` rebuilt from a GGUF and its
    :class:`~afm_struct.models.gguf_tokenizer.TokenizerMeta`."""
    ids = meta.ids
    names = {k: (tok.id_to_token(i) if i is not None else None) for k, i in ids.items()}
    return gguf_facade(meta, names, tok.get_vocab_size(with_added_tokens=True), tokenizer_object=tok)


def gguf_facade(meta: Any, names: dict[str, str | None], vocab_size: int, **source: Any) -> Tokenizer:
    """The facade of a GGUF's tokenizer: ``source`` is ``tokenizer_object=`` (a
    ``tokenizers.Tokenizer``, which transformers deep-copies: serialized and parsed again) or
    ``tokenizer_file=`` (its JSON on disk, parsed once: how the disk cache reads it back);
    ``names`` the special tokens' strings by :attr:`TokenizerMeta.ids` key."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        **source, bos_token=names.get("bos"), eos_token=names.get("eos"),
        pad_token=names.get("pad"), unk_token=names.get("unk"), clean_up_tokenization_spaces=False)
    if meta.template:
        hf.chat_template = meta.template
    eos = [i for i in (meta.ids["eos"], meta.ids["eot"]) if i is not None]
    return Tokenizer(hf, eos_ids=eos, add_bos=meta.add_bos, vocab_size=vocab_size)
