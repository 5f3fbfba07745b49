"""Does our GGUF tokenizer encode like the real one?  Figures per vocabulary.

The real tokenizer is Hugging Face ``tokenizers`` on the vocabulary's ``tokenizer.json``.  Ours is
:func:`afm_struct.models.gguf_tokenizer.build_tokenizer` on a GGUF written from that file the way
llama.cpp's converter writes it (:mod:`afm_struct_bench.gguf_vocab`), driven through the engine's
:class:`~afm_struct.models.prompt_encoder.PromptEncoder` in both of its modes:

* ``special``: special-token strings read as the tokens (templates, raw completions prompts);
* ``plain``: the whole line is request text, so special tokens are read as text (the reference
  with ``encode_special_tokens``, Hugging Face's ``split_special_tokens``);
* ``plain_gguf_types``: the same, against a reference whose special flags are the GGUF's token
  types.  The converter types an added token CONTROL when it *looks* special (``<|...|>``) even
  if tokenizer.json does not flag it (Qwen3's ``<|fim_prefix|>``, ``<|file_sep|>``...): our plain
  mode then reads it as text (so request text cannot forge it, as llama.cpp with
  ``parse_special=false``) where Hugging Face keeps the token.  This mode shows that those
  tokens are the whole difference.
"""

from __future__ import annotations

import difflib
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .gguf_vocab import looks_special, vocab_gguf

MODES = ("special", "plain", "plain_gguf_types")


@dataclass
class Figures:
    """Parity figures of one vocabulary in one mode."""

    lines: int = 0
    tokens_compared: int = 0  # the reference's tokens over all lines
    mismatching_lines: int = 0
    mismatching_tokens: int = 0  # tokens outside the longest common alignment, either side
    roundtrip_failures: int = 0  # lines whose decode(encode(s)) != s with our tokenizer
    roundtrip_failures_not_nfc: int = 0  # ... and != NFC(s) (a Qwen normalizer composes marks)
    reference_roundtrip_failures: int = 0  # the same with the real tokenizer
    examples: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


@dataclass
class Pair:
    """The real tokenizer and ours for one vocabulary."""

    name: str
    reference: Any  # tokenizers.Tokenizer from tokenizer.json
    ours: Any  # PromptEncoder over our GGUF-built tokenizers.Tokenizer
    gguf: Path
    retyped: list[str]  # added tokens tokenizer.json leaves unflagged and the GGUF types CONTROL
    _typed: Any = None  # the reference with those flagged special (built when first needed)

    def reference_for(self, mode: str) -> Any:
        """The reference tokenizer set up for ``mode``."""
        if mode == "plain_gguf_types" and self.retyped:
            if self._typed is None:
                from tokenizers import AddedToken, Tokenizer

                self._typed = Tokenizer.from_str(self.reference.to_str())
                self._typed.add_special_tokens([AddedToken(t, special=True, normalized=False)
                                                for t in self.retyped])
                self._typed.encode_special_tokens = True
            return self._typed
        self.reference.encode_special_tokens = mode != "special"
        return self.reference

    def encode(self, text: str, mode: str) -> tuple[list[int], list[int]]:
        """(reference ids, our ids) of ``text`` in ``mode``."""
        from afm_struct.models.user_text import Located

        ref = self.reference_for(mode).encode(text, add_special_tokens=False).ids
        if mode == "special":
            return ref, self.ours.encode(text)
        return ref, self.ours.encode(text, Located(text, ((0, len(text)),), ()))


def load_pair(name: str, folder: Path) -> Pair:
    """The two tokenizers of vocabulary ``name`` (its npm folder; the GGUF is cached there)."""
    from tokenizers import Tokenizer

    from afm_struct.models.gguf import read_gguf
    from afm_struct.models.gguf_tokenizer import build_tokenizer
    from afm_struct.models.prompt_encoder import PromptEncoder

    reference = Tokenizer.from_file(str(folder / "tokenizer.json"))
    path = vocab_gguf(name, folder, reference)
    retyped = [t.content for t in reference.get_added_tokens_decoder().values()
               if not t.special and looks_special(t.content)]
    return Pair(name, reference, PromptEncoder(build_tokenizer(read_gguf(path))), path, retyped)


def special_strings(reference: Any) -> list[str]:
    """Every added token's string (special or not) of a ``tokenizers.Tokenizer``."""
    return [t.content for _, t in sorted(reference.get_added_tokens_decoder().items())]


def _unaligned(a: list[int], b: list[int]) -> int:
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    matched = sum(block.size for block in matcher.get_matching_blocks())
    return max(len(a), len(b)) - matched


def compare(pair: Pair, lines: list[str], mode: str, *, keep: int = 5) -> Figures:
    """Figures of ``pair`` on ``lines`` in ``mode``; the first ``keep`` mismatches as examples."""
    figures = Figures(lines=len(lines))
    ours_decode = pair.ours.backend.decode
    for text in lines:
        ref, ours = pair.encode(text, mode)
        figures.tokens_compared += len(ref)
        if ref != ours:
            figures.mismatching_lines += 1
            figures.mismatching_tokens += _unaligned(ref, ours)
            if len(figures.examples) < keep:
                figures.examples.append({"text": text, "reference": ref, "ours": ours})
        back = ours_decode(ours, skip_special_tokens=False)
        if back != text:
            figures.roundtrip_failures += 1
            figures.roundtrip_failures_not_nfc += back != unicodedata.normalize("NFC", text)
        if pair.reference_for(mode).decode(ref, skip_special_tokens=False) != text:
            figures.reference_roundtrip_failures += 1
    return figures


def vocabulary_sweep(pair: Pair, ids: list[int] | None = None) -> Figures:
    """Every normal token's own text (or those of ``ids``) encoded by both: a word in the
    vocabulary must come out as the same ids, whatever merges lead to it.  (A token that is a
    piece of a UTF-8 sequence decodes to U+FFFD: its round trip fails for both tokenizers;
    ``reference_roundtrip_failures`` is not measured here.)"""
    reference = pair.reference_for("special")
    added = reference.get_added_tokens_decoder()
    if ids is None:
        ids = list(range(reference.get_vocab_size(with_added_tokens=False)))
    texts = [reference.decode([i]) for i in ids if i not in added]
    ref = reference.encode_batch(texts, add_special_tokens=False)
    ours = pair.ours.backend.encode_batch(texts, add_special_tokens=False)
    figures = Figures(lines=len(texts))
    back = pair.ours.backend.decode_batch([o.ids for o in ours], skip_special_tokens=False)
    for text, r, o, b in zip(texts, ref, ours, back, strict=True):
        figures.tokens_compared += len(r.ids)
        figures.roundtrip_failures += b != text
        figures.roundtrip_failures_not_nfc += b != text and b != unicodedata.normalize("NFC", text)
        if r.ids != o.ids:
            figures.mismatching_lines += 1
            figures.mismatching_tokens += _unaligned(r.ids, o.ids)
            if len(figures.examples) < 5:
                figures.examples.append({"text": text, "reference": r.ids, "ours": o.ids})
    return figures


def run(name: str, folder: Path, lines: list[str]) -> dict[str, Figures]:
    """Every mode's figures for vocabulary ``name`` on ``lines``, and the vocabulary sweep."""
    pair = load_pair(name, folder)
    figures = {mode: compare(pair, lines, mode) for mode in MODES}
    figures["vocabulary"] = vocabulary_sweep(pair)
    return figures
