"""Tool-call formats as data: the table in ``grammars/tool_formats.json`` and the grammar templates.

A :class:`ToolFormat` says how one model family writes calls (markers, body shape, key names)
and how calls and results are written back into history.  The format is chosen from the chat
template (the first format whose marker the template mentions) unless configured by name;
models whose template knows no tools get the table's default.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequestError
from ..resources import data_dir

if TYPE_CHECKING:
    from ..models.tokenizer import Tokenizer

log = logging.getLogger(__name__)
GRAMMARS_DIR = data_dir("grammars")
TABLE_FILE = "tool_formats.json"
BODIES = ("object", "array", "sequence", "name_args", "tagged", "pythonic")
# The writings of a call's arguments that are not a JSON object: each has one grammar builder
# and one streaming parser (afm_struct.tools.syntaxes), whatever family uses it.
NON_JSON_BODIES = ("tagged", "pythonic")


@dataclass(frozen=True)
class History:
    """How assistant calls and tool results are rendered for templates without tool support."""

    call: str = "{call}"
    calls_open: str = ""
    calls_separator: str = "\n"
    calls_close: str = ""
    result: str = "{content}"
    result_role: str = "user"


@dataclass(frozen=True)
class Layout:
    """The literal text around a call's parts, for the ``tagged`` and ``pythonic`` bodies.

    ``tagged`` (Qwen3-Coder's XML parameters, GLM's key/value tags): a call is
    ``name_before NAME name_after`` then, per argument, ``key_before KEY key_after VALUE
    value_after``, then ``call_after``; a value is raw text for a string parameter, else JSON.
    ``pythonic``: ``NAME(key=VALUE, ...)`` with Python literals, calls joined by the format's
    separator between ``list_open`` and ``list_close`` (brackets, not tags: never markup).
    ``name_suffix`` (``name_args`` bodies): text the
    grammar writes between the name and the args marker (Harmony's space).
    """

    name_before: str = ""
    name_after: str = ""
    key_before: str = ""
    key_after: str = ""
    value_after: str = ""
    call_after: str = ""
    name_suffix: str = ""
    list_open: str = ""
    list_close: str = ""


@dataclass(frozen=True)
class ToolFormat:
    """One tool-call syntax (see the table's comment for the fields)."""

    name: str
    open: str
    close: str
    body: str
    separator: str
    name_key: str
    arguments_key: str
    arguments: str
    grammar: str
    template_any: tuple[str, ...] = ()
    description: str = ""
    history: History = field(default_factory=History)
    argument_aliases: tuple[str, ...] = ("arguments", "parameters")
    args_marker: str = ""  # body name_args: the marker between the bare name and the arguments
    extra_markup: tuple[str, ...] = ()  # the table's "markup": result and tool-list tags
    layout: Layout = field(default_factory=Layout)
    # The format's own reasoning channel (Harmony's analysis channel), when it has one.
    reasoning: tuple[str, str] | None = None
    # Substrings of the probe conversation rendered by the model's template that identify it.
    probe_any: tuple[str, ...] = ()

    def grammar_template(self) -> str:
        """The Lark template text of this format (``{{...}}`` placeholders unfilled)."""
        return _read_text(self.grammar)

    @property
    def markup(self) -> tuple[str, ...]:
        """Every tag of this syntax (call markers, result and tool-list tags): never content."""
        tags = (self.open, self.close, self.args_marker, *self.extra_markup)
        if self.body == "tagged":
            tags += tuple(t.strip() for t in (self.layout.call_after,) if t.strip())
        return tuple(dict.fromkeys(t for t in tags if t))

    @property
    def argument_keys(self) -> tuple[str, ...]:
        """Keys accepted as the arguments of a parsed call (the format's first)."""
        return (self.arguments_key, *(k for k in self.argument_aliases if k != self.arguments_key))


@dataclass(frozen=True)
class FormatTable:
    """The whole table: formats in detection order, the default and the prompt texts."""

    formats: tuple[ToolFormat, ...]
    default: str
    system_prompt: str
    choice_text: dict[str, str]

    def get(self, name: str) -> ToolFormat:
        """The format called ``name``; InvalidRequestError if unknown."""
        for fmt in self.formats:
            if fmt.name == name:
                return fmt
        known = ", ".join(f.name for f in self.formats)
        raise InvalidRequestError(f"unknown tool-call format {name!r}; known formats: {known}",
                                  param="tool_format")

    @property
    def default_format(self) -> ToolFormat:
        """The format used when the template gives no hint."""
        return self.get(self.default)


@functools.cache
def _read_text(name: str, directory: str = str(GRAMMARS_DIR)) -> str:
    return (Path(directory) / name).read_text(encoding="utf-8")


def parse_table(data: dict[str, Any]) -> FormatTable:
    """A :class:`FormatTable` from the table's JSON (checked: a bad table fails at start-up)."""
    aliases = tuple(data.get("aliases", {}).get("arguments", ("arguments", "parameters")))
    formats = []
    for raw in data["formats"]:
        if raw["body"] not in BODIES:
            raise ValueError(f"tool format {raw['name']!r}: body must be one of {BODIES}")
        if (raw["body"] == "name_args") != bool(raw.get("args_marker")):
            raise ValueError(f"tool format {raw['name']!r}: args_marker goes with body name_args")
        if raw["arguments"] not in ("object", "string"):
            raise ValueError(f"tool format {raw['name']!r}: arguments must be object or string")
        layout = Layout(**raw.get("layout", {}))
        if raw["body"] == "tagged" and not (layout.key_before and layout.value_after):
            raise ValueError(f"tool format {raw['name']!r}: a tagged body needs key_before and "
                             "value_after in its layout")
        reasoning = raw.get("reasoning")
        if reasoning is not None and (len(reasoning) != 2 or not all(reasoning)):
            raise ValueError(f"tool format {raw['name']!r}: reasoning is [open, close]")
        formats.append(ToolFormat(
            name=raw["name"], open=raw["open"], close=raw["close"], body=raw["body"],
            separator=raw["separator"], name_key=raw["name_key"], arguments_key=raw["arguments_key"],
            arguments=raw["arguments"], grammar=raw["grammar"],
            template_any=tuple(raw.get("template_any", ())), description=raw.get("description", ""),
            history=History(**raw.get("history", {})), argument_aliases=aliases,
            args_marker=raw.get("args_marker", ""), extra_markup=tuple(raw.get("markup", ())),
            layout=layout, reasoning=tuple(reasoning) if reasoning else None,
            probe_any=tuple(raw.get("probe_any", ()))))
    table = FormatTable(formats=tuple(formats), default=data["default"],
                        system_prompt=data["system_prompt"], choice_text=dict(data["choice_text"]))
    table.get(table.default)  # the default must exist
    return table


@functools.cache
def load_table(directory: str = str(GRAMMARS_DIR)) -> FormatTable:
    """The format table from ``directory`` (cached; the files are read once)."""
    with open(Path(directory) / TABLE_FILE, encoding="utf-8") as fh:
        return parse_table(json.load(fh))


def chat_template_of(tokenizer: Tokenizer) -> str:
    """The tokenizer's chat template text ('' when it has none)."""
    template = getattr(getattr(tokenizer, "hf", tokenizer), "chat_template", None)
    if isinstance(template, dict):  # some tokenizers keep named templates ({"default", "tool_use"})
        template = template.get("tool_use") or template.get("default") or ""
    return template if isinstance(template, str) else ""


def template_knows_tools(template: str) -> bool:
    """True when the chat template renders ``tools`` itself (it reads the ``tools`` variable)."""
    return "tools" in template


PROBE_TOOLS = [{"type": "function", "function": {
    "name": "probe_fn", "description": "probe",
    "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}},
                   "required": ["probe_arg"]}}}]
PROBE_MESSAGES = [
    {"role": "user", "content": "probe"},
    # Mistral's templates want 9 alphanumeric characters as the id.
    {"role": "assistant", "content": "", "tool_calls": [{"id": "probe0001", "type": "function", "function": {
        "name": "probe_fn", "arguments": {"probe_arg": "probe_value"}}}]},
    {"role": "tool", "tool_call_id": "probe0001", "name": "probe_fn", "content": "probe_result"},
]
_PROBED: dict[tuple[int, str], str | None] = {}


def render_probe(template: str) -> str | None:
    """The probe conversation (one call of ``probe_fn``) rendered by ``template``; None if the
    template cannot render it."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(template).render(
            messages=PROBE_MESSAGES, tools=PROBE_TOOLS, add_generation_prompt=True,
            bos_token="", eos_token="")
    except Exception:  # any template error: the template cannot tell us; fall back
        return None


def probe_format(template: str, table: FormatTable) -> ToolFormat | None:
    """The format whose call the template writes, read off the rendered probe (cached)."""
    key = (id(table), template)
    if key not in _PROBED:
        rendered = render_probe(template) if template_knows_tools(template) else None
        found = None
        if rendered:
            found = next((f.name for f in table.formats
                          if any(p in rendered for p in f.probe_any)), None)
        _PROBED[key] = found
    name = _PROBED[key]
    return table.get(name) if name else None


def detect_format(template: str, *, name: str | None = None,
                  table: FormatTable | None = None) -> ToolFormat:
    """The format for a chat template: ``name`` if configured, else the one whose call the
    template writes when it renders a probe conversation, else the first whose marker the
    template mentions, else the table's default (logged once per template)."""
    table = table or load_table()
    if name:
        return table.get(name)
    probed = probe_format(template, table)
    if probed is not None:
        return probed
    for fmt in table.formats:
        if any(marker in template for marker in fmt.template_any):
            return fmt
    if template_knows_tools(template) and template not in _LOGGED:
        _LOGGED.add(template)
        log.info("tool-call syntax: the chat template writes no call this table knows; using %r",
                 table.default)
    return table.default_format


_LOGGED: set[str] = set()
