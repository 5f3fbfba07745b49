"""Admission checks on a JSON Schema: valid against its meta-schema, every ``$ref`` resolvable.

Failures raise :class:`~afm_struct.errors.SchemaError` carrying the JSON path of the problem
(``$.properties.age.type``), so the server answers 400 with something a user can fix.  The size
and depth limits are not errors (see :func:`schema_limits_reason`): an oversized schema is
served from a lower rung with a reason.
"""

from __future__ import annotations

import functools
import json
import warnings
from typing import Any

import jsonschema_rs
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema.exceptions import best_match
from jsonschema.validators import validator_for

from ...errors import SchemaError
from ..diagnostics import meta_schema_problem
from ..spec import CompileOptions
from .drafts import validator_class
from .meta_schema import flattened_meta_schema
from .paths import DATA_KEYWORDS, json_path, local_refs_resolve, may_refer
from .satisfiability import find_empty


@functools.cache
def _meta_validator(cls: Any) -> Any:
    """One meta-schema validator per draft, built once (building it costs more than using it)."""
    meta_cls = validator_for(cls.META_SCHEMA, default=cls)
    flat = flattened_meta_schema(cls.META_SCHEMA.get("$id", ""))
    return meta_cls(flat if flat is not None else cls.META_SCHEMA, format_checker=cls.FORMAT_CHECKER)


@functools.cache
def _fast_meta_validator(cls: Any) -> Any:
    """The same meta-schema in jsonschema-rs: ~50x faster than the Python check on MaskBench."""
    return jsonschema_rs.validator_for(cls.META_SCHEMA, validate_formats=True)


def check_schema(schema: Any, *, param: str = "response_format.json_schema.schema",
                 prefix: str = "$", text: str | None = None) -> None:
    """Raise :class:`SchemaError` unless ``schema`` is a valid JSON Schema with resolvable refs
    and instances; ``param`` / ``prefix`` say where the request carries it (the error's
    ``param`` and the start of its JSON path); ``text``: ``schema`` as ``json.dumps`` wrote it,
    when the caller has it (no ``"$ref"`` in it: no walk for references)."""
    try:
        _check_schema(schema, param, text)
    except SchemaError as exc:
        if exc.param == param and prefix == "$":
            raise
        raise exc.at(param, prefix) from None


def _check_schema(schema: Any, param: str, text: str | None = None) -> None:
    if not isinstance(schema, dict | bool):
        raise SchemaError(f"a JSON Schema must be an object or a boolean, not {type(schema).__name__}",
                          path="$", param=param)
    cls = validator_class(schema)
    # jsonschema-rs first: on the 3,320 dev schemas it never accepts what the Python check
    # rejects, and rejects only 4 it accepts (Rust vs Python regex dialects in "format": "regex").
    # So its "valid" is final and its "invalid" is re-judged (and explained) by jsonschema.
    if _fast_meta_validator(cls).is_valid(schema):
        if isinstance(schema, dict) and may_refer(text):
            _check_refs(schema, cls, param)
        check_satisfiable(schema, param=param, text=text)
        return
    with warnings.catch_warnings():  # jsonschema warns on odd-but-valid regexes in patterns
        warnings.simplefilter("ignore")
        meta = _meta_validator(cls)
        # is_valid first: the common case needs no error objects; best_match only on failure.
        if not meta.is_valid(schema):
            exc = best_match(meta.iter_errors(schema))
            if exc is not None:
                # jsonschema's own message prints Python reprs: say it in JSON terms instead.
                raise SchemaError(f"invalid JSON Schema: {meta_schema_problem(exc)}",
                                  path=json_path(exc.absolute_path), param=param)
    if isinstance(schema, dict) and may_refer(text):
        _check_refs(schema, cls, param)
    check_satisfiable(schema, param=param, text=text)


def check_satisfiable(schema: Any, *, param: str, prefix: str = "$", text: str | None = None) -> None:
    """Raise :class:`SchemaError` (400) when ``schema`` provably has no instance; ``prefix`` is
    where the schema sits in the request (for a tool's parameters); ``text`` as in
    :func:`check_schema`."""
    empty = find_empty(schema, text)
    if empty is not None:
        raise SchemaError(empty.message(), path=prefix + json_path(empty.path)[1:], param=param)


_NOT_SCHEMAS = DATA_KEYWORDS


def _check_refs(schema: dict[str, Any], cls: Any, param: str) -> None:
    """Resolve every ``$ref`` from the scope it appears in (``$id`` changes the base URI)."""
    if local_refs_resolve(schema):
        return
    spec = referencing.jsonschema.specification_with(cls.META_SCHEMA.get("$schema", ""),
                                                     default=referencing.jsonschema.DRAFT202012)
    resource = spec.create_resource(schema)
    # Crawl once up front: otherwise every lookup of an id/anchor re-crawls the whole schema.
    registry: referencing.Registry[Any] = referencing.Registry().with_resource("", resource)
    try:
        registry = registry.crawl()
    except Exception:  # referencing trips on odd-but-valid shapes (lists under "id"-bearing keys)
        pass
    root = registry.resolver(base_uri=resource.id() or "")
    stack: list[tuple[Any, list[Any], Any]] = [(schema, [], root)]
    while stack:
        node, path, resolver = stack.pop()
        if isinstance(node, dict):
            sub_id = node.get("$id", node.get("id")) if path else None
            if isinstance(sub_id, str) and path:
                try:
                    resolver = resolver.in_subresource(spec.create_resource(node))
                except Exception:  # an odd $id: resolve against the outer scope instead
                    pass
            ref = node.get("$ref")
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except (referencing.exceptions.Unresolvable, Exception) as exc:
                    raise SchemaError(f"unresolvable $ref {ref!r}", path=json_path([*path, "$ref"]),
                                      param=param) from exc
            for key, value in node.items():
                if key in _NOT_SCHEMAS:
                    continue
                if key in ("properties", "patternProperties", "$defs", "definitions",
                           "dependentSchemas") and isinstance(value, dict):
                    for name, sub in value.items():
                        stack.append((sub, [*path, key, name], resolver))
                else:
                    stack.append((value, [*path, key], resolver))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                stack.append((item, [*path, i], resolver))


def schema_depth(schema: Any) -> int:
    """Nesting depth of dicts/lists in ``schema`` (iterative: deep input cannot overflow)."""
    deepest = 0
    stack = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, depth)
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def schema_limits_reason(schema: Any, options: CompileOptions, text: str | None = None) -> str | None:
    """``schema_too_large`` / ``schema_too_deep`` when over the configured limits, else None.
    ``text``: ``schema`` as compact JSON, when the caller has it (its size bounds the measured
    one, ``json.dumps``' default spacing: at most one space per separator, so at most twice)."""
    if (text is None or 2 * len(text) > options.max_schema_bytes) and \
            len(json.dumps(schema)) > options.max_schema_bytes:
        return "schema_too_large"
    # Each level of nesting opens a bracket (brackets inside strings only add to the count).
    if (text is None or text.count("{") + text.count("[") > options.max_depth) and \
            schema_depth(schema) > options.max_depth:
        return "schema_too_deep"
    return None
