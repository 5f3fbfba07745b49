"""The grammar engines behind one protocol: compile a grammar once, match it per sequence.

:mod:`.protocol` is the two-level interface the sampling loop sees (an engine per tokenizer
compiles :class:`~.protocol.CompiledGrammar`; a :class:`~.protocol.Matcher` per sequence fills
its row of the batch bitmask, advances, reports forced tokens and termination).  One file per
engine: :mod:`.llguidance_engine` (the default; with :mod:`.llguidance_numbers`, the numbers it
cannot take, and :mod:`.any_order` / :mod:`.key_presence`, the Lark it is given for objects whose
properties come in any order) and :mod:`.outlines_engine`; :mod:`.options` and
:mod:`.special_text` are what every engine's input goes through.
"""

from __future__ import annotations

from afm_struct.lazy_exports import lazy_getattr

# What the other rooms and layers may use: name -> its module.
_EXPORTS = {
    "EngineCompileError": ".llguidance_engine",
    "BatchFill": ".protocol",
    "CompiledGrammar": ".protocol",
    "EngineNumbersError": ".llguidance_engine",
    "LLGuidanceEngine": ".llguidance_engine",
    "Matcher": ".protocol",
    "MatcherError": ".protocol",
    "OutlinesEngine": ".outlines_engine",
    "RELAXED_COMPILE": ".protocol",
    "SchemaCompileOptions": ".protocol",
    "allocate_bitmask": ".protocol",
    "any_order_grammar": ".any_order",
    "asserting": ".key_presence",
    "buffer_address": ".protocol",
    "json_options": ".llguidance_engine",
    "ll_tokenizer_for": ".llguidance_engine",
    "longest_token_bytes": ".llguidance_engine",
    "mask_words": ".protocol",
    "matcher_failure": ".protocol",
    "number_issues": ".llguidance_numbers",
    "unsupported_keywords": ".outlines_engine",
    "widen": ".llguidance_numbers",
    "without_engine_options": ".options",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
