"""The alternative engine: outlines-core (schema → regex → token-level DFA index).

Masks are nearly free once the index exists, but building it can take tens of seconds and
gigabytes, so every build runs in a :class:`~afm_struct.grammar.worker.ProcessWorker` child
under ``timeout_s`` and ``max_memory_mb``; the finished ``Index`` comes back pickled.

outlines-core ignores JSON Schema keywords it does not know (and reads ``oneOf`` as
``anyOf``), so :func:`unsupported_keywords` lists what it would silently drop; the compiler
serves such schemas as ``downgraded``, never as ``enforced``.
"""

from __future__ import annotations

import json
import pickle
from typing import TYPE_CHECKING, Any

import numpy as np

from ...models.byte_level import byte_decoder
from ..schema.keywords import OUTLINES_UNENFORCED
from ..spec import CompileOptions
from ..worker import ProcessWorker, WorkerLimitError
from .llguidance_engine import EngineCompileError
from .protocol import EXACT_COMPILE, SchemaCompileOptions, mask_words

if TYPE_CHECKING:
    from ...models.tokenizer import Tokenizer

# JSON Schema assertion keywords outlines-core does not turn into regex constraints (it skips
# them silently, or reads oneOf as anyOf): the keyword table's ``outlines=False`` entries.
_UNENFORCED = OUTLINES_UNENFORCED
_FORMATS = frozenset({"date-time", "date", "time", "uuid", "uri", "email"})


def _has_recursive_ref(schema: Any) -> bool:
    """True when local ``$ref``s form a cycle (outlines-core unrolls them only 3 levels deep)."""
    def refs_in(node: Any) -> set[str]:
        out: set[str] = set()
        stack = [node]
        while stack:
            n = stack.pop()
            if isinstance(n, dict):
                ref = n.get("$ref")
                if isinstance(ref, str) and ref.startswith("#"):
                    out.add(ref[1:])
                stack.extend(v for k, v in n.items() if k not in ("enum", "const", "default", "examples"))
            elif isinstance(n, list):
                stack.extend(n)
        return out

    def target(pointer: str) -> Any:
        node = schema
        for part in [p for p in pointer.split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    edges = {p: refs_in(target(p)) for p in refs_in(schema)}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def cyclic(p: str) -> bool:
        if state.get(p) == 1:
            return True
        if state.get(p) == 2:
            return False
        state[p] = 1
        for q in edges[p]:
            if q not in edges:
                edges[q] = refs_in(target(q))
            if cyclic(q):
                return True
        state[p] = 2
        return False

    return any(cyclic(p) for p in list(edges))


def unsupported_keywords(schema: Any) -> list[str]:
    """Assertion keywords (sorted) that outlines-core would not enforce anywhere in ``schema``."""
    found: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        for key, value in node.items():
            if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(value, dict):
                stack.extend(value.values())
            elif key in ("anyOf", "allOf", "oneOf", "prefixItems") and isinstance(value, list):
                stack.extend(value)
            elif key in ("items", "additionalProperties", "not", "if", "then", "else", "contains"):
                stack.extend(value if isinstance(value, list) else [value])
            if key == "pattern" and ("minLength" in node or "maxLength" in node):
                found.add("pattern+length")  # measured: outlines keeps the lengths, drops the pattern
            elif key == "properties" and node.get("type") not in (None, "object"):
                found.add("properties_on_non_object")  # measured: outlines builds an object
            elif key == "properties" and node.get("additionalProperties") is not False:
                found.add("additionalProperties")  # measured: outlines closes open objects
            elif key == "format" and isinstance(value, str) and value not in _FORMATS:
                found.add(f"format:{value}")
            elif key in _UNENFORCED:
                found.add(key)
    if _has_recursive_ref(schema):
        found.add("recursive_ref")
    return sorted(found)


def vocabulary_bytes(tokenizer: Tokenizer) -> dict[bytes, list[int]]:
    """Token bytes → ids for outlines-core (special tokens left out: they are never text)."""
    hf = tokenizer.hf
    decoder = byte_decoder()
    special = set(getattr(hf, "all_special_ids", []) or []) | set(tokenizer.eos_token_ids)
    special |= {i for i in getattr(hf, "added_tokens_decoder", {})}
    out: dict[bytes, list[int]] = {}
    for token, idx in hf.get_vocab().items():
        if idx in special or idx >= tokenizer.vocab_size:
            continue
        if all(ch in decoder for ch in token):
            raw = bytes(decoder[ch] for ch in token)
        elif token.startswith("<0x") and token.endswith(">") and len(token) == 6:  # byte fallback
            raw = bytes([int(token[3:5], 16)])
        else:  # sentencepiece-style
            raw = token.replace("▁", " ").encode()
        out.setdefault(raw, []).append(idx)
    return out


# ---------------------------------------------------------------- runs inside the worker child

def child_init(eos: int, vocab: dict[bytes, list[int]]) -> Any:
    """Build the outlines-core Vocabulary once per child."""
    import outlines_core

    return outlines_core.Vocabulary(eos, vocab)


def child_build_index(vocabulary: Any, regex: str) -> bytes:
    """Build the Index of ``regex`` and return it pickled."""
    import outlines_core

    return pickle.dumps(outlines_core.Index(regex, vocabulary))


# ---------------------------------------------------------------- parent side

class OutlinesMatcher:
    """Per-sequence state: an outlines-core ``Guide`` walking the shared Index."""

    __slots__ = ("_eos", "_error", "_guide", "_index", "_stopped", "_words")

    def __init__(self, index: Any, eos: int, words: int) -> None:
        import outlines_core

        self._index = index
        self._guide = outlines_core.Guide(index)
        self._eos = eos
        self._words = words
        self._stopped = False
        self._error: str | None = None

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the allowed next tokens into ``row`` (extra words, if any, zeroed)."""
        if self._stopped:
            row[:] = 0
            return
        self._guide.write_mask_into(row[: self._words].ctypes.data, self._words, 4)
        row[self._words:] = 0

    def advance(self, token: int) -> bool:
        """Move along ``token``; False (and stopped) if the DFA has no such transition."""
        if self._stopped:
            return False
        state = self._guide.get_state()
        if token == self._eos or self._index.get_next_state(state, int(token)) is None:
            if token == self._eos and self._index.is_final_state(state):
                self._stopped = True
                return True
            self._error = f"token {token} not allowed"
            self._stopped = True
            return False
        self._guide.advance(int(token), return_tokens=False)
        return True

    def forced_tokens(self) -> list[int]:
        """The one token allowed next, when there is exactly one and the text is incomplete."""
        if self._stopped or self.is_accepting():
            return []
        allowed = self._index.get_allowed_tokens(self._guide.get_state()) or []
        return list(allowed) if len(allowed) == 1 and allowed[0] != self._eos else []

    def is_accepting(self) -> bool:
        """True in a final DFA state."""
        return not self._stopped and bool(self._index.is_final_state(self._guide.get_state()))

    def is_finished(self) -> bool:
        """True when only EOS may follow, or after an error / EOS."""
        if self._stopped:
            return True
        if not self.is_accepting():
            return False
        allowed = self._index.get_allowed_tokens(self._guide.get_state()) or []
        return all(t == self._eos for t in allowed)

    def error(self) -> str | None:
        """Why the matcher stopped, if it failed."""
        return self._error

    def fork(self) -> None:
        """None: an outlines-core Guide cannot be copied at its state (no set_state; replaying
        the tokens per search step would cost milliseconds), so budget-aware closing is off."""
        return None


class OutlinesGrammar:
    """An outlines-core Index bound to a tokenizer."""

    backend = "outlines"

    def __init__(self, index: Any, eos: int, words: int, regex: str) -> None:
        self._index = index
        self._eos = eos
        self._words = words
        self.regex = regex

    def new_matcher(self) -> OutlinesMatcher:
        """A fresh matcher at the initial DFA state."""
        return OutlinesMatcher(self._index, self._eos, self._words)


def whitespace_regex(options: CompileOptions) -> str:
    """outlines' whitespace pattern per mode; bounded in every mode."""
    if options.whitespace == "compact":
        return ""
    if options.whitespace == "flexible":
        return rf"[ \t\n\r]{{0,{options.max_whitespace}}}"
    return "[ ]?"  # json.dumps writes exactly one space after ',' and ':'


class OutlinesEngine:
    """outlines-core bound to one tokenizer, building indexes in a limited child process."""

    name = "outlines"

    def __init__(self, tokenizer: Tokenizer, options: CompileOptions) -> None:
        self.vocab_size = int(tokenizer.vocab_size)
        self.words = mask_words(self.vocab_size)
        self.eos = int(tokenizer.hf.eos_token_id if tokenizer.hf.eos_token_id is not None
                       else min(tokenizer.eos_token_ids))
        self.options = options
        vocab = vocabulary_bytes(tokenizer)
        self._worker = ProcessWorker((__name__, "child_init", (self.eos, vocab)),
                                     max_memory_mb=options.max_memory_mb)

    def schema_regex(self, schema: Any) -> str:
        """The regex outlines-core builds for ``schema`` (raises EngineCompileError)."""
        from outlines_core.json_schema import build_regex_from_schema

        try:
            return build_regex_from_schema(json.dumps(schema), whitespace_regex(self.options))
        except Exception as exc:  # outlines raises ValueError/TypeError for what it cannot handle
            raise EngineCompileError(str(exc)) from exc

    def _index(self, regex: str, timeout_s: float) -> OutlinesGrammar:
        try:
            blob = self._worker.call(__name__, "child_build_index", (regex,), timeout_s)
        except WorkerLimitError:
            raise
        except RuntimeError as exc:
            raise EngineCompileError(str(exc)) from exc
        return OutlinesGrammar(pickle.loads(blob), self.eos, self.words, regex)

    def compile_json_schema(self, schema: dict[str, Any] | bool,
                            options: SchemaCompileOptions = EXACT_COMPILE) -> OutlinesGrammar:
        """Compile a JSON Schema; ``options.timeout_s`` (else the configured limit) bounds the
        index build.  ``relaxed`` changes nothing: outlines-core drops what it does not know."""
        timeout_s = self.options.timeout_s if options.timeout_s is None else options.timeout_s
        return self._index(self.schema_regex(schema), timeout_s)

    def compile_regex(self, pattern: str, timeout_s: float | None = None) -> OutlinesGrammar:
        """Compile a regex the whole output must match."""
        return self._index(pattern, self.options.timeout_s if timeout_s is None else timeout_s)

    def compile_lark(self, grammar: str) -> OutlinesGrammar:
        """outlines-core has no context-free grammars."""
        raise EngineCompileError("outlines-core does not support Lark grammars")

    def close(self) -> None:
        """Stop the worker child."""
        self._worker.close()
