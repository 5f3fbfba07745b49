"""Schemas with no valid instance: found before compiling, reported as a 400 with a JSON path.

A schema that no JSON value satisfies cannot be enforced, and every rung of the ladder fails on
it in its own way: a ``$ref`` cycle with no base case gave an empty 200 or a 500 carrying the
engine's parser state, ``allOf`` of ``string`` and ``integer`` ran "downgraded" and emitted an
object.  The request is what is wrong, so it is refused with what to fix.

The analysis is conservative: it proves emptiness only for shapes it understands (a ``false``
schema, empty ``enum``, disjoint ``type`` sets across ``allOf``/``enum``/``const``, ``enum``
values none of which pass their sibling keywords (checked by jsonschema itself), inverted
bounds, a required property that is forbidden or empty, ``minItems`` with impossible items,
``oneOf`` with two branches the rest of the schema already implies, and ``$ref`` cycles where
every way through must recurse).  Anything else is assumed to have an instance and left to the
compiler.  Draft 7 and older ignore a ``$ref``'s siblings, and so does the analysis there.

llguidance's own "Unsatisfiable schema" is not taken as a proof: on the dev set it says so for
six schemas, of which two have instances (it reads ``properties`` as implying an object, and it
judges one ``anyOf`` branch eagerly).  The four really empty ones are caught here; the others
stay on the downgrade ladder with that reason.  References are solved as a least fixpoint (a definition
has an instance only if it can be built from definitions already known to have one), which is
what finds cycles without a base case, such as a tree whose ``children`` are required and
must be non-empty.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import best_match

from .drafts import validator_class
from .paths import MISSING, json_path, local_refs_resolve, may_refer, resolve_pointer

TYPES = frozenset({"null", "boolean", "object", "array", "string", "number", "integer"})
_MAX_REFS = 2000  # beyond this many distinct refs, skip the analysis (cost bound)
_MAX_VALUES = 256  # enum values checked against their siblings (cost bound)
# Keywords that say nothing about which values are valid.
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated",
                          "readOnly", "writeOnly", "$id", "id", "$schema", "$anchor"})
# Drafts where a `$ref` makes its sibling keywords ignored (2019-09 on: they all apply).
_REF_OVERRIDES = frozenset({"http://json-schema.org/draft-03/schema#",
                            "http://json-schema.org/draft-04/schema#",
                            "http://json-schema.org/draft-06/schema#",
                            "http://json-schema.org/draft-07/schema#"})


@dataclass(frozen=True)
class Empty:
    """Why a (sub)schema has no instance, and where."""

    path: list[Any]
    reason: str

    def message(self) -> str:
        """The user-facing sentence."""
        return f"the schema has no valid instance: {self.reason}"


def find_empty(schema: Any, text: str | None = None) -> Empty | None:
    """An explanation if ``schema`` provably has no instance, else None; ``text``: ``schema``
    as ``json.dumps`` wrote it, when the caller has it (no ``"$ref"`` in it: no walk for them)."""
    if schema is False:
        return Empty([], "the schema is `false`")
    if not isinstance(schema, dict):
        return None
    return _Analysis(schema, may_refer(text)).run()


def _type_of(value: Any) -> set[str]:
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        return {"number", "integer"} if value.is_integer() else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    return {"object"}


def _declared(node: dict[str, Any]) -> set[str] | None:
    t = node.get("type")
    if isinstance(t, str):
        return {t} & TYPES if t in TYPES else None
    if isinstance(t, list) and all(isinstance(x, str) for x in t):
        return set(t) & TYPES
    return None


def _names(types: set[str]) -> str:
    """``{"string", "null"}`` → ``null/string`` (messages show JSON type names, not reprs)."""
    return "/".join(sorted(types)) or "(none)"


def _sources(sources: list[tuple[int | None, set[str]]], sep: str) -> str:
    """``[(None, {"string"}), (0, {"integer"})]`` → ``type string<sep>allOf[0] type integer``."""
    return sep.join(f"type {_names(t)}" if i is None else f"allOf[{i}] type {_names(t)}"
                    for i, t in sources)


def _widen(types: set[str]) -> set[str]:
    # "integer" instances are "number" instances too.
    return types | {"integer"} if "number" in types else types


class _Analysis:
    def __init__(self, root: dict[str, Any], refers: bool = True) -> None:
        self.root = root
        self.refers = refers  # False: no $ref anywhere (nothing for _collect to find)
        self.ok: dict[str, bool] = {}  # ref -> has an instance (least fixpoint)
        self.targets: dict[str, Any] = {}
        self.gave_up = False
        try:
            self.cls: Any = validator_class(root)
        except Exception:  # a malformed "$schema": the meta-schema check reports it
            self.cls = None
        meta = getattr(self.cls, "META_SCHEMA", {}).get("$schema", "")
        self.ref_overrides = meta.rstrip("#") + "#" in _REF_OVERRIDES
        self._validator: Any = None  # built on first use (enum values against their siblings)

    def run(self) -> Empty | None:
        if self.refers:
            self._collect(self.root, 0)
        if self.gave_up:
            return None
        for ref in self.targets:
            self.ok[ref] = False
        changed = True
        while changed:  # monotone: each pass can only turn refs to True
            changed = False
            for ref, target in self.targets.items():
                if not self.ok[ref] and self._explain(target, [], set()) is None:
                    self.ok[ref] = changed = True
        return self._explain(self.root, [], set())

    def _resolve(self, ref: str) -> Any:
        target = resolve_pointer(self.root, ref)
        return None if target is MISSING else target

    def _collect(self, node: Any, depth: int) -> None:
        """Every local ``$ref`` target (non-local refs: give up, the compiler decides)."""
        stack = [node]
        while stack:
            cur = stack.pop()
            if isinstance(cur, dict):
                ref = cur.get("$ref")
                if isinstance(ref, str) and ref not in self.targets:
                    target = self._resolve(ref)
                    if target is None or len(self.targets) > _MAX_REFS:
                        self.gave_up = True
                        return
                    self.targets[ref] = target
                for key, value in cur.items():
                    if key not in ("enum", "const", "default", "examples"):
                        stack.append(value)
            elif isinstance(cur, list):
                stack.extend(cur)

    # -- the rules -------------------------------------------------------------------------

    def _explain(self, node: Any, path: list[Any], seen: set[int]) -> Empty | None:
        """Why ``node`` has no instance (given ``self.ok`` for refs), or None if it may have one.
        ``seen``: the ids of the nodes being explained above this one (a cycle through them
        proves nothing); the one set is shared down the recursion, each node in it while its
        own explanation runs (a copy per node cost ~10 % of the analysis)."""
        if node is False:
            return Empty(path, "`false` allows nothing")
        if not isinstance(node, dict) or id(node) in seen:
            return None
        seen.add(id(node))
        try:  # (in this frame, not a helper's: a frame per level would lower the depth reached)
            ref = node.get("$ref")
            if isinstance(ref, str) and not self.ok.get(ref, True):
                return Empty([*path, "$ref"], f"`$ref` {json.dumps(ref)} has no valid instance: every way "
                             "through it refers back to itself (a cycle with no base case)")
            if isinstance(ref, str) and self.ref_overrides:
                return None  # draft 7 and older ignore a $ref's siblings: the ref alone decides
            for i, sub in enumerate(node.get("allOf") or []):
                why = self._explain(sub, [*path, "allOf", i], seen)
                if why is not None:
                    return why
            for key in ("anyOf", "oneOf"):
                branches = node.get(key)
                if isinstance(branches, list):
                    found = [self._explain(b, [*path, key, i], seen) for i, b in enumerate(branches)]
                    if all(f is not None for f in found):
                        if not found:
                            return Empty([*path, key], f"`{key}` is empty")
                        return Empty([*path, key], f"no branch of `{key}` has a valid instance "
                                     f"(first: {found[0].reason} at {json_path(found[0].path)})")
            implied = _implied_branches(node)
            if len(implied) > 1:
                return Empty([*path, "oneOf"], f"`oneOf` allows exactly one matching branch, but "
                             f"branches {implied[0]} and {implied[1]} both hold for every value the "
                             "rest of the schema allows (their `required`/`type` are already implied)")
            if node.get("not") is True or node.get("not") == {}:
                return Empty([*path, "not"], "`not` of a schema that allows everything")
            return self._types(node, path, seen)
        finally:
            seen.discard(id(node))

    def _types(self, node: dict[str, Any], path: list[Any], seen: set[int]) -> Empty | None:
        allowed = set(TYPES)
        # What restricts the types, as (allOf index or None, types): worded only for a message
        # (most nodes have an instance: formatting each one's cost ~5 % of the analysis).
        sources: list[tuple[int | None, set[str]]] = []
        own = _declared(node)
        if own is not None:
            allowed &= _widen(own)
            sources.append((None, own))
        for i, sub in enumerate(node.get("allOf") or []):
            sub = self._deref(sub)
            if isinstance(sub, dict) and (declared := _declared(sub)) is not None:
                allowed &= _widen(declared)
                sources.append((i, declared))
        values = None
        if "const" in node:
            values = [node["const"]]
        elif isinstance(node.get("enum"), list):
            values = node["enum"]
            if not values:
                return Empty([*path, "enum"], "`enum` is empty")
        if values is not None:
            fitting = [v for v in values if _type_of(v) & allowed]
            if not fitting:
                key = "const" if "const" in node else "enum"
                return Empty([*path, key],
                             f"no `{key}` value has an allowed type ({_sources(sources, ', ')})")
            allowed &= set().union(*(_type_of(v) for v in fitting))
        if not allowed:
            where = [*path, "allOf"] if node.get("allOf") else [*path, "type"]
            return Empty(where, f"no value can have every required type ({_sources(sources, ' and ')})")
        if values is not None:
            # The listed values are the only candidates: one must pass the other keywords.
            return self._values(node, fitting, path)
        # Integers are numbers: where "number" is allowed, checking it covers them.
        kinds = sorted(allowed - {"integer"} if "number" in allowed else allowed)
        first = None
        for t in kinds:  # empty only if empty for every kind: the first that is not decides
            why = self._shape(node, t, path, seen)
            if why is None:
                return None
            first = first or why
        return first

    def _values(self, node: dict[str, Any], values: list[Any], path: list[Any]) -> Empty | None:
        """Why none of ``values`` (from ``enum``/``const``) passes ``node``'s other keywords.

        The check is jsonschema itself (refs resolve from the root), so it is exact; it runs only
        where it cannot misjudge: local refs, no nested ``$id``, no dynamic refs.
        """
        key = "const" if "const" in node else "enum"
        rest = {k: v for k, v in node.items() if k not in ("enum", "const", "type")}
        if not set(rest) - _ANNOTATIONS or len(values) > _MAX_VALUES or not self._can_validate():
            return None  # the type check above covered it, or the check would cost too much
        first_failure = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                check = self._validator.evolve(schema=rest)
                for value in values:
                    error = best_match(check.iter_errors(value))
                    if error is None:
                        return None
                    first_failure = first_failure or (value, error.validator)
            except Exception:  # an odd regex or keyword value: assume an instance exists
                return None
        if first_failure is None:
            return None
        value, keyword = first_failure
        shown = json.dumps(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        return Empty([*path, key], f"no `{key}` value satisfies the other keywords here "
                     f"(e.g. {shown} fails `{keyword}`)")

    def _can_validate(self) -> bool:
        if self._validator is None:
            text = json.dumps(self.root)
            if (self.cls is None or "$dynamicRef" in text or "$recursiveRef" in text
                    or not local_refs_resolve(self.root)):
                self._validator = False
            else:
                self._validator = self.cls(self.root)
        return self._validator is not False

    def _deref(self, node: Any) -> Any:
        if isinstance(node, dict) and isinstance(node.get("$ref"), str) and len(node) == 1:
            return self.targets.get(node["$ref"], node)
        return node

    def _shape(self, node: dict[str, Any], t: str, path: list[Any], seen: set[int]) -> Empty | None:
        """Why no instance of type ``t`` satisfies ``node``'s own keywords."""
        if t == "object":
            props = node.get("properties") if isinstance(node.get("properties"), dict) else {}
            extra = node.get("additionalProperties", True)
            for name in node.get("required") or []:
                if not isinstance(name, str):
                    continue
                if name in props:
                    why = self._explain(props[name], [*path, "properties", name], seen)
                    if why is not None:
                        return why
                elif extra is False and not node.get("patternProperties"):
                    return Empty([*path, "required"], f"property {json.dumps(name)} is required but "
                                 "`additionalProperties` is false and it is not in `properties`")
            lo, hi = node.get("minProperties"), node.get("maxProperties")
            if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
                return Empty([*path, "minProperties"], f"minProperties {lo} > maxProperties {hi}")
        elif t == "array":
            lo, hi = node.get("minItems", 0), node.get("maxItems")
            if isinstance(hi, int) and isinstance(lo, int) and lo > hi:
                return Empty([*path, "minItems"], f"minItems {lo} > maxItems {hi}")
            if isinstance(lo, int) and lo > 0:
                prefix = node.get("prefixItems") if isinstance(node.get("prefixItems"), list) else (
                    node.get("items") if isinstance(node.get("items"), list) else [])
                rest_key = "items" if not isinstance(node.get("items"), list) else "additionalItems"
                for i in range(min(lo, len(prefix))):
                    why = self._explain(prefix[i], [*path, "prefixItems" if "prefixItems" in node
                                                    else "items", i], seen)
                    if why is not None:
                        return why
                if lo > len(prefix) and rest_key in node:
                    why = self._explain(node[rest_key], [*path, rest_key], seen)
                    if why is not None:
                        return Empty(why.path, f"minItems {lo} needs items, but {why.reason}")
        elif t == "string":
            lo, hi = node.get("minLength", 0), node.get("maxLength")
            if isinstance(hi, int) and isinstance(lo, int) and lo > hi:
                return Empty([*path, "minLength"], f"minLength {lo} > maxLength {hi}")
        elif t in ("number", "integer"):
            return _number_bounds(node, t, path)
        return None


def _implied_branches(node: dict[str, Any]) -> list[str]:
    """``oneOf`` branches that every instance of ``node`` satisfies (by ``required``/``type``).

    A branch counts only if all its keywords are annotations, ``required`` (a subset of the
    node's own ``required``: objects have those keys, other values pass vacuously) or ``type``
    (a superset of the node's declared types).  Two such branches mean no value matches
    exactly one, so ``oneOf`` fails everywhere.
    """
    branches = node.get("oneOf")
    if not isinstance(branches, list):
        return []
    required = node.get("required")
    have = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
    declared = _declared(node)
    out = []
    for i, branch in enumerate(branches):
        if branch is True:
            out.append(f"oneOf[{i}]")
            continue
        if not isinstance(branch, dict) or set(branch) - _ANNOTATIONS - {"required", "type"}:
            continue
        needs = branch.get("required", [])
        if not (isinstance(needs, list) and all(isinstance(n, str) for n in needs) and set(needs) <= have):
            continue
        if "type" in branch:
            allows = _declared(branch)
            if allows is None or declared is None or not declared <= _widen(allows):
                continue
        out.append(f"oneOf[{i}]")
    return out


def _number_bounds(node: dict[str, Any], t: str, path: list[Any]) -> Empty | None:
    lo, hi = node.get("minimum"), node.get("maximum")
    lo_x, hi_x = node.get("exclusiveMinimum"), node.get("exclusiveMaximum")
    num = (int, float)
    strict_lo = strict_hi = False
    # Draft 4 spells exclusivity as booleans beside minimum/maximum; later drafts as numbers.
    if isinstance(lo_x, bool):
        strict_lo = lo_x
    elif isinstance(lo_x, num) and (not isinstance(lo, num) or lo_x >= lo):
        lo, strict_lo = lo_x, True
    if isinstance(hi_x, bool):
        strict_hi = hi_x
    elif isinstance(hi_x, num) and (not isinstance(hi, num) or hi_x <= hi):
        hi, strict_hi = hi_x, True
    if not (isinstance(lo, num) and isinstance(hi, num)) or isinstance(lo, bool) or isinstance(hi, bool):
        return None
    if t == "integer":
        first = math.floor(lo) + 1 if strict_lo and float(lo).is_integer() else math.ceil(lo)
        last = math.ceil(hi) - 1 if strict_hi and float(hi).is_integer() else math.floor(hi)
        if first > last:
            return Empty([*path, "minimum"], f"no integer lies between {lo} and {hi}")
        return None
    if lo > hi or (lo == hi and (strict_lo or strict_hi)):
        return Empty([*path, "minimum"], f"no number lies between {lo} and {hi}")
    return None
