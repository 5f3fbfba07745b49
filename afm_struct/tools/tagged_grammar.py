"""Call rules for the ``tagged`` body: arguments as tag pairs (Qwen3-Coder XML, GLM key/value).

Per tool: the name as a literal between the layout's ``name_before`` / ``name_after``, then one
rule per declared parameter in the schema's order (required ones present, optional ones may be
left out), each ``key_before KEY key_after VALUE value_after``.  A string parameter's value is
raw text up to the closing tag (``enum`` / ``const`` values are the only literals allowed; a
length bound is a bounded repeat); any other value is the parameter's schema as inline
``%json``.  Objects that do not close themselves (no properties, or ``additionalProperties``
not false) also take extra parameters of any name, valued as raw text.

A raw string cannot enforce ``pattern`` or ``format``: a strict tool with such a string
parameter is served a rung lower (``relaxed``), which the plan reports as downgraded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..grammar.spec import Rung
from .formats import ToolFormat
from .lark_text import markup, ordered_members, text_until
from .values import arguments_object, is_raw_string, property_schemas

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

KEY_TERMINAL = r"TAG_KEY: /[A-Za-z_][A-Za-z0-9_.-]*/"
UNENFORCED_STRING = ("pattern", "format")


def raw_value_rule(tokenizer: Tokenizer, fmt: ToolFormat, schema: Any, name: str, rules: list[str]) -> str:
    """The rule for a raw string value followed by the layout's ``value_after``."""
    choices = _string_literals(schema)
    if choices is not None:  # enum / const: the literals, then the closing tag
        alts = " | ".join(json.dumps(c) for c in choices)
        rules.append(f"{name}: ({alts}) {markup(tokenizer, fmt.layout.value_after)}")
        return name
    rules.append(text_until(tokenizer, name, fmt.layout.value_after, _length_regex(schema)))
    return name


def _string_literals(schema: Any) -> list[str] | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _length_regex(schema: Any) -> str:
    low = schema.get("minLength", 0) if isinstance(schema, dict) else 0
    high = schema.get("maxLength") if isinstance(schema, dict) else None
    if not low and high is None:
        return "(.|\\n)*"
    upper = "" if high is None else str(int(high))
    return f"(.|\\n){{{int(low)},{upper}}}"


def _with_defs(schema: Any, root: dict[str, Any]) -> Any:
    """A property's schema that still resolves the root's ``$defs`` when embedded alone."""
    if not isinstance(schema, dict):
        return schema
    extra = {k: root[k] for k in ("$defs", "definitions", "x-guidance") if k in root}
    return {**extra, **schema}


def tagged_call_rules(tokenizer: Tokenizer, fmt: ToolFormat, embedded: list[tuple[str, Any]]
                      ) -> tuple[str, str]:
    """(the ``call`` alternatives, the rule definitions) for ``(name, arguments schema)``."""
    lay = fmt.layout
    names: list[str] = []
    rules: list[str] = []
    need_key = False
    for i, (name, schema) in enumerate(embedded):
        names.append(f"call_{i}")
        schema = arguments_object(schema)
        props = property_schemas(schema)
        required = set(schema.get("required", ())) if isinstance(schema, dict) else set()
        members: list[tuple[str, bool]] = []
        for k, (key, prop) in enumerate(props.items()):
            value = (raw_value_rule(tokenizer, fmt, prop, f"v_{i}_{k}", rules) if is_raw_string(prop)
                     else _json_value_rule(tokenizer, fmt, _with_defs(prop, schema), f"v_{i}_{k}", rules))
            rules.append(f"p_{i}_{k}: {markup(tokenizer, lay.key_before + key + lay.key_after)} {value}")
            members.append((f"p_{i}_{k}", key in required))
        params = ordered_members(members, "", f"ps_{i}", rules) or ""
        if _open(schema):
            need_key = True
            raw = raw_value_rule(tokenizer, fmt, {"type": "string"}, f"x_{i}", rules)
            rules.append(f"extra_{i}: {markup(tokenizer, lay.key_before)} TAG_KEY "
                         f"{markup(tokenizer, lay.key_after)} {raw}")
            params = f"{params} extra_{i}*".strip()
        head = markup(tokenizer, lay.name_before + name + lay.name_after)
        tail = markup(tokenizer, lay.call_after)
        rules.append(f"call_{i}: {' '.join(x for x in (head, params, tail) if x)}")
    if need_key:
        rules.append(KEY_TERMINAL)
    return " | ".join(names), "\n".join(rules)


def _json_value_rule(tokenizer: Tokenizer, fmt: ToolFormat, schema: Any, name: str, rules: list[str]) -> str:
    rules.append(f"{name}: %json {json.dumps(schema)} {markup(tokenizer, fmt.layout.value_after)}")
    return name


def _open(schema: Any) -> bool:
    """Whether the arguments object takes parameters it does not declare."""
    if not isinstance(schema, dict):
        return True
    return schema.get("additionalProperties", True) is not False


def tagged_rung(schema: Any, rung: Rung) -> tuple[Rung, str | None]:
    """The rung a tool's parameters are served at in a tag-pair syntax (a string parameter's
    ``pattern`` / ``format`` cannot be checked in raw text)."""
    if rung is not Rung.EXACT:
        return rung, None
    for key, prop in property_schemas(schema).items():
        if is_raw_string(prop) and isinstance(prop, dict) and any(k in prop for k in UNENFORCED_STRING):
            return Rung.RELAXED, f"raw_string_constraint: {key}"
    return rung, None
