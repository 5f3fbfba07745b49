"""Semantics-preserving JSON Schema rewrites that bring a schema inside llguidance's coverage.

Each rewrite maps a schema node to one with the same valid instances, built from keywords
llguidance enforces, or leaves it alone when it cannot (the ladder then downgrades, honestly).
Which rewrites a node gets is decided by its keywords through the one table in
:mod:`.keywords`; they run in :data:`REGISTRY` order, children before parents:

* ``finite_values``      ``enum``/``const`` next to keywords llguidance lacks → the listed values
  jsonschema accepts against the whole node (:mod:`.rewrite_finite`)
* ``ref_siblings``       keywords next to ``$ref`` in drafts 3–7 (ignored there) → dropped
* ``noop_keyword``       keywords that constrain nothing here (``uniqueItems: false``, lone ``if``,
  ``minContains`` without ``contains``, array keywords under ``type: string``...)
* ``unknown_format`` / ``exact_format``  see :mod:`.formats`
* ``regular_pattern``    a pattern llguidance cannot parse (lookahead after ``^``, ``$`` inside a
  group) rewritten as the same regular language
* ``dependencies``       ``dependentRequired`` / ``dependencies`` / ``dependentSchemas`` → ``anyOf``
* ``pattern_properties`` overlapping ``patternProperties`` split into disjoint regexes
* ``property_names``     ``propertyNames`` of a string schema → key patterns
* ``min_max_properties`` ``min/maxProperties`` over optional properties → ``anyOf`` by presence
* ``unique_items``       ``uniqueItems`` over a small finite item domain → the unique tuples
* ``contains``           ``contains`` / ``minContains`` / ``maxContains`` on bounded arrays
* ``not_positive``       ``not`` → its positive form (:mod:`.negation`)
* ``if_then_else``       → ``anyOf: [if ∧ then, ¬if ∧ else]``
* ``oneof_disjoint``     ``oneOf`` whose branches provably never overlap → ``anyOf``
* ``oneof_exclusive``    other ``oneOf`` → ``anyOf`` of "this branch and not the overlapping ones"

All functions are pure.  A node reached by a ``$ref`` through a keyword a rewrite removes is
left alone (the pointer would dangle otherwise).  Negations of ``$ref`` targets become new
definitions under ``$defs`` (``afm-not-N``); if one of them has no positive form, the whole
schema is rewritten again with that reference left un-negated.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..patterns import regular
from . import rewrite_finite, rewrite_logic, rewrite_objects, rewrite_values
from .drafts import draft_of, validator_class
from .keywords import TABLE, TRIGGERS, rewrites_for
from .negation import ATOMS, Negator
from .paths import MISSING, escape_pointer_part, local_refs_resolve, may_refer, resolve_pointer

log = logging.getLogger("afm_struct")

# Keywords whose value is one subschema / a map of subschemas / a list of subschemas.
_ONE = ("additionalProperties", "additionalItems", "not", "if", "then", "else", "contains",
        "propertyNames", "unevaluatedProperties", "unevaluatedItems")
_MAP = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
# The same, for readers that walk a schema as the rewrites do (the enforcement report).
SUBSCHEMA_ONE, SUBSCHEMA_MAP, SUBSCHEMA_LIST = _ONE, _MAP, _LIST
_MAX_RETRIES = 6
# Work allowed to one schema's rewrites, in subschemas visited (walked or negated), over all its
# attempts: a fixed floor plus a multiple of the schema's own size (counted only when the floor
# is spent: no extra walk for the schemas that stay under it, all of the dev set).  Negating a subschema can
# mean rewriting it again, so nested ``not``/``if``/``oneOf`` cost 2^depth visits: 28 nested
# ``not`` took 21 s of Python, 30 took 85 s, holding the GIL (the dev set's largest use is
# ~4,200 visits).  Past the budget the schema is compiled as written (the ladder downgrades
# what the engine cannot enforce, and says so).
WALK_BUDGET_FLOOR = 50_000
WALK_BUDGET_PER_NODE = 20
NEGATED_PREFIX = "afm-not-"
# Keys next to a ``$ref`` that do not change what it accepts.
_INERT_NEAR_REF = frozenset({"title", "description", "$comment", "default", "examples", "$schema",
                             "$id", "id", "definitions", "$defs", "deprecated", "readOnly", "writeOnly"})


class RewriteTooLarge(Exception):
    """The rewrites of one schema spent their work budget (:class:`WalkBudget`)."""


@dataclass
class WalkBudget:
    """Subschema visits left to one schema's rewrites (shared by the retries' contexts)."""

    left: int = field(default_factory=lambda: WALK_BUDGET_FLOOR)
    sized: bool = False  # the schema's own size was added (once the floor was spent)

    def spend(self, root: Any) -> None:
        """Charge one visit; :class:`RewriteTooLarge` once the floor and ``root``'s share are spent."""
        self.left -= 1
        if self.left >= 0:
            return
        if not self.sized:
            self.sized = True
            self.left += WALK_BUDGET_PER_NODE * _count_nodes(root)
            if self.left >= 0:
                return
        raise RewriteTooLarge


@dataclass(frozen=True)
class RewriteResult:
    """The rewritten schema and the names of the rewrites that changed something; ``sites``:
    where each fired, ``(JSON pointer of the node in the original, rewrite name)``."""

    schema: Any
    applied: tuple[str, ...]
    sites: tuple[tuple[str, str], ...] = ()


@dataclass
class RewriteContext:
    """What a rewrite may consult: the draft, the original root, the ref targets, the negator."""

    draft: int
    root: Any
    refs: set[str]
    blocked: set[str] = field(default_factory=set)
    applied: set[str] = field(default_factory=set)
    sites: list[tuple[str, str]] = field(default_factory=list)
    negated: dict[tuple[str, frozenset[str], frozenset[str] | None], str] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    negate_refs: bool = True
    path: str | None = None  # the node being rewritten (None: a copy, not part of the document)
    work: WalkBudget = field(default_factory=WalkBudget)
    negator: Negator = field(init=False)
    _validator: Any = None

    def __post_init__(self) -> None:
        self.negator = Negator(self.draft, self.negated_ref, self.positive, self.name_valid, spend=self.spend)

    def spend(self) -> None:
        """Charge one subschema visit; :class:`RewriteTooLarge` once the budget is spent."""
        self.work.spend(self.root)

    def resolve(self, ref: str) -> Any:
        """The target of a local ``$ref`` in the original schema, or None."""
        target = resolve_pointer(self.root, ref) if isinstance(ref, str) else MISSING
        return None if target is MISSING else target

    def deref(self, schema: Any) -> Any:
        """``schema`` with references followed while the reference decides alone (a bare
        ``$ref``, or any ``$ref`` in drafts 3–7)."""
        for _ in range(16):
            if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
                return schema
            if self.draft not in (3, 4, 6, 7) and set(schema) - _INERT_NEAR_REF - {"$ref"}:
                return schema
            target = self.resolve(schema["$ref"])
            if target is None:
                return schema
            schema = target
        return schema

    def closed_keys(self, schema: Any) -> frozenset[str] | None:
        """The keys an object valid against ``schema`` can have, when that set is finite."""
        schema = self.deref(schema)
        if not isinstance(schema, dict) or schema.get("additionalProperties") is not False \
                or schema.get("patternProperties"):
            return None
        props = schema.get("properties", {})
        return frozenset(k for k, v in props.items() if v is not False) if isinstance(props, dict) else None

    def validator(self) -> Any:
        """A jsonschema validator over the original schema (``evolve(schema=...)`` checks a
        subschema with its references), or None where that could misjudge."""
        if self._validator is None:
            text = json.dumps(self.root)
            try:
                simple = ("$dynamicRef" not in text and "$recursiveRef" not in text
                          and local_refs_resolve(self.root))
                self._validator = validator_class(self.root)(self.root) if simple else False
            except Exception:  # an odd $schema: the meta-schema check reports it
                self._validator = False
        return self._validator or None

    def valid(self, value: Any, schema: Any) -> bool:
        """jsonschema's verdict on ``value`` against a subschema (True when it cannot judge:
        callers use it to prove that a value is rejected)."""
        check = self.validator()
        try:
            return True if check is None else bool(check.evolve(schema=schema).is_valid(value))
        except Exception:  # an odd regex or keyword value
            return True

    def accepts(self, value: Any, schema: Any) -> bool | None:
        """jsonschema's format-asserting verdict on ``value`` against a subschema of the
        original document (its references resolved there), or None when it cannot judge."""
        check = self.validator()
        if check is None:
            return None
        try:
            return bool(check.evolve(schema=schema, format_checker=type(check).FORMAT_CHECKER)
                        .is_valid(value))
        except Exception:  # an odd regex or keyword value
            return None

    def name_valid(self, names: Any, key: str) -> bool | None:
        """Whether ``key`` passes the ``propertyNames`` schema ``names`` (None: cannot tell)."""
        check = self.validator()
        return None if check is None else bool(check.evolve(schema=names).is_valid(key))

    def negated_ref(self, ref: str, allowed: frozenset[str],
                    keys: frozenset[str] | None = None) -> dict[str, Any] | None:
        """A reference to the negation of ``ref``'s target (built after the walk), or None."""
        if (not self.negate_refs or ref in self.blocked or not ref.startswith("#")
                or resolve_pointer(self.root, ref) is MISSING):
            return None
        key = (ref, allowed, keys)
        if key not in self.negated:
            n = len(self.negated)
            while f"{NEGATED_PREFIX}{n}" in self.taken:
                n += 1
            self.negated[key] = f"{NEGATED_PREFIX}{n}"
            self.taken.add(self.negated[key])
        return {"$ref": f"#/$defs/{self.negated[key]}"}

    def positive(self, schema: Any) -> Any:
        """``schema`` (a copy of part of the original) with the rewrites applied."""
        return _walk(schema, None, self)


Rewrite = Callable[[dict[str, Any], dict[str, Any], RewriteContext], "dict[str, Any] | None"]

# name -> (function(node, original, ctx), keywords it removes: a $ref into one blocks it).
REGISTRY: dict[str, tuple[Rewrite, tuple[str, ...]]] = {
    "finite_values": (rewrite_finite.finite_values, ()),  # checks references into the node itself
    "ref_siblings": (rewrite_objects.ref_siblings, ()),
    "noop_keyword": (rewrite_values.noop, ("if", "then", "else", "additionalItems", "contains")),
    "unknown_format": (rewrite_values.unknown_format, ()),
    "exact_format": (rewrite_values.exact_format, ()),
    "regular_pattern": (rewrite_values.regular_pattern, ()),
    "dependencies": (rewrite_objects.dependencies, ("dependencies", "dependentSchemas")),
    "pattern_properties": (rewrite_objects.pattern_properties, ("patternProperties",)),
    "property_names": (rewrite_objects.property_names, ("propertyNames", "patternProperties")),
    "min_max_properties": (rewrite_objects.min_max_properties, ()),
    "unique_items": (rewrite_values.unique_items, ("items",)),
    "contains": (rewrite_values.contains, ("contains", "items")),
    "not_positive": (rewrite_logic.not_positive, ("not",)),
    "if_then_else": (rewrite_logic.if_then_else, ("if", "then", "else")),
    "oneof_disjoint": (rewrite_logic.oneof_disjoint, ("oneOf",)),
    "oneof_exclusive": (rewrite_logic.oneof_exclusive, ("oneOf",)),
}

_NAMED = {name for k in TABLE.values() for name in k.rewrites}
if _NAMED != set(REGISTRY):  # a rewrite no keyword names would never run (and vice versa)
    raise RuntimeError(f"keyword table and rewrite registry disagree: {sorted(_NAMED ^ set(REGISTRY))}")


def _ref_targets(schema: Any) -> set[str]:
    """Every local ``$ref`` pointer in ``schema`` and all its prefixes (``#/a/b`` → ``/a``,
    ``/a/b``): a rewrite at a path in this set would make some pointer dangle."""
    out: set[str] = set()
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/"):
                parts = ref[1:].split("/")
                out.update("/".join(parts[:i]) for i in range(2, len(parts) + 1))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _rewrite_node(node: dict[str, Any], original: dict[str, Any], path: str | None,
                  ctx: RewriteContext) -> Any:
    if TRIGGERS.isdisjoint(node):
        return node
    wanted = rewrites_for(node.keys())  # (asked again only when a rewrite changes the node)
    for name, (func, removes) in REGISTRY.items():
        if name not in wanted:
            continue
        if path is not None and any(f"{path}/{k}" in ctx.refs for k in removes):
            continue
        ctx.path = path
        new = func(node, original, ctx)
        if new is not None:
            ctx.applied.add(name)
            if path is not None:
                ctx.sites.append((path, name))
            if not isinstance(new, dict):  # the node admits nothing (or everything)
                return new
            node = new
            wanted = rewrites_for(node.keys())
    return node


def _walk(node: Any, path: str | None, ctx: RewriteContext) -> Any:
    if not isinstance(node, dict):
        return node
    ctx.spend()

    def sub(key: str) -> str | None:
        return None if path is None else f"{path}/{key}"

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _ONE:
            out[key] = _walk(value, sub(key), ctx)
        elif key in _MAP and isinstance(value, dict):
            out[key] = {k: _walk(v, sub(f"{key}/{escape_pointer_part(k)}"), ctx) for k, v in value.items()}
        elif key in _LIST and isinstance(value, list):
            out[key] = [_walk(v, sub(f"{key}/{i}"), ctx) for i, v in enumerate(value)]
        elif key == "items":
            out[key] = ([_walk(v, sub(f"items/{i}"), ctx) for i, v in enumerate(value)]
                        if isinstance(value, list) else _walk(value, sub(key), ctx))
        elif key == "dependencies" and isinstance(value, dict):
            out[key] = {k: _walk(v, sub(f"{key}/{escape_pointer_part(k)}"), ctx) for k, v in value.items()}
        else:  # shared, not copied: no rewrite mutates a value it did not build
            out[key] = value
    return _rewrite_node(out, node, path, ctx)


def rewrite_schema(schema: Any, text: str | None = None,
                   mentioned: frozenset[str] | None = None) -> RewriteResult:
    """Apply every rewrite bottom-up over all subschemas; ``applied`` names those that fired.

    ``text``: ``schema`` as JSON (``json.dumps``, any separators): when no keyword that triggers
    a rewrite occurs in it as a key, ``schema`` itself is returned without a walk (a third of
    the dev set's schemas; the walk copies every node).  ``mentioned``: what
    :func:`mentioned_triggers` said of ``text``, when the caller has asked it already."""
    if not isinstance(schema, dict):
        return RewriteResult(schema, ())
    if text is not None and not (_TRIGGER_KEY.search(text) if mentioned is None else mentioned):
        return RewriteResult(schema, ())
    draft, refs = draft_of(schema), (_ref_targets(schema) if may_refer(text) else set())
    taken = set(schema.get("$defs", {})) if isinstance(schema.get("$defs"), dict) else set()
    try:
        with regular.budget():
            return _rewrite(schema, draft, refs, taken, WalkBudget())
    except (RewriteTooLarge, RecursionError) as exc:
        log.warning("schema rewrites skipped (%s): the schema is compiled as written",
                    "over their work budget" if isinstance(exc, RewriteTooLarge) else "too deep")
        return RewriteResult(schema, ())


def _count_nodes(schema: Any) -> int:
    """Objects in ``schema`` (iterative: a deep schema cannot overflow the stack)."""
    count, stack = 0, [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            count += 1
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return count


def _rewrite(schema: dict[str, Any], draft: int, refs: set[str], taken: set[str],
             work: WalkBudget) -> RewriteResult:
    blocked: set[str] = set()
    for _attempt in range(_MAX_RETRIES):
        ctx = RewriteContext(draft=draft, root=schema, refs=refs, blocked=blocked, taken=set(taken),
                             work=work)
        out = _walk(schema, "", ctx)
        failed = _add_negated_definitions(out, ctx)
        if failed is None:
            return RewriteResult(out, tuple(sorted(ctx.applied)), tuple(ctx.sites))
        blocked.add(failed)
    ctx = RewriteContext(draft=draft, root=schema, refs=refs, taken=set(taken), negate_refs=False, work=work)
    out = _walk(schema, "", ctx)
    return RewriteResult(out, tuple(sorted(ctx.applied)), tuple(ctx.sites))


# A triggering keyword as an object key in JSON text: ``json.dumps`` writes every key as
# ``"key"`` then ``:`` (any spacing), and these ASCII names unescaped.
_TRIGGER_KEY = re.compile(r'"(' + "|".join(re.escape(k) for k in sorted(TRIGGERS, key=len, reverse=True))
                          + r')"\s*:')


def mentioned_triggers(text: str) -> frozenset[str]:
    """The keywords that trigger a rewrite and occur as keys in the JSON ``text`` (a string
    followed by a colon inside a string counts too: a harmless false positive, the walk decides)."""
    return frozenset(_TRIGGER_KEY.findall(text))


def _add_negated_definitions(out: dict[str, Any], ctx: RewriteContext) -> str | None:
    """Build the negated definitions the walk referred to (in place, into ``out["$defs"]``);
    the first reference without a positive negation, if any (the caller retries without it)."""
    if not ctx.negated:
        return None
    if "$defs" in out and not isinstance(out["$defs"], dict):
        return next(iter(ctx.negated))[0]
    defs: dict[str, Any] = {}
    done: set[tuple[str, frozenset[str], frozenset[str] | None]] = set()
    while len(done) < len(ctx.negated):
        key = next(k for k in ctx.negated if k not in done)
        done.add(key)
        ref, allowed, keys = key
        negated = ctx.negator.negate(resolve_pointer(ctx.root, ref), allowed, keys)
        if negated is None:
            return ref
        defs[ctx.negated[key]] = negated
    out["$defs"] = {**out.get("$defs", {}), **defs}
    return None


def canonical_json(value: Any) -> str:
    """Sorted-key, compact JSON: one spelling per schema (cache keys, equality in tests)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


__all__ = ["ATOMS", "REGISTRY", "RewriteContext", "RewriteResult", "canonical_json", "mentioned_triggers",
           "rewrite_schema"]
