"""JSON Schema analysis and rewrites: what a schema means, before any engine reads it.

Admission checks (meta-schema, ``$ref``, limits: :mod:`.check`; unsatisfiable schemas:
:mod:`.satisfiability`), the semantics-preserving rewrites that bring a schema inside the
engines' coverage (:mod:`.rewrites` and its ``rewrite_*`` parts, :mod:`.negation`,
:mod:`.merge`, :mod:`.disjoint`, :mod:`.closed_objects`), and the tables they read (keywords,
drafts, value kinds, string formats, paths, the length floor).  Needs no tokenizer and no
engine: tests/grammar/test_import_graph.py keeps it so.
"""

from __future__ import annotations

from afm_struct.lazy_exports import lazy_getattr

# What the other rooms and layers may use: name -> its module.
_EXPORTS = {
    "ASSERTIONS": ".keywords",
    "ENGINE_REASONS": ".keywords",
    "ITEM_CONTAINS": ".value_kinds",
    "MISSING": ".paths",
    "OUTLINES_UNENFORCED": ".keywords",
    "RewriteResult": ".rewrites",
    "TABLE": ".keywords",
    "asserting_keywords": ".drafts",
    "check_satisfiable": ".check",
    "find_empty": ".satisfiability",
    "check_schema": ".check",
    "close_objects": ".closed_objects",
    "conjuncts": ".merge",
    "contained": ".value_kinds",
    "distribute": ".merge",
    "format_checker": ".string_formats",
    "json_path": ".paths",
    "keyword_types": ".keywords",
    "kind_of": ".value_kinds",
    "mentioned_triggers": ".rewrites",
    "merge_all": ".merge",
    "min_json_bytes": ".min_length",
    "min_pattern_chars": ".min_length",
    "resolve_pointer": ".paths",
    "rewrite_schema": ".rewrites",
    "rule_for": ".string_formats",
    "schema_limits_reason": ".check",
    "validator_class": ".drafts",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
