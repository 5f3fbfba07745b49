"""Regular expressions as languages: JSON Schema ``pattern`` read, classified and rewritten.

:mod:`.pattern_lang` reads a pattern as the regular language of the strings it matches, over
:mod:`.regular` languages (complement, intersection, emptiness) built on :mod:`.automata` with
:mod:`.charsets` as the alphabet; :mod:`.writer` writes a language back as a regex both Python's
``re`` and llguidance read; :mod:`.classify` finds the patterns no token-mask engine can
enforce; :mod:`.json_escapes` writes patterns as llguidance must read them.
"""

from __future__ import annotations

from afm_struct.lazy_exports import lazy_getattr

# What the other rooms and layers may use: name -> its module.
_EXPORTS = {
    "ANYTHING": ".regular",
    "Lang": ".regular",
    "MAX_PATTERN": ".writer",
    "classify_pattern": ".classify",
    "first_irregular_pattern": ".classify",
    "guard_patterns": ".json_escapes",
    "one_of": ".regular",
    "other_strings": ".writer",
    "parse_python": ".pattern_lang",
    "pattern_language": ".pattern_lang",
    "search": ".pattern_lang",
    "string_language": ".pattern_lang",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
