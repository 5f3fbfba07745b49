"""The per-kind half of :class:`.negation.Negator`: the values an ``enum`` / ``const`` leaves
out, and the values of one kind (number, string, array, object) that break one of a schema's
keywords for that kind.  Each method returns the pieces of a union (``anyOf``), or None when a
piece has no positive form.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from ..patterns.pattern_lang import pattern_language, search
from ..patterns.writer import other_strings
from .value_kinds import ATOMS, ITEM_CONTAINS, all_of, contains, kind_of, num_type


class KindNegations:
    """Mixed into :class:`.negation.Negator` (which provides ``negate``, ``draft``, ``name_check``)."""

    draft: int
    name_check: Callable[[Any, str], bool | None]

    def negate(self, schema: Any, allowed: frozenset[str] = ATOMS,
               keys: frozenset[str] | None = None) -> Any | None:
        raise NotImplementedError

    # ---------------------------------------------------------------- enum / const

    def _not_values(self, values: list[Any], allowed: frozenset[str]) -> list[Any] | None:
        """Values of kinds ``allowed`` that are none of ``values``."""
        out: list[Any] = []
        kinds = {kind_of(v) for v in values}
        if "null" in allowed and "null" not in kinds:
            out.append({"type": "null"})
        if "boolean" in allowed:
            left = [b for b in (False, True) if not any(v is b for v in values)]
            if len(left) == 2:
                out.append({"type": "boolean"})
            elif left:
                out.append({"type": "boolean", "enum": [left[0]]})  # enum: draft 4 has no const
        num = num_type(allowed)
        if "nonint" in allowed and num is None:
            return None
        if num is not None:
            numbers = sorted({v for v in values if kind_of(v) == "number"})
            if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
                return None
            out.extend(self._between(numbers, num))
        if "string" in allowed:
            strings = [v for v in values if isinstance(v, str)]
            if not strings:
                out.append({"type": "string"})
            else:
                pattern = other_strings(strings)  # never empty: the listed strings are finite
                if pattern is None:
                    return None
                out.append({"type": "string", "pattern": pattern})
        for kind, build in (("array", self._not_array), ("object", self._not_object)):
            if kind in allowed:
                same = [v for v in values if kind_of(v) == kind]
                if not same:
                    out.append({"type": kind})
                    continue
                negs = [build(v) for v in same]
                if any(n is None for n in negs):
                    return None
                out.append(all_of([{"type": kind}, *negs]))
        return out

    def _between(self, numbers: list[Any], num: str) -> list[Any]:
        """Numbers other than ``numbers`` (sorted): the open intervals around them."""
        if not numbers:
            return [{"type": num}]
        out = [{"type": num, **self._bound("max", numbers[0], strict=True)}]
        for lo, hi in itertools.pairwise(numbers):
            out.append({"type": num, **self._bound("min", lo, strict=True),
                        **self._bound("max", hi, strict=True)})
        out.append({"type": num, **self._bound("min", numbers[-1], strict=True)})
        return out

    def _bound(self, side: str, value: Any, *, strict: bool) -> dict[str, Any]:
        plain, excl = ("minimum", "exclusiveMinimum") if side == "min" else ("maximum", "exclusiveMaximum")
        if not strict:
            return {plain: value}
        if 0 < self.draft <= 4:  # draft 4 spells exclusivity as a boolean beside the bound
            return {plain: value, excl: True}
        return {excl: value}

    def _not_array(self, value: list[Any]) -> Any | None:
        """Arrays other than ``value``: another length, or an item that differs."""
        n = len(value)
        out: list[Any] = [{"minItems": n + 1}]
        if n:
            out.append({"maxItems": n - 1})
        key = "items" if 0 < self.draft <= 2019 else "prefixItems"
        for i, item in enumerate(value):
            neg = self.negate({"enum": [item]})  # enum: draft 4 has no const
            if neg is None:
                return None
            out.append({"minItems": i + 1, key: [*([{}] * i), neg]})
        return {"anyOf": out}

    def _not_object(self, value: dict[str, Any]) -> Any | None:
        """Objects other than ``value``: a key missing, an extra key, or a value that differs."""
        out: list[Any] = [{"properties": {k: False}} for k in value]
        out.append({"minProperties": len(value) + 1})
        for k, v in value.items():
            neg = self.negate({"enum": [v]})
            if neg is None:
                return None
            out.append({"required": [k], "properties": {k: neg}})
        return {"anyOf": out}

    # ---------------------------------------------------------------- per kind

    def _number(self, schema: dict[str, Any], kinds: frozenset[str]) -> list[Any] | None:
        num = num_type(kinds)
        if num is None or "multipleOf" in schema:
            return None
        lo = hi = None  # (value, strict)
        for key in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
            value = schema.get(key)
            if isinstance(value, bool) or value is None:
                continue
            if key.startswith("exclusive") and 0 < self.draft <= 4:
                continue  # drafts 3-4: only a boolean beside minimum/maximum (read above) means anything
            if not isinstance(value, int | float) or not math.isfinite(value):
                return None
            if key == "minimum":
                bound = (value, schema.get("exclusiveMinimum") is True)
                lo = bound if lo is None or _tighter_lo(bound, lo) else lo
            elif key == "exclusiveMinimum":
                lo = (value, True) if lo is None or _tighter_lo((value, True), lo) else lo
            elif key == "maximum":
                bound = (value, schema.get("exclusiveMaximum") is True)
                hi = bound if hi is None or _tighter_hi(bound, hi) else hi
            else:
                hi = (value, True) if hi is None or _tighter_hi((value, True), hi) else hi
        out = []
        if lo is not None:  # below the lower bound
            out.append({"type": num, **self._bound("max", lo[0], strict=not lo[1])})
        if hi is not None:
            out.append({"type": num, **self._bound("min", hi[0], strict=not hi[1])})
        return out

    def _string(self, schema: dict[str, Any], kinds: frozenset[str]) -> list[Any] | None:
        if "format" in schema:  # asserted here (inert ones were dropped): no exact negation
            return None
        out: list[Any] = []
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        if isinstance(lo, int) and lo > 0:
            out.append({"type": "string", "maxLength": lo - 1})
        if isinstance(hi, int):
            out.append({"type": "string", "minLength": hi + 1})
        pattern = schema.get("pattern")
        if pattern is not None:
            lang = pattern_language(pattern) if isinstance(pattern, str) else None
            if lang is None:
                return None
            rest = ~lang
            if rest.is_empty() is not True:
                text = rest.to_pattern()
                if text is None:
                    return None
                out.append({"type": "string", "pattern": text})
        return out

    def _array(self, schema: dict[str, Any], kinds: frozenset[str]) -> list[Any] | None:
        if schema.get("uniqueItems") is True or set(schema) & {"minContains", "maxContains",
                                                                 "unevaluatedItems"}:
            return None  # "two items are equal", counted matches: no positive form
        out: list[Any] = []
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        if isinstance(lo, int) and lo > 0:
            out.append({"type": "array", "maxItems": lo - 1})
        if isinstance(hi, int):
            out.append({"type": "array", "minItems": hi + 1})
        tuple_key = "items" if self.draft in (3, 4, 6, 7, 2019) else "prefixItems"
        if tuple_key == "items":
            prefix = schema.get("items") if isinstance(schema.get("items"), list) else []
            rest = schema.get("additionalItems", True) if prefix else schema.get("items", True)
        else:
            prefix = schema.get("prefixItems", [])
            rest = schema.get("items", True)
        if not isinstance(prefix, list):
            return None
        for i, sub in enumerate(prefix):
            neg = self.negate(sub)
            if neg is None:
                return None
            if neg is not False:
                out.append({"type": "array", "minItems": i + 1, tuple_key: [*([{}] * i), neg]})
        if rest is False:
            out.append({"type": "array", "minItems": len(prefix) + 1})
        elif rest not in (True, {}):
            neg = self.negate(rest) if ITEM_CONTAINS.get() else None
            if neg is None or prefix:
                return None  # "some item after the tuple breaks items": no positive form
            if neg is not False:
                out.append({"type": "array", **contains(neg, self.draft)})
        if "contains" in schema:
            neg = self.negate(schema["contains"])
            if neg is None or prefix:
                return None
            out.append({"type": "array", "items": neg})
        return out

    def _object(self, schema: dict[str, Any], keys: frozenset[str] | None) -> list[Any] | None:
        """Objects breaking one of the object keywords.  "Some key breaks
        ``additionalProperties`` / ``patternProperties`` / ``propertyNames``" has a positive form
        only over a known finite set of possible ``keys``: one ``required`` per culprit."""
        out: list[Any] = []
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list):
            return None
        out.extend({"type": "object", "properties": {name: False}} for name in required)
        for name, sub in props.items():
            neg = self.negate(sub)
            if neg is None:
                return None
            if neg is not False:
                out.append({"type": "object", "required": [name], "properties": {name: neg}})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties", True)
        names = schema.get("propertyNames", True)
        if not isinstance(patterns, dict):
            return None
        lo, hi = schema.get("minProperties"), schema.get("maxProperties")
        if (keys is None and not patterns and not props and names in (True, {}) and extra not in (True, {})
                and isinstance(hi, int) and not isinstance(hi, bool) and hi <= 1):
            # At most one key (more is its own piece below): "some key breaks
            # additionalProperties" is "there is a key and every key breaks it".
            neg = self.negate(extra)
            if neg is None:
                return None
            if neg is not False:
                out.append({"type": "object", "minProperties": 1, "additionalProperties": neg})
        elif patterns or extra not in (True, {}) or names not in (True, {}):
            if keys is None:
                return None  # "some key is undeclared / breaks its pattern": no positive form
            for key in sorted(keys):
                culprits = [sub for p, sub in patterns.items() if search(p, key)]
                if key not in props and not culprits:
                    culprits.append(extra)
                if names not in (True, {}):
                    culprits.append({"const": key, "not": names})  # the name itself is the value
                for sub in culprits:
                    neg = self._key_negation(sub, key, names)
                    if neg is None:
                        return None
                    if neg is not False:
                        out.append({"type": "object", "required": [key], **neg})
        if isinstance(lo, int) and lo > 0:
            out.append({"type": "object", "maxProperties": lo - 1})
        if isinstance(hi, int):
            out.append({"type": "object", "minProperties": hi + 1})
        deps = dict(schema.get("dependentRequired", {}))
        for name, dep in (schema.get("dependencies") or {}).items():
            if isinstance(dep, list):
                deps[name] = dep
            else:
                neg = self.negate(dep, ATOMS, keys)
                if neg is None:
                    return None
                out.append({"type": "object", "required": [name], "allOf": [neg]})
        for name, dep in (schema.get("dependentSchemas") or {}).items():
            neg = self.negate(dep, ATOMS, keys)
            if neg is None:
                return None
            out.append({"type": "object", "required": [name], "allOf": [neg]})
        for name, needed in deps.items():
            if not isinstance(needed, list):
                return None
            missing = [{"properties": {n: False}} for n in needed]
            if missing:
                out.append({"type": "object", "required": [name], "anyOf": missing})
        return out

    def _key_negation(self, sub: Any, key: str, names: Any) -> dict[str, Any] | bool | None:
        """The object part of "``key`` is present and breaks ``sub``" (a name check is a
        ``{"const": key, "not": names}`` schema: true or false, decided now)."""
        if isinstance(sub, dict) and set(sub) == {"const", "not"} and sub["const"] == key:
            verdict = self.name_check(names, key)
            if verdict is None:
                return None
            return False if verdict else {}
        neg = self.negate(sub)
        if neg is None:
            return None
        return False if neg is False else {"properties": {key: neg}}


def _tighter_lo(a: tuple[Any, bool], b: tuple[Any, bool]) -> bool:
    return a[0] > b[0] or (a[0] == b[0] and a[1] and not b[1])


def _tighter_hi(a: tuple[Any, bool], b: tuple[Any, bool]) -> bool:
    return a[0] < b[0] or (a[0] == b[0] and a[1] and not b[1])
