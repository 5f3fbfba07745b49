"""Call rules for the ``pythonic`` body: ``name(key=value, ...)`` with Python literal values.

A JSON Schema is translated into Python-literal rules: strings, numbers and integers are the
schema's own inline ``%json`` (a JSON string or number is a Python literal with the same
value), booleans ``True`` / ``False``, null ``None``, ``enum`` / ``const`` their literals,
arrays and objects with declared properties as list and dict displays, unions as alternatives.
Anything else (objects without properties, ``not``, conditionals) is any Python literal; a
strict tool that needs it, or array length bounds, is served a rung lower (``relaxed``).
Keyword arguments follow the schema's property order; optional ones may be left out.
"""

from __future__ import annotations

import json
from typing import Any

from ..grammar.spec import Rung
from .lark_text import ordered_members
from .values import arguments_object, property_schemas

PY_ANY_RULES = r"""py_any: PY_STR | PY_NUM | "True" | "False" | "None" | py_list | py_dict
py_list: "[" (py_any (", " py_any)*)? "]"
py_dict: "{" (PY_STR ": " py_any (", " PY_STR ": " py_any)*)? "}"
PY_STR: /"(\\([\"\\\/bfnrt]|u[a-fA-F0-9]{4})|[^\"\\\x00-\x1F\x7F])*"/ | /'(\\.|[^'\\\n])*'/
PY_NUM: /-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/"""
SCALAR_KEYS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
               "minLength", "maxLength", "pattern", "format")


def py_literal(value: Any) -> str:
    """``value`` written as a Python literal (strings double-quoted, JSON escapes)."""
    if value is True:
        return "True"
    if value is False:
        return "False"
    if value is None:
        return "None"
    if isinstance(value, list):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {py_literal(v)}"
                               for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


class _Translator:
    """Schema → Python-literal rules for one tool, noting where it cannot be exact."""

    def __init__(self, prefix: str, options: Any, defs: dict[str, Any]) -> None:
        self.prefix = prefix
        self.options = options
        self.defs = defs
        self.rules: list[str] = []
        self.count = 0
        self.inexact: str | None = None
        self.uses_any = False

    def fresh(self) -> str:
        self.count += 1
        return f"{self.prefix}_{self.count}"

    def any(self, why: str | None) -> str:
        self.uses_any = True
        if why and self.inexact is None:
            self.inexact = why
        return "py_any"

    def value(self, schema: Any, depth: int = 0) -> str:
        """A Lark expression for the Python literals of ``schema``."""
        if schema is True or schema == {}:
            return self.any(None)
        if not isinstance(schema, dict) or depth > 8:
            return self.any("schema")
        if "$ref" in schema:
            ref = schema["$ref"]
            name = ref.rsplit("/", 1)[-1]
            target = self.defs.get(name)
            return self.value(target, depth + 1) if target is not None else self.any("$ref")
        if "const" in schema:
            return json.dumps(py_literal(schema["const"]))
        if isinstance(schema.get("enum"), list):
            return "(" + " | ".join(json.dumps(py_literal(v)) for v in schema["enum"]) + ")"
        branches = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(branches, list) and branches:
            return "(" + " | ".join(self.value(b, depth + 1) for b in branches) + ")"
        if any(k in schema for k in ("allOf", "not", "if")):
            return self.any("composition")
        kind = schema.get("type")
        if isinstance(kind, list):
            return "(" + " | ".join(self.value({**schema, "type": k}, depth + 1) for k in kind) + ")"
        if kind in ("string", "integer", "number"):
            scalar = {"type": kind, **{k: schema[k] for k in SCALAR_KEYS if k in schema}}
            name = self.fresh()
            self.rules.append(f"{name}: %json {json.dumps({**scalar, 'x-guidance': self.options})}")
            return name
        if kind == "boolean":
            return '("True" | "False")'
        if kind == "null":
            return '"None"'
        if kind == "array":
            return self._array(schema, depth)
        if kind == "object" and property_schemas(schema):
            return self._object(schema, depth)
        return self.any(None if kind in (None, "object") else f"type {kind}")

    def _array(self, schema: dict[str, Any], depth: int) -> str:
        if any(k in schema for k in ("minItems", "maxItems", "uniqueItems", "prefixItems")):
            self.inexact = self.inexact or "array bounds"
        item = self.value(schema.get("items", True), depth + 1)
        name = self.fresh()
        self.rules.append(f'{name}: "[" ({item} (", " {item})*)? "]"')
        return name

    def _object(self, schema: dict[str, Any], depth: int) -> str:
        required = set(schema.get("required", ()))
        members = [(f'{json.dumps(json.dumps(k, ensure_ascii=False))} ": " '
                    f"{self.value(p, depth + 1)}", k in required)
                   for k, p in property_schemas(schema).items()]
        inner = ordered_members(members, '", "', self.fresh(), self.rules)
        name = self.fresh()
        self.rules.append(f'{name}: "{{" {inner or ""} "}}"')
        return name


def pythonic_call_rules(embedded: list[tuple[str, Any]]) -> tuple[str, str, dict[str, str]]:
    """(the ``call`` alternatives, the rule definitions, tool → why it is not exact)."""
    names: list[str] = []
    rules: list[str] = []
    inexact: dict[str, str] = {}
    uses_any = False
    for i, (name, schema) in enumerate(embedded):
        schema = arguments_object(schema)
        options = schema.get("x-guidance", {}) if isinstance(schema, dict) else {}
        defs = {}
        if isinstance(schema, dict):
            defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
        tr = _Translator(f"t{i}", options, defs)
        required = set(schema.get("required", ())) if isinstance(schema, dict) else set()
        members = [(f"{json.dumps(k + '=')} {tr.value(p)}", k in required)
                   for k, p in property_schemas(schema).items()]
        kwargs = ordered_members(members, '", "', f"kw{i}", tr.rules) or ""
        if not property_schemas(schema) and not _closed(schema):
            kwargs = 'PY_NAME "=" py_any (", " PY_NAME "=" py_any)*'
            kwargs = f"({kwargs})?"
            tr.uses_any = True
            rules.append(r"PY_NAME: /[A-Za-z_][A-Za-z0-9_]*/") if "PY_NAME" not in "".join(rules) else None
        rules.extend(tr.rules)
        rules.append(f'call_{i}: {json.dumps(name + "(")} {kwargs} ")"')
        names.append(f"call_{i}")
        uses_any = uses_any or tr.uses_any
        if tr.inexact:
            inexact[name] = tr.inexact
    if uses_any:
        rules.append(PY_ANY_RULES)
    return " | ".join(names), "\n".join(rules), inexact


def _closed(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("additionalProperties", True) is False


def pythonic_rung(rung: Rung, why: str | None) -> tuple[Rung, str | None]:
    """The rung a tool is served at in the pythonic syntax, given the translator's verdict."""
    if rung is Rung.EXACT and why:
        return Rung.RELAXED, f"pythonic: {why}"
    return rung, None
