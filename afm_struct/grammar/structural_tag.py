"""``structural_tag`` requests read into one tree of formats: both forms users send.

* vLLM's / SGLang's: ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
  "triggers": [...]}``: free text; where a trigger appears, the text goes on as one of the
  structures whose ``begin`` starts with it (its body an instance of ``schema``), then its
  ``end``, then free text again.  Read as xgrammar's ``triggered_tags``.
* xgrammar's: ``{"type": "structural_tag", "format": {...}}``, a tree of ``const_string``
  (``value``), ``regex`` (``pattern``), ``json_schema`` (``json_schema``), ``any_text``,
  ``sequence`` / ``or`` (``elements``), ``tag`` (``begin``, ``content``, ``end``),
  ``triggered_tags`` (``triggers``, ``tags``, ``at_least_one``, ``stop_after_first``) and
  ``tags_with_separator`` (``tags``, ``separator``, ``at_least_one``, ``stop_after_first``).

Every node keeps ``where`` it sits in the caller's request (``response_format.format.elements.2``,
dotted as every error param), so each error names the part: an unknown type or key, a missing
or mistyped field is a 400, never ignored.  The tree is bounded (:data:`MAX_NODES`,
:data:`MAX_DEPTH`, the strings); :mod:`.structural_tag_lark` writes it as one Lark grammar.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import GrammarLimitError, InvalidRequestError

MAX_NODES = 512
MAX_DEPTH = 24
MAX_LITERAL = 4096  # characters of one begin / end / trigger / const_string / separator


@dataclass(frozen=True)
class Const:
    """Exactly ``value``."""

    value: str
    where: str


@dataclass(frozen=True)
class Regex:
    """A match of ``pattern`` (the grammar engine's regex syntax)."""

    pattern: str
    where: str


@dataclass(frozen=True)
class JsonBody:
    """One JSON instance of ``schema``; ``where`` is the schema's own place."""

    schema: Any
    where: str


@dataclass(frozen=True)
class AnyText:
    """Any text, up to what must follow it (a fixed string, or the end of the output)."""

    where: str


@dataclass(frozen=True)
class Sequence:
    """Each element in turn."""

    elements: tuple[Format, ...]
    where: str


@dataclass(frozen=True)
class Or:
    """One of the elements."""

    elements: tuple[Format, ...]
    where: str


@dataclass(frozen=True)
class Tag:
    """``begin``, the content, ``end``."""

    begin: str
    content: Format
    end: str
    where: str


@dataclass(frozen=True)
class TriggeredTags:
    """Free text; each trigger must go on as one of the tags whose begin starts with it."""

    triggers: tuple[str, ...]
    tags: tuple[Tag, ...]
    at_least_one: bool
    stop_after_first: bool
    where: str


@dataclass(frozen=True)
class TagsWithSeparator:
    """Tags one after another, ``separator`` between them, nothing else."""

    tags: tuple[Tag, ...]
    separator: str
    at_least_one: bool
    stop_after_first: bool
    where: str


Format = Const | Regex | JsonBody | AnyText | Sequence | Or | Tag | TriggeredTags | TagsWithSeparator

# Each node type's keys: required, then optional.
_KEYS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "const_string": (("value",), ()),
    "regex": (("pattern",), ()),
    "json_schema": (("json_schema",), ()),
    "any_text": ((), ()),
    "sequence": (("elements",), ()),
    "or": (("elements",), ()),
    "tag": (("begin", "content", "end"), ()),
    "triggered_tags": (("triggers", "tags"), ("at_least_one", "stop_after_first")),
    "tags_with_separator": (("tags", "separator"), ("at_least_one", "stop_after_first")),
}


def _invalid(where: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {message}", param=where, code="invalid_value")


def _unsupported(where: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"{where}: {message}", param=where, code="unsupported_parameter")


class _Reader:
    """One request's walk: counts nodes against the bounds."""

    def __init__(self) -> None:
        self.nodes = 0

    def text(self, value: Any, where: str, *, empty: bool = True) -> str:
        if not isinstance(value, str):
            raise _invalid(where, "must be a string")
        if not empty and not value:
            raise _invalid(where, "must not be empty")
        if len(value) > MAX_LITERAL:
            raise GrammarLimitError(f"{where}: {len(value):,} characters; at most {MAX_LITERAL:,} are "
                                    "allowed", param=where)
        return value

    def flag(self, node: dict[str, Any], key: str, where: str) -> bool:
        value = node.get(key, False)
        if not isinstance(value, bool):
            raise _invalid(f"{where}.{key}", "must be a boolean")
        return value

    def items(self, value: Any, where: str) -> list[Any]:
        if not isinstance(value, list) or not value:
            raise _invalid(where, "must be a non-empty list")
        return value

    def format(self, node: Any, where: str, depth: int) -> Format:
        """One node of xgrammar's format tree."""
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise GrammarLimitError(f"{where}: the structural tag is too large (at most {MAX_NODES} formats, "
                                    f"nested at most {MAX_DEPTH} deep): make it smaller", param=where)
        if not isinstance(node, dict):
            raise _invalid(where, 'must be an object with a "type"')
        kind = node.get("type")
        if kind not in _KEYS:
            raise _unsupported(f"{where}.type", f"{kind!r} is not a supported format type; use one of "
                               + ", ".join(_KEYS))
        required, optional = _KEYS[kind]
        for key in node:
            if key != "type" and key not in required and key not in optional:
                raise _unsupported(f"{where}.{key}", f"is not a key of a {kind} format (it takes "
                                   f"{', '.join(required + optional) or 'no other key'}), so it is refused "
                                   "rather than ignored")
        for key in required:
            if key not in node:
                raise InvalidRequestError(f"{where}.{key}: a {kind} format needs it", param=f"{where}.{key}",
                                          code="missing_required_parameter")
        if kind == "const_string":
            return Const(self.text(node["value"], f"{where}.value"), where)
        if kind == "regex":
            return Regex(self.text(node["pattern"], f"{where}.pattern", empty=False), where)
        if kind == "json_schema":
            return JsonBody(_schema(node["json_schema"], f"{where}.json_schema"), f"{where}.json_schema")
        if kind == "any_text":
            return AnyText(where)
        if kind in ("sequence", "or"):
            elements = self.items(node["elements"], f"{where}.elements")
            parts = tuple(self.format(e, f"{where}.elements.{i}", depth + 1) for i, e in enumerate(elements))
            return Sequence(parts, where) if kind == "sequence" else Or(parts, where)
        if kind == "tag":
            return self.tag(node, where, depth)
        tags = tuple(self.tag_node(t, f"{where}.tags.{i}", depth + 1)
                     for i, t in enumerate(self.items(node["tags"], f"{where}.tags")))
        at_least_one = self.flag(node, "at_least_one", where)
        stop = self.flag(node, "stop_after_first", where)
        if kind == "tags_with_separator":
            return TagsWithSeparator(tags, self.text(node["separator"], f"{where}.separator"), at_least_one,
                                     stop, where)
        triggers = tuple(self.text(t, f"{where}.triggers.{i}", empty=False)
                         for i, t in enumerate(self.items(node["triggers"], f"{where}.triggers")))
        return check_triggers(TriggeredTags(triggers, tags, at_least_one, stop, where))

    def tag_node(self, node: Any, where: str, depth: int) -> Tag:
        """A ``tags`` entry: a ``tag`` format (its ``type`` may be left out)."""
        if isinstance(node, dict) and "type" not in node:
            node = {"type": "tag", **node}
        read = self.format(node, where, depth)
        if not isinstance(read, Tag):
            raise _invalid(f"{where}.type", "must be \"tag\"")
        return read

    def tag(self, node: dict[str, Any], where: str, depth: int) -> Tag:
        return Tag(self.text(node["begin"], f"{where}.begin"),
                   self.format(node["content"], f"{where}.content", depth + 1),
                   self.text(node["end"], f"{where}.end"), where)


def _schema(value: Any, where: str) -> Any:
    """A body's JSON Schema: an object or boolean, or JSON text holding one (vLLM's form)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _invalid(where, f"the schema is not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict | bool):
        raise _invalid(where, "must be a JSON Schema (an object, or a string holding one)")
    return value


def check_triggers(node: TriggeredTags) -> TriggeredTags:
    """400 unless every tag's begin starts with exactly one trigger and no trigger starts
    another (one would be taken before the other could complete)."""
    for i, a in enumerate(node.triggers):
        for j, b in enumerate(node.triggers):
            if i != j and b.startswith(a):
                raise _invalid(f"{node.where}.triggers.{j}", f"{b!r} starts with trigger {a!r}: no trigger "
                               "may be a prefix of another")
    for tag in node.tags:
        if not any(tag.begin.startswith(t) for t in node.triggers):
            raise _invalid(f"{tag.where}.begin", f"{tag.begin!r} starts with none of the triggers "
                           f"{list(node.triggers)!r}; each tag's begin must start with one")
    return node


def read_structural_tag(value: Any, param: str) -> Format:
    """The format tree of a ``structural_tag`` object (either form; ``type`` may be absent, as
    in ``structured_outputs.structural_tag``) or of JSON text holding one.  ``param``: where it
    sits in the request.  400s name the part."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise _invalid(param, f"is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                  f"{exc.colno})") from exc
    if not isinstance(value, dict):
        raise _invalid(param, "must be an object (or a JSON string holding one)")
    if value.get("type", "structural_tag") != "structural_tag":
        raise _invalid(f"{param}.type", 'must be "structural_tag"')
    reader = _Reader()
    if "format" in value:
        for key in value:
            if key not in ("type", "format"):
                raise _unsupported(f"{param}.{key}", "is not read beside format (send either format, or "
                                   "structures and triggers)")
        return reader.format(value["format"], f"{param}.format", 1)
    for key in value:
        if key not in ("type", "structures", "triggers"):
            raise _unsupported(f"{param}.{key}", "is not a structural_tag key this server reads (format; "
                               "or structures and triggers), so it is refused rather than ignored")
    for key in ("structures", "triggers"):
        if key not in value:
            raise InvalidRequestError(f"{param}.{key}: a structural_tag needs format, or structures and "
                                      "triggers", param=f"{param}.{key}", code="missing_required_parameter")
    tags = []
    for i, item in enumerate(reader.items(value["structures"], f"{param}.structures")):
        where = f"{param}.structures.{i}"
        if not isinstance(item, dict):
            raise _invalid(where, "must be an object with begin, schema and end")
        for key in item:
            if key not in ("begin", "schema", "end"):
                raise _unsupported(f"{where}.{key}", "is not a structure key (begin, schema, end), so it "
                                   "is refused rather than ignored")
        for key in ("begin", "schema", "end"):
            if key not in item:
                raise InvalidRequestError(f"{where}.{key}: a structure needs begin, schema and end",
                                          param=f"{where}.{key}", code="missing_required_parameter")
        reader.nodes += 2
        tags.append(Tag(reader.text(item["begin"], f"{where}.begin", empty=False),
                        JsonBody(_schema(item["schema"], f"{where}.schema"), f"{where}.schema"),
                        reader.text(item["end"], f"{where}.end"), where))
    if reader.nodes > MAX_NODES:
        raise GrammarLimitError(f"{param}.structures: at most {MAX_NODES // 2} structures are allowed",
                                param=f"{param}.structures")
    triggers = tuple(reader.text(t, f"{param}.triggers.{i}", empty=False)
                     for i, t in enumerate(reader.items(value["triggers"], f"{param}.triggers")))
    return check_triggers(TriggeredTags(triggers, tuple(tags), False, False, param))
