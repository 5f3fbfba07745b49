"""The one table of JSON Schema assertion keywords: what each engine does with it, which
rewrites can take it away, and the reason a downgrade names when none can.

Everything that used to keep its own list reads this one:

* the rewrite walker runs, on a node, the rewrites its keywords name (``rewrites``), in the
  registry's order (:mod:`.rewrites`); a rewrite no keyword names is an error at import;
* outlines-core's "would silently drop" list is the keywords with ``outlines=False``;
* llguidance's refusals map to reasons through ``engine_says`` (the words of its error) and
  ``reason`` (``unsupported_keyword:<name>`` unless said otherwise);
* ``key_presence.ASSERTIONS`` (keywords that assert anything) is the table's key set.

``llguidance`` says how the engine takes the keyword as written: ``native`` (enforced),
``partial`` (enforced in some shapes, refused in others: the error names it), ``none`` (refused:
"Unimplemented keys").  ``types`` are the JSON types the keyword constrains (empty: all).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keyword:
    """One assertion keyword."""

    name: str
    types: tuple[str, ...]
    llguidance: str
    outlines: bool
    rewrites: tuple[str, ...] = ()
    engine_says: str | None = None
    reason_name: str | None = None

    @property
    def reason(self) -> str:
        """The downgrade reason when the exact rung fails on this keyword."""
        return self.reason_name or f"unsupported_keyword:{self.name}"


_NUM = ("number",)
_STR = ("string",)
_ARR = ("array",)
_OBJ = ("object",)

TABLE: dict[str, Keyword] = {k.name: k for k in (
    Keyword("type", (), "native", True),
    Keyword("enum", (), "native", True, ("finite_values",)),
    Keyword("const", (), "native", True, ("finite_values",)),
    Keyword("multipleOf", _NUM, "native", False),
    Keyword("maximum", _NUM, "native", False),
    Keyword("exclusiveMaximum", _NUM, "native", False),
    Keyword("minimum", _NUM, "native", False),
    Keyword("exclusiveMinimum", _NUM, "native", False),
    Keyword("maxLength", _STR, "native", True),
    Keyword("minLength", _STR, "native", True),
    Keyword("pattern", _STR, "partial", True, ("regular_pattern",)),
    Keyword("format", _STR, "partial", True, ("unknown_format", "exact_format")),
    Keyword("contentEncoding", _STR, "native", True),
    Keyword("contentMediaType", _STR, "native", True),
    Keyword("contentSchema", _STR, "native", True),
    Keyword("items", _ARR, "native", True),
    Keyword("prefixItems", _ARR, "native", True),
    Keyword("additionalItems", _ARR, "native", False, ("noop_keyword",)),
    Keyword("contains", _ARR, "none", False, ("contains",)),
    Keyword("minContains", _ARR, "none", False, ("noop_keyword", "contains")),
    Keyword("maxContains", _ARR, "none", False, ("noop_keyword", "contains")),
    Keyword("maxItems", _ARR, "native", True),
    Keyword("minItems", _ARR, "native", True),
    Keyword("uniqueItems", _ARR, "none", False, ("noop_keyword", "unique_items")),
    Keyword("maxProperties", _OBJ, "partial", False, ("min_max_properties",)),
    Keyword("minProperties", _OBJ, "partial", False, ("min_max_properties",),
            engine_says="min/maxProperties"),
    Keyword("required", _OBJ, "native", True),
    Keyword("properties", _OBJ, "native", True),
    Keyword("patternProperties", _OBJ, "partial", False, ("pattern_properties",),
            engine_says="patternProperty regexes"),
    Keyword("additionalProperties", _OBJ, "native", True),
    Keyword("dependentRequired", _OBJ, "none", False, ("dependencies",)),
    Keyword("dependentSchemas", _OBJ, "none", False, ("dependencies",)),
    Keyword("dependencies", _OBJ, "none", False, ("dependencies",)),
    Keyword("propertyNames", _OBJ, "none", False, ("property_names",)),
    Keyword("unevaluatedProperties", _OBJ, "none", False),
    Keyword("unevaluatedItems", _ARR, "none", False),
    Keyword("allOf", (), "native", True, ("finite_values",)),
    Keyword("anyOf", (), "native", True),
    Keyword("oneOf", (), "partial", False, ("oneof_disjoint", "oneof_exclusive"),
            engine_says="oneOf constraints are not supported"),
    Keyword("not", (), "none", False, ("not_positive",)),
    Keyword("if", (), "none", False, ("noop_keyword", "if_then_else")),
    Keyword("then", (), "none", False, ("noop_keyword", "if_then_else")),
    Keyword("else", (), "none", False, ("noop_keyword", "if_then_else")),
    Keyword("$ref", (), "partial", True, ("ref_siblings",),
            engine_says="circular references with sibling keys", reason_name="unsupported_ref_siblings"),
    Keyword("$dynamicRef", (), "none", False),
    Keyword("$recursiveRef", (), "none", False),
)}

ASSERTIONS = frozenset(TABLE)
# Keywords some rewrite can act on: a node without any of them is left alone (most nodes).
TRIGGERS = frozenset(k.name for k in TABLE.values() if k.rewrites)
OUTLINES_UNENFORCED = frozenset(k.name for k in TABLE.values() if not k.outlines)
ENGINE_REASONS: tuple[tuple[str, str], ...] = tuple(
    (k.engine_says, k.reason) for k in TABLE.values() if k.engine_says)


def rewrites_for(keys: set[str] | frozenset[str]) -> set[str]:
    """The names of the rewrites the keywords of one node call for."""
    out: set[str] = set()
    for key in keys & TRIGGERS:
        out.update(TABLE[key].rewrites)
    return out


def keyword_types(name: str) -> tuple[str, ...]:
    """The JSON types ``name`` constrains (empty: every type; unknown keywords: none)."""
    kw = TABLE.get(name)
    return kw.types if kw is not None else ("<annotation>",)
