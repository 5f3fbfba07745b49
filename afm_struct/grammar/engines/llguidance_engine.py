"""The default engine: llguidance (Earley parser over a lazy lexer; masks in ~20 µs).

One :class:`LLGuidanceEngine` per tokenizer builds grammars; a :class:`LLGuidanceGrammar` is an
immutable grammar string already checked against the tokenizer; every request gets its own
:class:`LLGuidanceMatcher`.  Compiling never raises for grammar problems: they come back as
:class:`EngineCompileError` with llguidance's message, which the ladder turns into a reason.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import llguidance
import numpy as np

from ..closer.hints import NO_HINTS, ClosingHints, grammar_hints
from ..spec import CompileOptions
from .llguidance_numbers import NumberIssue, lark_json_issues, number_issues, widen
from .protocol import EXACT_COMPILE, BatchFill, SchemaCompileOptions, buffer_address, mask_words
from .special_text import SpecialSpelling

if TYPE_CHECKING:
    from ...models.tokenizer import Tokenizer

# Parser limits bound compile work and memory (≈1–2 kB per lexer state) independently of the
# wall-clock timeout: a grammar that would blow them fails fast instead of running away.
# ``step_max_items`` (llguidance's default 50,000) bounds the Earley items of one step; an item
# of an ambiguous grammar costs ~a whole earlier row, so at 50,000 its steps kept growing under
# the limit (``start: e\ne: e e e | e e | /[a-z0-9 ]/`` on "a b c d ...": not refused after 59
# tokens and 20 s, steps up to 1 s); at 20,000 it is refused at token 17, after 1 s, its dearest
# step 0.12 s.  20,000 still computes a forced run of MAX_FORCED_RUN (10,000) characters at the
# parser level (``start: "a"{10000}``; 15,000 cuts it short); the development set's verdicts are
# the same even under 5,000 (benchmarks/hostile/README.md).  What the items do not bound
# (``e: e e e | e e | /a/`` still reaches ~0.8 s a step under them), the
# per-request grammar budget does (decoding/grammar_budget.py).
DEFAULT_LIMITS = {"max_lexer_states": 250_000, "max_grammar_size": 500_000,
                  "initial_lexer_fuel": 1_000_000, "step_lexer_fuel": 200_000,
                  "step_max_items": 20_000}


# Stop reasons of a matcher that ran out of its budgets (llguidance's StopReason names).
_OVER_LIMITS = frozenset({"LexerTooComplex", "ParserTooComplex"})
# The messages of budget hits: the lexer's ("too many expressions constructed"), the parser's:
# the Earley item budget ("Too many items (limit 50000; ff_tokens)", hit by a long run forced at
# the parser level, which stops the matcher with no stop reason of its own), and the lexer's fuel
# ("fuel exhausted when checking relevance of lexemes", "... derivatives with total fuel ...").
_LIMIT_MESSAGE = re.compile(r"too many (expressions|states|items)|too complex|exceeds max_|\bfuel\b",
                            re.IGNORECASE)

_LL_LOCK = threading.Lock()

# Where llguidance reads JSON compile options inside a schema (see compile_json_schema).
_ENGINE_OPTIONS = "x-guidance"


def ll_tokenizer_for(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of ``tokenizer`` (its token trie), built once per vocabulary (it takes
    ~1 s at 49k tokens, ~4 s at 200k) and kept in the tokenizer's derived parts."""
    def build() -> llguidance.LLTokenizer:
        backend = getattr(tokenizer.hf, "backend_tokenizer", None)
        if backend is not None and backend.padding is None and backend.truncation is None:
            # What llguidance.hf.from_tokenizer does, less its defensive copy of the Rust
            # tokenizer (a serialize + parse, ~45 % of the build) made only to switch padding
            # and truncation off: they are off already.
            return llguidance.LLTokenizer(backend.to_str(), n_vocab=int(tokenizer.vocab_size),
                                          eos_token=tokenizer.hf.eos_token_id)
        from llguidance.hf import from_tokenizer

        return from_tokenizer(tokenizer.hf, n_vocab=int(tokenizer.vocab_size))
    return tokenizer.derived.part("ll_tokenizer", "ll_tokenizer", build, shared=True)


def _single_tokens(ll: llguidance.LLTokenizer, chars: str) -> tuple[int, ...]:
    """The tokens that spell each of ``chars`` alone, where one token does (in that order)."""
    out: list[int] = []
    for char in chars:
        ids = ll.tokenize_bytes(char.encode())
        if len(ids) == 1 and ids[0] not in out:
            out.append(ids[0])
    return tuple(out)


def longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most bytes one (non-special) token spells: a text of n bytes needs at least
    n / this many tokens (the budget check's length floor, decoding/output_floor.py)."""
    def build() -> int:
        ll = ll_tokenizer_for(tokenizer)
        return max((len(ll.decode_bytes([i])) for i in range(int(tokenizer.vocab_size))
                    if not ll.is_special_token(i)), default=1) or 1
    return tokenizer.derived.part("longest_token_bytes", "longest_token_bytes", build)


_EXECUTOR: llguidance.LLExecutor | None = None


def mask_threads(cpus: int | None = None) -> int:
    """The executor's threads: twice the CPUs (at most 32).

    llguidance's executor hands its thread pool (rayon) a batch split into about as many
    pieces as it has threads, and the rows' costs are skewed (at 32 rows of real schemas the 3
    dearest rows take ~40 % of the work): with a thread per core, one core waits while the
    other works through the piece holding the dear rows.  Measured on 2 cores, 32 rows of 128k
    tokens, each mode on its own compile of the rows' schemas: 2 threads fill 1.1x as fast as
    row by row, 4 threads 1.5x, 6 and 8 no faster than 4.  (llguidance's own default, 80 % of
    the CPUs, is ONE thread on 2 cores: no faster than row by row at all.)
    """
    cpus = cpus or os.cpu_count() or 1
    return min(32, 2 * cpus)


def fill_masks_together(pairs: Sequence[tuple[llguidance.LLMatcher, int]], bitmask: np.ndarray) -> None:
    """For each ``(matcher, row)``: that row of ``bitmask`` := the matcher's next-token mask,
    all in one call.

    llguidance's executor computes them on its thread pool with the GIL released (the
    server's event loop and MLX's own threads go on meanwhile).  A matcher that fails is left
    in its error state with its row as llguidance leaves it; the call itself does not raise.
    """
    global _EXECUTOR
    if _EXECUTOR is None:
        with _LL_LOCK:
            if _EXECUTOR is None:
                _EXECUTOR = llguidance.LLExecutor(num_threads=mask_threads())
    # llguidance.numpy.fill_next_token_bitmask_par's checks, and the cheap address.
    if bitmask.dtype != np.int32 or bitmask.ndim != 2 or not bitmask.flags.c_contiguous:
        raise ValueError("the bitmask must be a C-contiguous 2-D int32 array")
    batch, words = bitmask.shape
    _EXECUTOR.unsafe_compute_mask_ptr(list(pairs), buffer_address(bitmask), words * 4, batch)


class EngineCompileError(Exception):
    """An engine refused a grammar; ``message`` is the engine's own words (internal only)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EngineNumbersError(EngineCompileError):
    """Refused before the engine saw it: numbers it crashes on or changes (engine_numbers.py).
    ``block``: the ``%json`` block of a Lark grammar holding them (None for a JSON Schema)."""

    PREFIX = "number beyond the engine"

    def __init__(self, issues: list[NumberIssue], block: int | None = None) -> None:
        super().__init__(f"{self.PREFIX}: {issues[0].message()}")
        self.issues = issues
        self.block = block


def json_options(options: CompileOptions, *, relaxed: bool = False) -> dict[str, Any]:
    """llguidance JSON compiler options for a whitespace mode (and the relaxed rung)."""
    if options.whitespace == "compact":
        ws: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}
    elif options.whitespace == "flexible":
        # Bounded: at most max_whitespace characters between tokens, never an unbounded run.
        ws = {"whitespace_flexible": True,
              "whitespace_pattern": rf"[\x20\x0A\x0D\x09]{{0,{options.max_whitespace}}}"}
    else:
        # Exactly json.dumps' separators: what MaskBench serializes and what models imitate.
        ws = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
    if relaxed:
        ws.update({"lenient": True, "coerce_one_of": True})
    return ws


class LLGuidanceMatcher:
    """Per-sequence state over one llguidance ``LLMatcher``."""

    __slots__ = ("_eos", "_fill", "_hints", "_m", "_spelling", "_words")

    def __init__(self, matcher: llguidance.LLMatcher, words: int,
                 closing_hints: ClosingHints | Callable[[], ClosingHints] = NO_HINTS,
                 spelling: SpecialSpelling | None = None, eos: int | None = None) -> None:
        self._m = matcher
        self._words = words
        self._spelling = spelling  # special ids and their plain spellings (special_text.py)
        self._eos = eos  # llguidance's own EOS id (its tokenizer's): taken only when complete
        self._fill: BatchFill | None = None  # made once, offered every step
        # The grammar's patterns (the closing search completes strings under them), or what
        # makes them: read only by the closing search, which most requests never run (reading
        # them costs ~0.2 ms a grammar at 128k, once).
        self._hints = closing_hints

    @property
    def closing_hints(self) -> ClosingHints:
        """The grammar's patterns, for the closing search (made on first use)."""
        if callable(self._hints):
            self._hints = self._hints()
        return self._hints

    def fill_mask(self, row: np.ndarray) -> None:
        """Write the allowed next tokens into ``row`` (extra words, if any, zeroed)."""
        # The engine writes self._words words through the pointer: an int32, contiguous row at
        # least that wide (checked here: llguidance's numpy helper checks the first two through
        # a 2-D view, ~1 µs of a ~10 µs mask at 128k), else a scratch row.
        if row.dtype != np.int32 or not row.flags.c_contiguous or row.shape[0] < self._words:
            scratch = np.zeros(self._words, dtype=np.int32)
            self._m.unsafe_compute_mask_ptr(buffer_address(scratch), self._words * 4)
            n = min(row.shape[0], self._words)  # a model vocabulary narrower than the tokenizer's
            row[:n] = scratch[:n]
            row[n:] = 0
            return
        self._m.unsafe_compute_mask_ptr(buffer_address(row), self._words * 4)
        if row.shape[0] > self._words:
            row[self._words:] = 0

    def batch_fill(self) -> BatchFill:
        """This matcher's row in a batch fill (:func:`fill_masks_together`)."""
        if self._fill is None:  # (not in __init__: the closing search makes ~1 µs forks)
            self._fill = BatchFill(fill_masks_together, self._m, self._words)
        return self._fill

    def advance(self, token: int) -> bool:
        """Consume ``token``; False (and stopped) if the grammar rejects it."""
        return bool(self._m.consume_token(int(token)))

    def accepts(self, tokens: list[int]) -> int:
        """How many of ``tokens`` the grammar would take from here, without taking them (a
        rejected token costs ~0.4 µs here, ~100 µs through a fork's ``advance``)."""
        return int(self._m.validate_tokens(tokens))

    def completes_with(self, tokens: list[int]) -> bool | None:
        """Whether the grammar takes all of ``tokens`` from here and is then complete (EOS may
        follow), without taking them: one ``validate_tokens`` of ``tokens`` and EOS (~15 µs),
        where a fork consuming them cost ~14 µs a token.  None when this matcher has no EOS id."""
        if self._eos is None:
            return None
        if not tokens:  # (a stopped matcher refuses EOS too: it is complete all the same)
            return self.is_accepting() or self.is_finished()
        return int(self._m.validate_tokens([*tokens, self._eos])) == len(tokens) + 1

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces next (not consumed)."""
        if self._m.is_stopped() or self._m.is_error():
            return []
        run = list(self._m.compute_ff_tokens())
        if self._spelling is not None and self._spelling.any_in(run):
            # Forced special-token text is tokenized into the special token, which the parser
            # rejects (special_text.py): the run stops before it, the mask then respells it.
            probe = self._m.deep_copy()
            for i, t in enumerate(run):
                if not probe.consume_token(t):
                    return run[:i]
        return run

    def respell(self, tokens: Sequence[int]) -> list[tuple[int, int | None]]:
        """For each special token among ``tokens`` (a mask's allowed ones) that the parser
        rejects: ``(token, plain)``, ``plain`` the first token of its text's plain spelling
        when the parser takes it, else None (see special_text.py)."""
        spelling = self._spelling
        if spelling is None or not spelling.any_in(tokens):
            return []
        out: list[tuple[int, int | None]] = []
        for token in spelling.among(tokens):
            if self._m.deep_copy().consume_token(token):
                continue
            plain = spelling.plain_first(token)
            if plain is not None and not self._m.deep_copy().consume_token(plain):
                plain = None
            out.append((token, plain))
        return out

    def dead_end(self) -> bool:
        """True when the engine stopped because no token can extend the text (the grammar's
        language is empty from here: a rule that only refers to itself, a range holding no
        multiple of ``multipleOf``)."""
        # Stopped with "NoExtensionBias" while consuming; while computing a mask the stop
        # reason is InternalError and only the message's first line says why.
        if self._m.stop_reason() == "NoExtensionBias":
            return True
        error = self.error()
        return error is not None and error.split("\n", 1)[0].strip() == "NoExtensionBias"

    def is_accepting(self) -> bool:
        """True when the text so far is complete."""
        return bool(self._m.is_accepting())

    def is_finished(self) -> bool:
        """True when only EOS may follow (a closed top-level JSON value) or after an error."""
        return bool(self._m.is_stopped() or self._m.is_error())

    def error(self) -> str | None:
        """llguidance's error message, if the matcher failed."""
        return self._m.get_error() or None if self._m.is_error() else None

    def over_limits(self) -> bool:
        """True when the matcher stopped on its lexer or parser budgets (see DEFAULT_LIMITS).

        A budget hit while consuming a token stops it with LexerTooComplex / ParserTooComplex;
        one hit while computing a mask stops it with InternalError, and only the message's
        first line ("lexer error: too many expressions constructed") says why.
        """
        if self._m.stop_reason() in _OVER_LIMITS:
            return True
        error = self.error()
        return error is not None and _LIMIT_MESSAGE.search(error.split("\n", 1)[0]) is not None

    def fork(self) -> LLGuidanceMatcher:
        """An independent copy at the same state (~1 µs): the closing search steps forks."""
        return LLGuidanceMatcher(self._m.deep_copy(), self._words, self._hints, self._spelling,
                                 self._eos)


class LLGuidanceGrammar:
    """A validated llguidance grammar bound to a tokenizer; cheap to instantiate matchers."""

    backend = "llguidance"

    def __init__(self, backend: LLGuidanceEngine, grammar: str, matcher: llguidance.LLMatcher) -> None:
        self._backend = backend
        self.grammar = grammar
        self._template = matcher  # a fresh matcher, deep-copied per request (skips re-parsing)
        self._hints: ClosingHints | None = None

    @property
    def closing_hints(self) -> ClosingHints:
        """:func:`~afm_struct.grammar.closer.hints.grammar_hints` of this grammar (once)."""
        if self._hints is None:
            self._hints = grammar_hints(self.grammar)
        return self._hints

    def _hints_once(self) -> ClosingHints:
        return self.closing_hints

    def new_matcher(self) -> LLGuidanceMatcher:
        """A fresh matcher at the start of the grammar."""
        hints = self._hints if self._hints is not None else self._hints_once
        return LLGuidanceMatcher(self._template.deep_copy(), self._backend.words, hints,
                                 self._backend.spelling, self._backend.eos)

    def takes_one_of(self, tokens: Sequence[int]) -> bool:
        """True when the grammar takes one of ``tokens`` as its first token (a fresh matcher's
        ``validate_tokens``, ~2 µs each, nothing consumed): then its first mask is not empty and
        its language not empty from the start, proved without the mask (~0.3 ms at 128k)."""
        probe = self._template.deep_copy()  # (the template stays as built, whatever happens)
        return any(probe.validate_tokens([t]) == 1 for t in tokens)


class LLGuidanceEngine:
    """llguidance bound to one tokenizer (the afm_struct ``Tokenizer`` facade)."""

    name = "llguidance"

    def __init__(self, tokenizer: Tokenizer, options: CompileOptions | None = None, *,
                 limits: dict[str, int] | None = None) -> None:
        self.vocab_size = int(tokenizer.vocab_size)
        self.words = mask_words(self.vocab_size)
        self.ll_tokenizer = ll_tokenizer_for(tokenizer)
        self.eos = int(self.ll_tokenizer.eos_token)
        self.spelling = SpecialSpelling(tokenizer, self.ll_tokenizer)
        self.limits = {**DEFAULT_LIMITS, **(limits or {})}
        options = options or CompileOptions()
        # llguidance's JSON options per rung, built once: they also go into Lark ``%json{...}``.
        self.exact_json = json_options(options)
        self.relaxed_json = json_options(options, relaxed=True)
        # The one-character tokens a JSON value can start with, most common first: a grammar
        # that takes one of them has some output (see LLGuidanceGrammar.takes_one_of).
        self.opening_tokens = _single_tokens(self.ll_tokenizer, '{["-0123456789tfn')

    def _build(self, grammar: str, released: Callable[[], None] | None = None) -> LLGuidanceGrammar:
        limits = llguidance.LLParserLimits(**self.limits)
        if released is not None:
            released()  # what follows holds no GIL: see compile_json_schema
        matcher = llguidance.LLMatcher(self.ll_tokenizer, grammar, log_level=0, limits=limits)
        if matcher.is_error():
            raise EngineCompileError(matcher.get_error())
        return LLGuidanceGrammar(self, grammar, matcher)

    def compile_json_schema(self, schema: dict[str, Any] | bool,
                            options: SchemaCompileOptions = EXACT_COMPILE, *, text: str | None = None,
                            released: Callable[[], None] | None = None) -> LLGuidanceGrammar:
        """Compile a JSON Schema (``options.timeout_s`` is the caller's to enforce: see
        :class:`~afm_struct.grammar.engines.protocol.SchemaCompileOptions`).

        ``text``: ``schema`` already serialized (any separators), not dumped again.
        ``released``: called once the rest of the compile (the matcher's build, ~90 % of it)
        runs without the GIL, so a caller waiting for that may run Python alongside.
        """
        defaults = self.relaxed_json if options.relaxed else self.exact_json
        if isinstance(schema, dict) and _ENGINE_OPTIONS in schema:
            # llguidance reads its JSON options from the schema's own "x-guidance" over the
            # ones passed here: a request could turn separators into "=" or make the engine
            # lenient (dropping what it lacks) while the compile reports it exact.  An unknown
            # keyword to JSON Schema, an annotation: dropped, the options are the server's.
            schema = {k: v for k, v in schema.items() if k != _ENGINE_OPTIONS}
            text = None
        # Numbers the engine crashes on (SIGSEGV: the whole server) or changes never reach it:
        # refused exactly, widened when relaxed (engine_numbers.py).
        issues = number_issues(schema, text)
        if issues:
            wider = widen(schema, issues) if options.relaxed else None
            if wider is None:
                raise EngineNumbersError(issues)
            schema, text = wider, None
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(
                json.dumps(schema) if text is None else text, defaults=defaults)
        except ValueError as exc:
            raise EngineCompileError(str(exc)) from exc
        return self._build(grammar, released)

    def compile_regex(self, pattern: str) -> LLGuidanceGrammar:
        """Compile a regex the whole output must match."""
        return self._build(llguidance.LLMatcher.grammar_from_regex(pattern))

    def compile_lark(self, grammar: str, released: Callable[[], None] | None = None) -> LLGuidanceGrammar:
        """Compile a Lark grammar (llguidance dialect; may embed ``%json{...}``); ``released``
        as in :meth:`compile_json_schema`.  A ``%json`` block holding numbers the engine crashes
        on or changes is refused (:class:`EngineNumbersError`) before the engine reads it."""
        found = lark_json_issues(grammar)
        if found:
            raise EngineNumbersError([issue for _, issue in found], block=found[0][0])
        return self._build(llguidance.LLMatcher.grammar_from_lark(grammar), released)
