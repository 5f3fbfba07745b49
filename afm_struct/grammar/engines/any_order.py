"""Objects whose properties may come in any order: JSON Schema → llguidance parametric Lark.

llguidance's JSON compiler emits and accepts an object's properties only in the schema's order
(a documented departure from JSON Schema, and 58 of the 59 valid MaskBench instances it rejects
on the dev set).  Any order with every property at most once and every required one present is a
permutation language: a plain context-free grammar for it needs a rule per subset of properties.
llguidance's *parametric* rules carry that subset as a 64-bit parameter and materialize only the
subsets a parse visits, so the grammar stays linear in the number of properties.

:func:`any_order_grammar` rewrites the object, array, ``anyOf`` and local ``$ref`` structure of a
schema into such rules and embeds every other subschema unchanged as ``%json {...}`` (same JSON
options), so nothing outside the object structure changes meaning.  Objects it cannot express
exactly (``patternProperties``, ``min/maxProperties``, applicators next to ``properties``, more
than 64 properties...) stay ``%json`` leaves, in schema order.  Extra keys allowed by
``additionalProperties`` are written without escapes (so none can spell a declared key in
disguise); everything the grammar accepts is valid against the schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..schema.keywords import keyword_types
from ..schema.merge import conjuncts, distribute, merge_all
from ..schema.paths import MISSING, resolve_pointer
from ..schema.value_kinds import contained, kind_of
from .any_order_counts import count_bounds, count_conditions, counter_width, fits, guarded
from .any_order_leaves import has_nested_ids, holds_ordered_object
from .any_order_terms import (
    SCALAR_TERMINALS,
    SCALARS,
    escape_slashes,
    extra_key_regex,
    json_literal,
    punctuation,
)
from .key_presence import FALSE, all_of, asserting, condition, is_false, json_types, presence

_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties", "patternProperties",
                          "allOf", "anyOf", "oneOf", "not", "minProperties", "maxProperties"})
_APPLICATORS = ("allOf", "anyOf", "oneOf", "not")
_ARRAY_KEYS = frozenset({"type", "items", "minItems", "maxItems"})
_MAX_PROPERTIES = 64  # bits in an llguidance rule parameter
_MAX_MERGES = 64  # conjunctions merged per grammar (recursive schemas would unfold forever)


class _Untranslatable(Exception):
    """The schema uses references this translation cannot carry into ``%json`` leaves."""


@dataclass
class _Translator:
    root: Any
    options: dict[str, Any]
    has_refs: bool = True  # False: no subschema has a $ref (no definitions to carry into leaves)
    rules: dict[str, str] = field(default_factory=dict)  # name → definition, in creation order
    terminals: dict[str, str] = field(default_factory=dict)
    by_pointer: dict[str, str] = field(default_factory=dict)
    by_leaf: dict[str, str] = field(default_factory=dict)
    reorderable: int = 0  # objects whose order the grammar frees, arrays with contains
    fixed: bool = False  # a %json leaf holds an object whose properties keep the schema's order
    merges: int = _MAX_MERGES
    by_conjunction: dict[str, str] = field(default_factory=dict)
    count: int = 0

    def new_rule(self) -> str:
        name = f"r{self.count}"
        self.count += 1
        self.rules[name] = ""  # reserved here so rules print in creation order
        return name

    def define(self, name: str, body: str) -> None:
        self.rules[name] = f"{name}{body}"

    # ---------------------------------------------------------------- dispatch

    def node(self, schema: Any) -> str:
        if isinstance(schema, dict):
            schema = contained(schema)
            keys = asserting(schema)
            ref = schema.get("$ref")
            typed_ref = keys == {"$ref", "type"} and self.ref_typed(schema)
            if isinstance(ref, str) and (keys == {"$ref"} or typed_ref):
                return self.ref(ref)
            if keys == {"anyOf"} and isinstance(schema["anyOf"], list) and schema["anyOf"]:
                branches = [b for b in schema["anyOf"] if not self.never(b)] or [False]
                name = self.new_rule()
                self.define(name, ": " + " | ".join(self.node(b) for b in branches))
                return name
            scalar = self.scalar(schema, keys)
            if scalar is not None:
                return scalar
            if self.is_plain_object(schema, keys):
                return self.object(schema)
            if self.is_plain_array(schema, keys):
                return self.array(schema)
            combined = self.conjunction(schema, keys)
            if combined is not None:
                return combined
        return self.leaf(schema)

    def conjunction(self, schema: dict[str, Any], keys: set[str]) -> str | None:
        """An ``allOf``, or a node next to its ``anyOf``, as a union of single schemas
        (:mod:`.schema_merge`) the rules can write; None: it stays a leaf."""
        if not keys & {"allOf", "anyOf"} or self.merges <= 0:
            return None
        text = json.dumps(schema, sort_keys=True, ensure_ascii=False)
        if text in self.by_conjunction:  # also how a recursive conjunction ends
            return self.by_conjunction[text]
        parts = conjuncts(self.root, schema)
        branches = distribute(self.root, parts)
        merged = merge_all(self.root, parts) if branches is None else None
        if branches is None and (merged is None or merged is True):
            return None
        self.merges -= 1
        saved = self.snapshot()
        name = self.by_conjunction[text] = self.new_rule()
        try:
            self.define(name, ": " + self.node({"anyOf": branches} if branches is not None else merged))
        except _Untranslatable:  # a reference the merged parts cannot carry: the conjunction stays a leaf
            self.restore(saved)
            return None
        return name

    def never(self, schema: Any) -> bool:
        """True for an ``anyOf`` branch no value satisfies (a merged conjunction that is
        ``false``): llguidance refuses a ``false`` leaf outright, so it is left out."""
        if schema is False:
            return True
        if not (isinstance(schema, dict) and "allOf" in schema):
            return False
        return merge_all(self.root, conjuncts(self.root, schema)) is False

    def snapshot(self) -> tuple[tuple[int, bool], dict[str, dict[str, str]]]:
        """The translation state, to undo a branch that could not be translated."""
        tables = {"rules": self.rules, "terminals": self.terminals, "by_pointer": self.by_pointer,
                  "by_leaf": self.by_leaf, "by_conjunction": self.by_conjunction}
        return (self.reorderable, self.fixed), {k: dict(v) for k, v in tables.items()}

    def restore(self, saved: tuple[tuple[int, bool], dict[str, dict[str, str]]]) -> None:
        (self.reorderable, self.fixed), tables = saved
        for key, table in tables.items():
            setattr(self, key, table)

    def ref_typed(self, schema: dict[str, Any]) -> bool:
        """``{"$ref": R, "type": T}`` means R alone when R admits no type outside T."""
        target = resolve_pointer(self.root, schema["$ref"])
        types = json_types(target) if isinstance(target, dict) else []
        return bool(types) and set(types) <= set(json_types(schema))

    def ref(self, ref: str) -> str:
        if ref in self.by_pointer:
            return self.by_pointer[ref]
        target = resolve_pointer(self.root, ref)
        if target is MISSING:
            raise _Untranslatable(ref)
        # Named before the body is built: a recursive reference finds the rule.
        name = self.by_pointer[ref] = self.new_rule()
        self.define(name, ": " + self.node(target))
        return name

    def scalar(self, schema: dict[str, Any], keys: set[str]) -> str | None:
        """Unconstrained scalars and enums of plain scalars as terminals (no nested JSON grammar)."""
        if keys == {"type"} and isinstance(schema["type"], str) and schema["type"] in SCALARS:
            terminal = SCALARS[schema["type"]]
            self.terminals[terminal] = SCALAR_TERMINALS[terminal]
            return terminal
        values = schema.get("enum") if keys - {"type"} == {"enum"} else None
        if keys - {"type"} == {"const"}:
            values = [schema["const"]]
        if values and "type" in keys:  # the type keeps the values of its types
            types = json_types(schema)
            values = [v for v in values if kind_of(v) in types or (
                "integer" in types and kind_of(v) == "number" and isinstance(v, int))]
        if (values and isinstance(values, list) and len(values) <= 256
                and all(isinstance(v, str | bool) or v is None or (isinstance(v, int) and abs(v) < 2**53)
                        for v in values)):
            literals = dict.fromkeys(json_literal(v) for v in values)
            name = self.new_rule()
            self.define(name, ": " + " | ".join(literals))
            return name
        return None

    # ---------------------------------------------------------------- objects

    def is_plain_object(self, schema: dict[str, Any], keys: set[str]) -> bool:
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if schema.get("type") == "object":
            keys = _own_keys(keys, "object")
        return (keys <= _OBJECT_KEYS and "object" in json_types(schema)
                and isinstance(props, dict) and len(props) <= _MAX_PROPERTIES
                and isinstance(required, list) and all(isinstance(r, str) for r in required)
                and len(set(required)) == len(required)
                and isinstance(schema.get("additionalProperties", True), bool | dict)
                and self.single_pattern(schema) is not False and count_bounds(schema) is not None
                and (props or required or isinstance(schema.get("additionalProperties"), dict)
                     or keys & {"patternProperties", "minProperties", "maxProperties"})
                and all(presence({k: schema[k]}, set()) is not None
                        for k in _APPLICATORS if k in schema))

    @staticmethod
    def single_pattern(schema: dict[str, Any]) -> tuple[str, Any] | bool | None:
        """The one ``patternProperties`` entry as (regex body, schema); None when absent; False
        when it cannot be expressed (several patterns, inner anchors, an invalid regex)."""
        pp = schema.get("patternProperties")
        if pp is None:
            return None
        if not isinstance(pp, dict) or len(pp) != 1:
            return False
        pattern, sub = next(iter(pp.items()))
        body = pattern[1:] if pattern.startswith("^") else ".*" + pattern
        body = body[:-1] if body.endswith("$") and not body.endswith("\\$") else body + ".*"
        if "^" in body.replace("[^", "") or "$" in body.replace("\\$", ""):
            return False
        body = escape_slashes(body)  # a bare "/" would end the Lark regex literal
        try:
            re.compile(pattern)
        except re.error:
            return False
        return body, sub

    def object(self, schema: dict[str, Any]) -> str:
        props: dict[str, Any] = schema.get("properties", {})
        required: list[str] = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        pattern = self.single_pattern(schema)
        mentioned: set[str] = set(required)
        formulas = [presence({k: schema[k]}, mentioned) for k in _APPLICATORS if k in schema]
        # A key named only by a presence formula is a property of the extras' schema.
        declared = dict(props)
        absent: set[str] = set()
        for key in sorted(mentioned - props.keys()):
            value = self.extra_schema(key, extra, pattern)
            if value is None:
                absent.add(key)
            else:
                declared[key] = value
        order = [k for k in required if k in declared] + [
            k for k in declared if k not in required and not is_false(declared[k])]
        lo, hi = count_bounds(schema) or (0, None)
        has_extras = extra is not False or isinstance(pattern, tuple)
        width = counter_width(lo, hi) if has_extras else 0
        if len(order) > _MAX_PROPERTIES or not fits(len(order), width):
            return self.leaf(schema)
        bits = {k: i for i, k in enumerate(order)}
        n_required = len([k for k in required if k in declared])
        counter = (len(order), len(order) + width) if width else None
        count_end, guard = count_conditions(n_required, len(order), counter, lo, hi)
        end_parts = [f"is_ones([0:{n_required}])"] if required else []
        if any(k in absent or is_false(declared.get(k, True)) for k in required):
            end_parts = [FALSE]
        end_parts += [condition(f, bits, absent) for f in formulas if f is not None]
        end_parts += [count_end] if count_end is not None else []
        end = f" %if {all_of(end_parts)}" if end_parts else ""
        # A required key whose schema is false keeps its bit (the object never closes) but has
        # no member: llguidance refuses a false leaf.
        values = [None if is_false(declared[k]) else self.node(self.value_schema(k, declared[k], pattern))
                  for k in order]
        if len(order) >= 2 or (order and (extra is not False or pattern)) or count_end or guard:
            self.reorderable += 1  # (llguidance's JSON compiler has no min/maxProperties)
        name = self.new_rule()
        # One member rule shared by the first and the later positions (the comma is all that
        # differs): half the rules, ~25% less llguidance build time on 12-24 properties.
        members = [f"{json_literal(k)} COLON {v} {name}_more::set_bit({i})"
                   + guarded(f"bit_clear({i})", guard if i >= n_required else None)
                   for i, (k, v) in enumerate(zip(order, values, strict=True)) if v is not None]
        extras: list[tuple[str, Any]] = []
        if isinstance(pattern, tuple):
            extras.append((self.key_terminal(name, "P", declared, pattern[0]), pattern[1]))
        if extra is not False:
            extras.append((self.key_terminal(name, "X", declared, None, exclude=pattern), extra))
        for key_terminal, sub in extras:
            step = f"incr([{counter[0]}:{counter[1]}])" if counter else "_"
            members.append(f"{key_terminal} COLON {self.node({} if sub is True else sub)} {name}_more::{step}"
                           + guarded(None, guard))
        body = f": LBRACE {name}_first::0x0 RBRACE"
        others = [t for t in json_types(schema) if t != "object"]
        # Object keywords say nothing about other types, the applicators do (a false conjunct,
        # a branch typed "object"): other types stay a JSON leaf with them; none under false.
        if others and not any(is_false(b) for b in schema.get("allOf", [])):
            body += f" | {self.leaf({'type': others, **{k: schema[k] for k in _APPLICATORS if k in schema}})}"
        self.define(name, body)
        first, more = f'{name}_first::_ : ""{end}', f'{name}_more::_ : ""{end}'
        if members:
            first += f" | {name}_item::_"
            more += f" | COMMA {name}_item::_"
        self.rules[f"{name}_first"], self.rules[f"{name}_more"] = first, more
        if members:
            self.rules[f"{name}_item"] = f"{name}_item::_ : " + "\n    | ".join(members)
        return name

    @staticmethod
    def extra_schema(key: str, extra: Any, pattern: Any) -> Any:
        """The schema an undeclared ``key`` gets (None: it cannot be present)."""
        if isinstance(pattern, tuple) and re.fullmatch(pattern[0], key):
            return pattern[1]
        return None if extra is False else extra

    @staticmethod
    def value_schema(key: str, sub: Any, pattern: Any) -> Any:
        """A declared key that also matches the pattern must satisfy both schemas."""
        if isinstance(pattern, tuple) and pattern[1] not in (True, {}) and re.fullmatch(pattern[0], key):
            return {"allOf": [sub, pattern[1]]}
        return sub

    def key_terminal(self, name: str, tag: str, declared: dict[str, Any], body: str | None, *,
                     exclude: Any = None) -> str:
        """Keys that are not declared (declared ones must not come back as extras), matching
        ``body`` when given and not matching the pattern ``exclude`` (its keys have their own).

        (:func:`.any_order_terms.extra_key_regex`)."""
        terminal = f"{tag}KEY_{name.upper()}"
        regex = extra_key_regex(list(declared), body, exclude[0] if isinstance(exclude, tuple) else None)
        self.terminals[terminal] = regex
        return terminal

    # ---------------------------------------------------------------- arrays

    @staticmethod
    def is_plain_array(schema: dict[str, Any], keys: set[str]) -> bool:
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        # A list of types with "array" in it: the other types stay a leaf beside the rule.
        keys = _own_keys(keys, "array") if schema.get("type") == "array" else keys
        if "contains" in keys:  # some item matches: unbounded arrays of at least one item only
            return (keys <= _ARRAY_KEYS | {"contains"} and schema.get("type") == "array"
                    and isinstance(schema.get("items", {}), dict | bool) and lo in (0, 1) and hi is None)
        return (keys <= _ARRAY_KEYS and "type" in schema and "array" in json_types(schema)
                and isinstance(schema.get("items"), dict)
                and isinstance(lo, int) and not isinstance(lo, bool) and lo >= 0
                and (hi is None or (isinstance(hi, int) and not isinstance(hi, bool) and hi >= max(lo, 1))))

    def array(self, schema: dict[str, Any]) -> str:
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        if "contains" in schema:
            # Items before and after one that matches both ``items`` and ``contains`` (the
            # grammar is ambiguous where several match; the language is what counts).
            item = self.node(schema.get("items", {}))
            hit = self.node({"allOf": [schema.get("items", {}), schema["contains"]]})
            name = self.new_rule()
            self.define(name, f": LBRACK ({item} COMMA)* {hit} (COMMA {item})* RBRACK")
            self.reorderable += 1  # llguidance's JSON compiler has no contains
            return name
        item = self.node(schema["items"])
        rest_lo = max(lo - 1, 0)
        rest = f"(COMMA {item}){{{rest_lo},{'' if hi is None else hi - 1}}}"
        items = f"{item} {rest}" if lo > 0 else f"({item} {rest})?"
        others = [t for t in json_types(schema) if t != "array"]
        name = self.new_rule()
        self.define(name, f": LBRACK {items} RBRACK" + (f" | {self.leaf({'type': others})}" * bool(others)))
        return name

    # ---------------------------------------------------------------- leaves

    def leaf(self, schema: Any) -> str:
        """``%json`` of the subschema with the definitions its references need and the options."""
        doc: dict[str, Any] = {"allOf": [schema]} if isinstance(schema, bool) else dict(schema)
        for container in self.containers(schema):
            if container in doc and doc[container] is not self.root.get(container):
                raise _Untranslatable(container)  # a local definitions block would be shadowed
            doc[container] = self.root[container]
        doc["x-guidance"] = self.options
        text = json.dumps(doc, ensure_ascii=False)
        if text not in self.by_leaf:
            self.fixed = self.fixed or holds_ordered_object(schema, self.root)
            name = self.by_leaf[text] = self.new_rule()
            self.define(name, ": %json " + text)
        return self.by_leaf[text]

    def containers(self, schema: Any) -> set[str]:
        """The root definition blocks ``schema`` reaches through ``$ref`` (transitively)."""
        found: set[str] = set()
        if not self.has_refs:
            return found
        seen: set[str] = set()
        stack = [schema]
        while stack:
            node = stack.pop()
            if isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref not in seen:
                    seen.add(ref)
                    head = ref.split("/")
                    if len(head) < 3 or head[0] != "#" or head[1] not in ("definitions", "$defs"):
                        raise _Untranslatable(ref)
                    target = resolve_pointer(self.root, ref)
                    if target is MISSING:
                        raise _Untranslatable(ref)
                    found.add(head[1])
                    stack.append(target)
                stack.extend(v for k, v in node.items() if k not in ("enum", "const", "default", "examples"))
        return found


def _own_keys(keys: set[str], json_type: str) -> set[str]:
    """``keys`` without those that constrain only other types (inert under ``type: json_type``)."""
    return {k for k in keys if not keyword_types(k) or json_type in keyword_types(k)}


@dataclass(frozen=True)
class AnyOrderGrammar:
    """The translation of a schema: ``text`` the Lark grammar (None: nothing to reorder, or
    references it cannot carry); ``fixed``: some object the schema admits keeps the schema's
    property order (in a ``%json`` leaf, or everywhere when ``text`` is None)."""

    text: str | None
    fixed: bool


def any_order_grammar(schema: Any, options: dict[str, Any], *, merge: bool = True) -> str | None:
    """An llguidance Lark grammar for ``schema`` whose objects take their properties in any order.

    ``options`` are the llguidance JSON options the exact rung uses (separators, whitespace); the
    result writes and accepts exactly the same JSON text per value, only the order of properties
    is free (except inside ``%json`` leaves: :attr:`AnyOrderGrammar.fixed`).  None when no object
    would gain (compile the JSON Schema as usual then) or when the schema's references cannot be
    carried into embedded leaves.  ``merge=False`` leaves every conjunction a ``%json`` leaf
    (the translation before :mod:`.schema_merge`).
    """
    return any_order_translation(schema, options, merge=merge).text


def any_order_translation(schema: Any, options: dict[str, Any], *, merge: bool = True) -> AnyOrderGrammar:
    """:func:`any_order_grammar`, and whether objects keep the schema's order somewhere."""
    if not isinstance(schema, dict):
        return AnyOrderGrammar(None, False)
    # Both walks below matter only for schemas with references (most have none); the text
    # tests are a cheap superset of what they look for.
    text = json.dumps(schema, ensure_ascii=False)
    has_refs = '"$ref"' in text
    if has_refs and 'id": "' in text and has_nested_ids(schema):
        return AnyOrderGrammar(None, holds_ordered_object(schema, schema))
    translator = _Translator(schema, {k: v for k, v in options.items() if v is not None}, has_refs=has_refs,
                             merges=_MAX_MERGES if merge else 0)
    try:
        top = translator.node(schema)
    except _Untranslatable:
        return AnyOrderGrammar(None, holds_ordered_object(schema, schema))
    if translator.reorderable == 0:
        return AnyOrderGrammar(None, translator.fixed)
    terminals = {**punctuation(options), **translator.terminals}
    return AnyOrderGrammar("\n".join([f"start: {top}", *translator.rules.values(),
                                      *(f"{name}: {body}" for name, body in terminals.items())]) + "\n",
                           translator.fixed)
