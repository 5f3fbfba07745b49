"""Hypothesis strategies for object schemas and instances around them, for the any-order tests.

Drawn from what an object grammar must get right, not from any data set: required and optional
properties, ``additionalProperties`` (absent, false, a schema), ``patternProperties``,
``propertyNames``, ``dependentRequired`` / ``dependentSchemas`` / ``dependencies``,
``min/maxProperties``, nested ``anyOf`` / ``oneOf`` / ``allOf`` of objects, ``$ref`` (recursive
too), ``if`` / ``then`` / ``else``, ``unevaluatedProperties``; property names that are prefixes
of each other or need escaping in JSON.

Instances: :func:`sample` builds one meant to be valid (required keys, declared keys with values
their schemas take, keys a pattern matches) and :func:`mutate` breaks one a little (a key
dropped or added, a value swapped); jsonschema says which are valid.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

DRAFT_2020 = "https://json-schema.org/draft/2020-12/schema"
DRAFT_7 = "http://json-schema.org/draft-07/schema#"
# Prefixes of each other, names JSON escapes ("q\"", "s\\", a newline), non-ASCII, the empty name.
NAMES = ["a", "ab", "abc", "b", "ba", "x-1", "x-", 'q"', "s\\", "n\nl", "é", "", "a b"]
PATTERNS = ["^a", "b$", "^x-", "^[ab]+$", "c", "^.$", "^[^a]"]
# Values with samples they accept (the first one: the value written by default).
VALUES: list[tuple[Any, list[Any]]] = [
    ({"type": "integer"}, [0, 3]),
    ({"type": "string", "maxLength": 2}, ["", "ab"]),
    ({"enum": ["x", 1, None]}, ["x", 1, None]),
    ({"const": True}, [True]),
    ({}, [0, "z", {"k": 1}]),
    ({"type": ["string", "null"]}, [None, "s"]),
    ({"type": "array", "items": {"type": "integer"}, "maxItems": 2}, [[], [1]]),
    ({"type": "number", "minimum": 1}, [1, 2.5]),
    (False, []),
]
POOL: list[Any] = [0, 3, -1, 1.5, "", "ab", "abc", "x", None, True, False, [], [1], ["a"], {}, {"a": 1}]
FEATURES = ["additionalProperties", "patternProperties", "propertyNames", "dependentRequired",
            "dependentSchemas", "minProperties", "maxProperties", "anyOf", "oneOf", "allOf", "$ref",
            "if", "unevaluatedProperties", "nullable"]


@st.composite
def value_schema(draw: Any, depth: int) -> Any:
    """A property's schema: a small value schema, or (shallow) an object schema."""
    if depth < 1 and draw(st.integers(0, 4)) == 0:
        return draw(object_schema(depth + 1))
    return draw(st.sampled_from(VALUES))[0]


@st.composite
def object_schema(draw: Any, depth: int = 0) -> dict[str, Any]:
    """An object schema with a few of :data:`FEATURES` (fewer deeper down)."""
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    node: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        node["type"] = "object"
    if names or draw(st.booleans()):
        node["properties"] = {n: draw(value_schema(depth)) for n in names}
    required = draw(st.lists(st.sampled_from(names + NAMES[:4]), max_size=3, unique=True))
    if required:
        node["required"] = required
    # References point into the root's definitions: only the root adds them.
    menu = FEATURES if depth == 0 else [f for f in FEATURES if f != "$ref"]
    features = draw(st.sets(st.sampled_from(menu), max_size=3 if depth == 0 else 1))
    for feature in sorted(features):
        _add(draw, node, feature, names, depth)
    return node


def _add(draw: Any, node: dict[str, Any], feature: str, names: list[str], depth: int) -> None:
    some_names = st.lists(st.sampled_from(names + NAMES[:4]), min_size=1, max_size=2, unique=True)
    small = st.one_of(st.sampled_from([False, {"type": "integer"}, {"type": "string"}, True, {}]),
                      st.builds(dict))
    if feature == "additionalProperties":
        node[feature] = draw(small)
    elif feature == "unevaluatedProperties":
        node[feature] = draw(st.sampled_from([False, {"type": "integer"}]))
    elif feature == "patternProperties":
        patterns = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=2, unique=True))
        node[feature] = {p: draw(st.sampled_from(VALUES[:-1]))[0] for p in patterns}
    elif feature == "propertyNames":
        node[feature] = draw(st.sampled_from([{"maxLength": 2}, {"pattern": "^[a-c]+$"},
                                              {"enum": ["a", "ab", "b", "x-1"]}, {"minLength": 1}]))
    elif feature == "dependentRequired":
        node[feature] = {draw(st.sampled_from([*names, "a"])): draw(some_names)}
    elif feature == "dependentSchemas":
        node[feature] = {draw(st.sampled_from([*names, "a"])): draw(object_schema(depth + 1))}
    elif feature in ("minProperties", "maxProperties"):
        node[feature] = draw(st.integers(0, 3))
    elif feature in ("anyOf", "oneOf", "allOf"):
        node[feature] = draw(st.lists(object_schema(depth + 1), min_size=1 if feature == "allOf" else 2,
                                      max_size=2))
    elif feature == "$ref":
        node.setdefault("$defs", {})["d"] = draw(object_schema(depth + 1))
        where = draw(st.sampled_from(["allOf", "property", "recursive"]))
        if where == "allOf":
            node.setdefault("allOf", []).append({"$ref": "#/$defs/d"})
        else:  # a property through a definition, or the whole schema again (recursion)
            target = "#/$defs/d" if where == "property" else "#"
            node.setdefault("properties", {})[draw(st.sampled_from(NAMES))] = {"$ref": target}
    elif feature == "if":
        node["if"] = draw(object_schema(depth + 1))
        for key in draw(st.sampled_from([["then"], ["else"], ["then", "else"]])):
            node[key] = draw(object_schema(depth + 1))
    elif feature == "nullable":
        node["type"] = ["object", "null"]


@st.composite
def schema_document(draw: Any) -> dict[str, Any]:
    """A whole schema: draft 2020-12, or draft 7 with ``dependencies`` for the dependent keywords."""
    schema = draw(object_schema())
    if draw(st.integers(0, 3)) == 0 and not _uses(schema, "unevaluatedProperties"):
        return {"$schema": DRAFT_7, **_draft7(schema)}
    return {"$schema": DRAFT_2020, **schema}


def _uses(node: Any, keyword: str) -> bool:
    return keyword in json.dumps(node)


def _draft7(node: Any) -> Any:
    """``dependentRequired`` / ``dependentSchemas`` spelled as draft 7's ``dependencies``;
    ``$defs`` as ``definitions``."""
    if isinstance(node, list):
        return [_draft7(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("dependentRequired", "dependentSchemas"):
            out.setdefault("dependencies", {}).update(_draft7(value))
        elif key == "$defs":
            out["definitions"] = _draft7(value)
        elif key == "$ref" and isinstance(value, str):
            out[key] = value.replace("#/$defs/", "#/definitions/")
        elif key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: _draft7(v) for k, v in value.items()}
        else:
            out[key] = _draft7(value)
    return out


# ------------------------------------------------------------------------------ instances

def sample(schema: Any, root: Any, rnd: random.Random, depth: int = 0) -> Any:
    """A value meant to satisfy ``schema`` (often does; jsonschema decides)."""
    if schema is True or schema == {}:
        return rnd.choice(POOL)
    if not isinstance(schema, dict):
        return rnd.choice(POOL)
    for value, samples in VALUES:
        if schema == value:
            return rnd.choice(samples) if samples else rnd.choice(POOL)
    if "$ref" in schema and depth < 3:
        return sample(_resolve(root, schema["$ref"]), root, rnd, depth + 1)
    if depth > 3:
        return {}
    out: dict[str, Any] = {}
    for part in _parts(schema, root, rnd):
        props = part.get("properties", {})
        for key in part.get("required", []):
            if key not in out:
                out[key] = sample(props.get(key, True), root, rnd, depth + 1)
        for key, sub in props.items():
            if key not in out and sub is not False and rnd.random() < 0.5:
                out[key] = sample(sub, root, rnd, depth + 1)
        for pattern, sub in part.get("patternProperties", {}).items():
            if rnd.random() < 0.4:
                key = rnd.choice([n for n in [*NAMES, "c", "x-y", "bb"] if _search(pattern, n)] or ["c"])
                out.setdefault(key, sample(sub, root, rnd, depth + 1))
    return out


def _parts(schema: dict[str, Any], root: Any, rnd: random.Random) -> list[dict[str, Any]]:
    """``schema`` and the subschemas an instance of it likely meets (one branch of each choice)."""
    parts = [schema]
    for sub in schema.get("allOf", []):
        parts.append(sub)
    for word in ("anyOf", "oneOf"):
        if schema.get(word):
            parts.append(rnd.choice(schema[word]))
    if "if" in schema:
        parts.append(rnd.choice([schema["if"], schema.get("then", {})]))
    for key, sub in schema.get("dependentSchemas", {}).items():
        if rnd.random() < 0.5:
            parts.append({"required": [key]})
            parts.append(sub)
    out = []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("$ref"), str):
            resolved = _resolve(root, part["$ref"])
            out.append({**resolved, **{k: v for k, v in part.items() if k != "$ref"}}
                       if part["$ref"] != "#" else part)
        elif isinstance(part, dict):
            out.append(part)
    return out


def _resolve(root: Any, ref: str) -> Any:
    node = root
    for step in ref.lstrip("#").split("/")[1:]:
        node = node.get(step, {}) if isinstance(node, dict) else {}
    return node


def _search(pattern: str, text: str) -> bool:
    import re

    return re.search(pattern, text) is not None


def mutate(value: Any, rnd: random.Random) -> Any:
    """``value`` with one small change at the top or one level down."""
    if not isinstance(value, dict):
        return rnd.choice(POOL)
    out = dict(value)
    inner = [k for k, v in out.items() if isinstance(v, dict)]
    if inner and rnd.random() < 0.3:
        key = rnd.choice(inner)
        out[key] = mutate(out[key], rnd)
        return out
    move = rnd.choice(["drop", "add", "swap"] if out else ["add"])
    if move == "drop":
        del out[rnd.choice(list(out))]
    elif move == "add":
        out[rnd.choice([*NAMES, "c", "zz"])] = rnd.choice(POOL)
    else:
        out[rnd.choice(list(out))] = rnd.choice(POOL)
    return out


def shuffled(value: Any, rnd: random.Random) -> Any:
    """``value`` with the keys of every object in a random order."""
    if isinstance(value, list):
        return [shuffled(v, rnd) for v in value]
    if not isinstance(value, dict):
        return value
    items = [(k, shuffled(v, rnd)) for k, v in value.items()]
    rnd.shuffle(items)
    return dict(items)
