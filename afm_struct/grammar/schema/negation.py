"""``not S`` as a positive schema: the instances S rejects, in keywords llguidance enforces.

A schema is a conjunction of its keywords, and each keyword constrains one JSON type (``minimum``
numbers, ``required`` objects...) or all of them (``type``, ``enum``, the applicators).  So
``not S`` is a union: the types S excludes, plus, per type S admits, the values of that type
that break one of S's keywords for it (``minLength: 3`` → a string of at most 2 characters;
``required: [a]`` → an object without ``a``; ``properties: {a: P}`` → an object whose ``a``
breaks P).  Applicators follow De Morgan (``allOf`` ↔ ``anyOf``), ``not not X`` is X, a ``$ref``
becomes a reference to a negated definition (recursion included), and ``enum``/``const`` become
ranges, other booleans, or a pattern matching every other string (:mod:`.regular`).

What has no positive form answers None and the caller keeps the keyword: a number that is not
an integer, ``multipleOf``, ``uniqueItems``, "some item breaks ``items``", "some key is not
declared", and an asserted ``format`` (the grammar enforces some formats more strictly than the
checker: a negation of that would be looser than the truth).

The negator reads the *original* subschemas, whose meaning is the draft's (a ``format`` the draft
does not assert, ``dependencies`` after draft 7, siblings of a draft-7 ``$ref``: all inert).  The
parts it copies in positively (``not not X`` is X; two ``oneOf`` branches at once) go through
``positive``, the rewrites, since they may hold keywords llguidance lacks; rewrites may only
narrow a schema there, never widen it.

``allowed`` is the set of value kinds the caller cares about (``integer`` and ``nonint`` split
``number``): outside it the result may say anything, because the caller intersects it with its
own ``type``.  Results are built fresh; inputs are never mutated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .drafts import asserting_keywords
from .keywords import TABLE
from .negation_kinds import KindNegations
from .string_formats import rule_for
from .value_kinds import ATOMS, all_of, atoms_of, type_schema

# Keywords that constrain only values of one kind (the keyword table's ``types`` column).
_NUMBER, _STRING, _ARRAY, _OBJECT = (frozenset(k for k, v in TABLE.items() if v.types == (t,))
                                     for t in ("number", "string", "array", "object"))
_MAX_ENUM = 64


@dataclass
class Negator(KindNegations):
    """Negates subschemas of one schema; ``ref`` maps a ``$ref`` and the kinds that matter to a
    reference to its negation (the rewrite adds those definitions), or None."""

    draft: int
    ref: Callable[[str, frozenset[str], frozenset[str] | None], dict[str, Any] | None]
    positive: Callable[[Any], Any]
    name_check: Callable[[Any, str], bool | None] = lambda names, key: None
    spend: Callable[[], None] = lambda: None  # charges one visit to the rewrites' work budget
    depth: int = 0

    def negate(self, schema: Any, allowed: frozenset[str] = ATOMS,
               keys: frozenset[str] | None = None) -> Any | None:
        """A schema valid exactly where ``schema`` is not, for values of kinds ``allowed`` (and
        objects whose keys are among ``keys``, when the caller knows that finite set)."""
        if not allowed:
            return False
        if schema is True or schema == {}:
            return False
        if schema is False:
            return type_schema(allowed) if allowed != ATOMS else True
        if not isinstance(schema, dict) or self.depth > 12 or self.draft == 3:
            return None
        self.spend()
        self.depth += 1
        try:
            pieces = self._pieces(schema, allowed, keys)
        finally:
            self.depth -= 1
        if pieces is None:
            return None
        pieces = [p for p in pieces if p is not False]
        if any(p is True for p in pieces):
            return True
        if not pieces:
            return False
        return pieces[0] if len(pieces) == 1 else {"anyOf": pieces}

    # ---------------------------------------------------------------- one schema

    def _inert(self, schema: dict[str, Any]) -> set[str]:
        """Keys that constrain nothing in this draft (jsonschema's own list of what it checks)."""
        asserting = asserting_keywords(self.draft)
        out = {k for k in schema if k not in asserting}
        fmt = schema.get("format")
        if isinstance(fmt, str) and rule_for(fmt, self.draft) is None:
            out.add("format")
        return out

    def _pieces(self, schema: dict[str, Any], allowed: frozenset[str],
                keys: frozenset[str] | None) -> list[Any] | None:
        inert = self._inert(schema)
        schema = {k: v for k, v in schema.items() if k not in inert}
        present = set(schema)
        ref = schema.get("$ref")
        if isinstance(ref, str):
            target = self.ref(ref, allowed, keys)
            if target is None:
                return None
            if self.draft in (3, 4, 6, 7):  # the ref alone decides; its siblings are ignored
                return [target]
            rest = self.negate({k: v for k, v in schema.items() if k != "$ref"}, allowed, keys)
            return None if rest is None else [target, rest]
        if present - _NUMBER - _STRING - _ARRAY - _OBJECT - {
                "type", "enum", "const", "allOf", "anyOf", "oneOf", "not", "if", "then", "else"}:
            return None  # an unknown assertion ($dynamicRef, unevaluated*): not modelled
        own = atoms_of(schema) & allowed
        pieces: list[Any] = []
        excluded = allowed - own
        if excluded:
            typed = type_schema(excluded)
            if typed is None:
                return None
            pieces.append(typed)
        # const and enum are two conjuncts (both may be present): each one's negation is a
        # branch of the union (a value breaking either breaks the schema).
        for word in ("const", "enum"):
            if word not in schema:
                continue
            values = [schema["const"]] if word == "const" else schema["enum"]
            if not isinstance(values, list) or len(values) > _MAX_ENUM:
                return None
            listed = self._not_values(values, own)
            if listed is None:
                return None
            pieces.extend(listed)
        for kind, words, build in (("number", _NUMBER, self._number), ("string", _STRING, self._string),
                                   ("array", _ARRAY, self._array), ("object", _OBJECT, self._object)):
            if present & words:
                kinds = own & ({"integer", "nonint"} if kind == "number" else {kind})
                if kinds:
                    found = build(schema, kinds) if kind != "object" else self._object(schema, keys)
                    if found is None:
                        return None
                    pieces.extend(found)
        logic = self._applicators(schema, own, keys)
        if logic is None:
            return None
        return pieces + logic

    def _applicators(self, schema: dict[str, Any], allowed: frozenset[str],
                     keys: frozenset[str] | None) -> list[Any] | None:
        out: list[Any] = []
        for sub in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
            neg = self.negate(sub, allowed, keys)
            if neg is None:
                return None
            out.append(neg)
        if isinstance(schema.get("anyOf"), list):
            negs = [self.negate(sub, allowed, keys) for sub in schema["anyOf"]]
            if any(n is None for n in negs):
                return None
            out.append(all_of([*negs, type_schema(allowed) or {}]))
        if isinstance(schema.get("oneOf"), list):
            branches = schema["oneOf"]
            if len(branches) > 4:
                return None
            negs = [self.negate(sub, allowed, keys) for sub in branches]
            if any(n is None for n in negs):
                return None
            # Not exactly one: none of them, or two at once.
            out.append(all_of([*negs, type_schema(allowed) or {}]))
            out.extend({"allOf": [self.positive(a), self.positive(b)]}
                       for i, a in enumerate(branches) for b in branches[i + 1:])
        if "not" in schema:
            out.append(self.positive(schema["not"]))
        if "if" in schema and ("then" in schema or "else" in schema):
            cond = schema["if"]
            neg_cond = self.negate(cond, allowed, keys)
            neg_then = self.negate(schema.get("then", True), allowed, keys)
            neg_else = self.negate(schema.get("else", True), allowed, keys)
            if neg_cond is None or neg_then is None or neg_else is None:
                return None
            out.append(all_of([self.positive(cond), neg_then]))
            out.append(all_of([neg_cond, neg_else]))
        return out


__all__ = ["ATOMS", "Negator", "atoms_of", "type_schema"]
