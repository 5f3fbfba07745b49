"""Other servers' constraint fields on a chat request: each enforced, or refused with a 400.

Clients written for vLLM, SGLang, llama.cpp, TGI or Ollama ask for constrained output with their
own request fields.  Ignoring one would hand back unconstrained text with a 200, which is what
this server exists to prevent, so every such field is read here into the plan's output format
(:class:`afm_struct.serving.plan.OutputFormat`, ``param`` = the field) or refused, naming it:

* vLLM: ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar``,
  ``structural_tag`` and ``structured_outputs`` (``json``, ``regex``, ``choice``, ``grammar``,
  ``json_object``, ``structural_tag`` and the options below); ``guided_decoding_backend`` (and
  ``structured_outputs.backend``) are accepted and ignored: this server has one engine.
* SGLang: ``regex``, ``ebnf``, ``json_schema`` (a JSON string).
* llama.cpp: ``grammar`` (GBNF), ``json_schema`` (an object), ``response_format``
  ``{"type": "json_object", "schema": ...}`` (:func:`response_format_schema`).
* TGI: ``grammar`` as ``{"type": "json" | "regex", "value": ...}``.
* Ollama: ``format`` (``"json"`` or a JSON schema).

Grammars in GBNF / EBNF (``::=`` rules) are converted to Lark, others read as Lark
(:mod:`afm_struct.grammar.grammar_syntax`).  Every dialect constraint is strict: served below
the exact rung it sets ``X-Grammar-Constraints: downgraded``.

Unknown top-level fields: ignored (clients send ``user``, ``logit_bias``, ... written for other
servers), except those whose name says they ask for a constraint (:data:`CONSTRAINT_WORDS`),
which are a 400 ``unsupported_parameter``.  Two constraints in one request (two of these
fields, one of them with ``response_format``, or with tools the model may call) are a 400
naming both.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any

from afm_struct.errors import InvalidRequestError
from afm_struct.grammar.grammar_syntax import choice_grammar, to_lark
from afm_struct.grammar.structural_tag import read_structural_tag
from afm_struct.serving.plan import OutputFormat

# Top-level fields read here: the kind each asks for ("schema", "regex", "choice", "grammar",
# "json_or_schema" for Ollama's format, "tgi_or_grammar" for TGI / llama.cpp ``grammar``).
TOP_LEVEL: dict[str, str] = {
    "guided_json": "schema",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "regex": "regex",
    "ebnf": "grammar",
    "json_schema": "schema",
    "grammar": "tgi_or_grammar",
    "format": "json_or_schema",
    "structural_tag": "structural_tag",
}
# Accepted and ignored: which grammar engine to use (there is one here).
IGNORED = ("guided_decoding_backend",)
# vLLM's structured_outputs: the constraint keys (exactly one) and the options.
SO_KINDS: dict[str, str] = {"json": "schema", "regex": "regex", "choice": "choice", "grammar": "grammar",
                            "json_object": "json_object", "structural_tag": "structural_tag"}
SO_OPTIONS = ("disable_fallback", "disable_any_whitespace", "disable_additional_properties",
              "whitespace_pattern", "backend")
# An unknown top-level field whose name holds one of these asks for a constraint: refused.
CONSTRAINT_WORDS = re.compile(r"guided|grammar|regex|schema|ebnf|gbnf|lark|choice|structur|constrain"
                              r"|format|json|pattern", re.IGNORECASE)
# Keys near a schema's place that name it differently (``input_schema``, ``params``, ``args``).
TOOL_SCHEMA_WORDS = re.compile(r"param|input|arg", re.IGNORECASE)
REFUSED_HINTS: dict[str, str] = {
    "functions": "the legacy function-calling fields are not supported; send tools",
    "function_call": "the legacy function-calling fields are not supported; send tool_choice",
    "guided_whitespace_pattern": "a per-request whitespace pattern is not supported (JSON is "
                                 "written with json.dumps separators); omit it",
}


def _unsupported(param: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{param}: {message}", param=param, code="unsupported_parameter")


def _invalid(param: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{param}: {message}", param=param, code="invalid_value")


def _schema(value: Any, param: str, *, close_objects: bool = False, exact_only: bool = False) -> OutputFormat:
    """A JSON Schema given as an object or as JSON text (SGLang, vLLM both take either)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _invalid(param, f"the schema is not valid JSON ({exc.msg} at line {exc.lineno}, "
                                  f"column {exc.colno})") from exc
    if not isinstance(value, dict | bool):
        raise _invalid(param, "must be a JSON Schema (an object, or a string holding one)")
    if close_objects:
        value = closed_objects(value)
    return OutputFormat("json_schema", schema=value, strict=True, param=param, exact_only=exact_only)


# Where a JSON Schema holds subschemas: maps of them, lists (or one), and single ones.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_ONES = ("not", "if", "then", "else", "additionalProperties", "additionalItems", "contains",
                "propertyNames", "unevaluatedProperties", "unevaluatedItems")


def closed_objects(schema: Any) -> Any:
    """``schema`` with ``additionalProperties: false`` on every (sub)schema that lists
    ``properties`` and says nothing of others (vLLM's ``disable_additional_properties``); a
    copy.  Only subschema positions are walked: ``const``/``enum`` values are data."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed_objects(sub) for name, sub in out[key].items()}
    for key in (*_SCHEMA_LISTS, *_SCHEMA_ONES):
        if isinstance(out.get(key), list):
            out[key] = [closed_objects(sub) for sub in out[key]]
        elif key in out:
            out[key] = closed_objects(out[key])
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out


def _regex(value: Any, param: str) -> OutputFormat:
    if not isinstance(value, str):
        raise _invalid(param, "must be a string (a regular expression)")
    return OutputFormat("regex", text=value, strict=True, param=param)


def _choice(value: Any, param: str) -> OutputFormat:
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise _invalid(param, "must be a non-empty list of strings")
    return OutputFormat("grammar", text=choice_grammar(value), strict=True, param=param)


def _grammar(value: Any, param: str) -> OutputFormat:
    if not isinstance(value, str) or not value.strip():
        raise _invalid(param, "must be a non-empty string (a Lark, GBNF or EBNF grammar)")
    lark, syntax = to_lark(value, param=param)
    return OutputFormat("grammar", text=lark, strict=True, param=param, converted=syntax == "gbnf")


def structural_tag(value: Any, param: str) -> OutputFormat:
    """A structural tag (an object, or JSON text holding one; either form): read here so that a
    malformed part is a 400 naming it before anything compiles
    (:func:`afm_struct.grammar.structural_tag.read_structural_tag`).  Sent as JSON text
    (``converted``), its errors name the field: the parts have no path in the request."""
    text = isinstance(value, str)
    if text:
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _invalid(param, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                  f"{exc.colno})") from exc
    try:
        read_structural_tag(value, param)
    except InvalidRequestError as exc:
        if not text:
            raise
        raise InvalidRequestError(exc.message, param=param, code=exc.code) from exc
    return OutputFormat("structural_tag", text=json.dumps(value), strict=True, param=param, converted=text)


def _json_object(param: str) -> OutputFormat:
    return OutputFormat("json_object", strict=True, param=param)


def read_field(kind: str, value: Any, param: str) -> OutputFormat:
    """The output format one field asks for: ``kind`` as in :data:`TOP_LEVEL` (Ollama's
    ``format`` on its own API is ``read_field("json_or_schema", value, "format")``); 400s for a
    malformed value, naming ``param``."""
    if kind == "schema":
        return _schema(value, param)
    if kind == "regex":
        return _regex(value, param)
    if kind == "choice":
        return _choice(value, param)
    if kind == "grammar":
        return _grammar(value, param)
    if kind == "structural_tag":
        return structural_tag(value, param)
    if kind == "json_or_schema":  # Ollama's format: "json" or a schema
        if value == "json":
            return _json_object(param)
        if isinstance(value, dict):
            return _schema(value, param)
        raise _invalid(param, 'must be "json" or a JSON Schema object')
    # ``grammar``: llama.cpp's GBNF string, or TGI's {"type": ..., "value": ...}
    if isinstance(value, str):
        return _grammar(value, param)
    if not isinstance(value, dict) or set(value) - {"type", "value"}:
        raise _invalid(param, 'must be a grammar string or {"type": "json" | "regex", "value": ...}')
    tgi = value.get("type")
    if tgi in ("json", "json_schema"):
        return _schema(value.get("value"), f"{param}.value")
    if tgi == "regex":
        return _regex(value.get("value"), f"{param}.value")
    raise _unsupported(f"{param}.type", f"{tgi!r} is not supported; send \"json\" or \"regex\"")


def _structured_outputs(value: Any) -> OutputFormat | None:
    """vLLM's ``structured_outputs`` object: exactly one constraint key, known options only."""
    param = "structured_outputs"
    if not isinstance(value, dict):
        raise _invalid(param, "must be an object")
    for key in value:
        if key not in SO_KINDS and key not in SO_OPTIONS:
            raise _unsupported(f"{param}.{key}", "is not a supported structured_outputs key; send one of "
                               + ", ".join((*SO_KINDS, *SO_OPTIONS)))
    kinds = [k for k in SO_KINDS if value.get(k) not in (None, False)]
    if len(kinds) > 1:
        raise InvalidRequestError(f"{param}.{kinds[0]} and {param}.{kinds[1]} both constrain the output; "
                                  "send one of them", param=f"{param}.{kinds[1]}",
                                  code="conflicting_constraints")
    options = {k: value[k] for k in SO_OPTIONS if value.get(k) not in (None, False)}
    for key in ("disable_fallback", "disable_any_whitespace", "disable_additional_properties"):
        if key in value and not isinstance(value[key], bool | None):
            raise _invalid(f"{param}.{key}", "must be a boolean")
    if options.get("disable_any_whitespace"):
        raise _unsupported(f"{param}.disable_any_whitespace", "is not supported per request (JSON is "
                           "written with json.dumps separators; the server's whitespace is set at start)")
    if "whitespace_pattern" in options:
        raise _unsupported(f"{param}.whitespace_pattern", REFUSED_HINTS["guided_whitespace_pattern"])
    if not kinds:
        if set(options) - {"backend"}:
            raise _invalid(param, f"sets {', '.join(sorted(options))} but no constraint; send one of "
                           + ", ".join(SO_KINDS))
        return None
    kind = kinds[0]
    where = f"{param}.{kind}"
    if kind == "json_object":
        if value[kind] is not True:
            raise _invalid(where, "must be true or omitted")
        if options.get("disable_additional_properties"):
            raise _invalid(f"{param}.disable_additional_properties",
                           "applies to json schemas, not json_object")
        return dataclasses.replace(_json_object(where), exact_only=bool(options.get("disable_fallback")))
    exact_only = bool(options.get("disable_fallback"))
    if kind == "json":
        return _schema(value[kind], where, close_objects=bool(options.get("disable_additional_properties")),
                       exact_only=exact_only)
    if options.get("disable_additional_properties"):
        raise _invalid(f"{param}.disable_additional_properties", "applies to json schemas only")
    return dataclasses.replace(read_field(SO_KINDS[kind], value[kind], where), exact_only=exact_only)


def check_unknown(extra: Mapping[str, Any]) -> None:
    """400 for an unknown top-level field that asks for a constraint or a call (see module doc)."""
    for name in extra:
        if name in TOP_LEVEL or name in IGNORED or name == "structured_outputs":
            continue
        if name in REFUSED_HINTS:
            if extra[name] is not None:
                raise _unsupported(name, REFUSED_HINTS[name])
        elif CONSTRAINT_WORDS.search(name):
            raise _unsupported(name, "this server does not know this field, and its name says it asks "
                               "for constrained output, so it is refused rather than ignored; see "
                               "docs/constraints.md for the constraint fields it reads")


def read_constraint_fields(extra: Mapping[str, Any], *, response_format: str | None = None,
                           tools: str | None = None) -> OutputFormat | None:
    """The one dialect constraint among the request's extra fields (None: there is none).

    ``extra``: the top-level fields the request model does not define; ``response_format``:
    where the request already asks for JSON through ``response_format`` (None: it does not);
    ``tools``: where tools the model may call constrain it (None: no tools, or ``tool_choice:
    none``).  Raises 400s: a field refused or malformed, or two constraints at once.
    """
    check_unknown(extra)
    for name in IGNORED:
        if extra.get(name) is not None and not isinstance(extra[name], str):
            raise _invalid(name, "must be a string")
    found: list[OutputFormat] = []
    for name, kind in TOP_LEVEL.items():
        value = extra.get(name)
        if value is None or (name == "format" and value == ""):
            continue
        found.append(read_field(kind, value, name))
    so = extra.get("structured_outputs")
    if so is not None:
        read = _structured_outputs(so)
        if read is not None:
            found.append(read)
    if not found:
        return None
    others = [p for p in (response_format, tools) if p is not None] + [c.param for c in found[1:]]
    if others:
        raise InvalidRequestError(
            f"{found[0].param} and {others[0]} both constrain the output; one mask serves a request, "
            "so send one of them", param=others[0], code="conflicting_constraints")
    return found[0]


def response_format_schema(fmt: Any) -> OutputFormat | None:
    """llama.cpp's ``response_format: {"type": "json_object", "schema": {...}}``: that schema,
    enforced (OpenAI's json_object has no schema; ignoring it would drop the constraint)."""
    schema = getattr(fmt, "schema_", None) if getattr(fmt, "type", None) == "json_object" else None
    if schema is None:
        return None
    return _schema(schema, "response_format.schema")


def check_response_format_extra(fmt: Any) -> None:
    """400 for a key of ``response_format`` (or of its ``json_schema``) that this server does not
    read but that asks for a constraint: ``{"type": "json_schema", "schema": ...}`` or a
    misspelt ``json_schema.schema`` would otherwise lose the schema."""
    if getattr(fmt, "type", None) == "structural_tag":
        return  # its keys are read (unknown ones refused) by read_structural_tag
    for name in getattr(fmt, "model_extra", None) or {}:
        if CONSTRAINT_WORDS.search(name) or name == "strict":
            raise _unsupported(f"response_format.{name}",
                               f"is not read for response_format type {fmt.type!r}, so it is refused "
                               "rather than ignored (json_schema: put name, schema and strict inside "
                               "response_format.json_schema)")
    spec = getattr(fmt, "json_schema", None)
    for name in getattr(spec, "model_extra", None) or {}:
        if CONSTRAINT_WORDS.search(name) or TOOL_SCHEMA_WORDS.search(name):
            raise _unsupported(f"response_format.json_schema.{name}",
                               "is not a json_schema key this server reads (name, description, schema, "
                               "strict), so it is refused rather than ignored")


def check_tool_extra(tools: Any) -> None:
    """400 for a key of a tool's ``function`` that this server does not read but that looks like
    its arguments' schema (Anthropic's ``input_schema``, a misspelt ``parameters``): dropped, the
    tool would take no arguments at all."""
    for i, tool in enumerate(tools or ()):
        for name in getattr(tool.function, "model_extra", None) or {}:
            if CONSTRAINT_WORDS.search(name) or TOOL_SCHEMA_WORDS.search(name):
                raise _unsupported(f"tools.{i}.function.{name}",
                                   "is not a function key this server reads (name, description, "
                                   "parameters, strict), so it is refused rather than ignored; the "
                                   "arguments' schema goes in parameters")
