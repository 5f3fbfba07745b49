"""A lower bound on the bytes of any JSON text a schema allows (or any match of a pattern).

The admission's budget check (``decoding/length_close.py``) refuses a ``max_tokens`` that cannot
hold the shortest output the constraint allows.  Its search over the grammar gives up on
outputs that need thousands of tokens (``minItems: 100000``) and its proven floor only sees
the first few tokens, so such a request ran, was cut at ``length`` and served text that does
not parse.  What forces length is written in the schema: every keyword that makes an instance
long (``minItems``, ``minLength``, ``minProperties``, ``required`` members and their values,
``contains``/``minContains``, ``prefixItems``, counted repeats in a ``pattern``, the values of
``const`` and ``enum``) is read here, recursively through ``$ref``, ``allOf``, ``anyOf``,
``oneOf`` and ``type`` lists, into a byte count no instance can be shorter than (compact
separators: the least any whitespace mode writes).  A token spells at most the vocabulary's
longest token, so the tokens of any output are at least that count divided by it.

Only lower bounds: whatever is not understood counts as its least (one byte for a value),
so the bound never refuses an output that exists.
"""

from __future__ import annotations

import json
import re
from typing import Any

# Deeper than this, a subschema counts as its least (a recursive $ref, a pathological nesting).
_MAX_DEPTH = 64
_TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")
# The least bytes of a bare value of each type: null, false, 0, 0, "", [], {}.
_LEAST = {"null": 4, "boolean": 4, "integer": 1, "number": 1, "string": 2, "array": 2, "object": 2}
# Numbers this large are not counted exactly (a lower bound need not be tight).
_COUNT_CAP = 10**9


def min_json_bytes(schema: Any) -> int:
    """The fewest bytes of any JSON text valid under ``schema`` (0 for ``false``/unknown)."""
    return _Walk(schema).value(schema, 0)


def min_pattern_chars(pattern: str) -> int:
    """The fewest characters of any match of ``pattern`` (0 when it cannot be read)."""
    try:
        return min(int(re._parser.parse(pattern).getwidth()[0]), _COUNT_CAP)  # type: ignore[attr-defined]
    except Exception:  # an ECMA construct Python's parser does not take, a huge repeat
        return 0


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(min(max(value, 0), _COUNT_CAP))


class _Walk:
    def __init__(self, root: Any) -> None:
        self.root = root
        self.done: dict[int, int] = {}  # id(subschema) -> its floor (shared subschemas once)
        self.open: set[int] = set()  # subschemas being walked: a cycle counts as its least

    def value(self, schema: Any, depth: int) -> int:
        if schema is True or schema is None or not isinstance(schema, dict):
            return 1 if schema is not False else 0
        key = id(schema)
        if key in self.done:
            return self.done[key]
        if depth > _MAX_DEPTH or key in self.open:
            return 1
        self.open.add(key)
        try:
            found = self._value(schema, depth)
        finally:
            self.open.discard(key)
        self.done[key] = found
        return found

    def _value(self, schema: dict[str, Any], depth: int) -> int:
        floors = [self._own(schema, depth)]
        ref = schema.get("$ref")
        if isinstance(ref, str):
            floors.append(self.value(self._resolve(ref), depth + 1))
        for sub in schema.get("allOf", []) if isinstance(schema.get("allOf"), list) else []:
            floors.append(self.value(sub, depth + 1))
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                floors.append(min(self.value(b, depth + 1) for b in branches))
        return max(floors)

    def _own(self, schema: dict[str, Any], depth: int) -> int:
        if "const" in schema:
            return _dumped(schema["const"])
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return min(_dumped(v) for v in enum)
        declared = schema.get("type")
        if isinstance(declared, str):
            types = [declared]
        elif isinstance(declared, list) and declared:
            types = [t for t in declared if isinstance(t, str)]
        else:
            types = list(_TYPES)  # untyped: any type's keywords apply only to that type
        floors = [self._typed(t, schema, depth) for t in types if t in _LEAST]
        return min(floors) if floors else 1

    def _typed(self, kind: str, schema: dict[str, Any], depth: int) -> int:
        if kind == "string":
            least = _count(schema.get("minLength"))
            pattern = schema.get("pattern")
            if isinstance(pattern, str):
                least = max(least, min_pattern_chars(pattern))
            return 2 + least  # quotes; a character is at least one byte
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object":
            return self._object(schema, depth)
        return _LEAST[kind]

    def _array(self, schema: dict[str, Any], depth: int) -> int:
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        count = _count(schema.get("minItems"))
        if "contains" in schema and schema.get("contains") is not False:
            count = max(count, _count(schema.get("minContains", 1)))
        if count == 0:
            return 2
        firsts = [self.value(p, depth + 1) for p in prefix[:min(count, len(prefix))]]
        rest = count - len(firsts)
        each = max(self.value(items, depth + 1), 1) if rest else 0
        return min(2 + sum(firsts) + rest * each + (count - 1), _COUNT_CAP)  # "[" "]", commas

    def _object(self, schema: dict[str, Any], depth: int) -> int:
        required = [k for k in schema.get("required", []) if isinstance(k, str)] \
            if isinstance(schema.get("required"), list) else []
        required = list(dict.fromkeys(required))
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        members = [len(json.dumps(k, ensure_ascii=False).encode()) + 1
                   + self.value(properties.get(k, schema.get("additionalProperties", True)), depth + 1)
                   for k in required]
        extra = max(_count(schema.get("minProperties")) - len(members), 0)
        count = len(members) + extra
        if count == 0:
            return 2
        # Another member: a key (at least "") and ":" and a value.
        return min(2 + sum(members) + extra * 4 + (count - 1), _COUNT_CAP)

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return True
        node: Any = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return True
        return node


def _dumped(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return 1
