"""Tiny random-weight models of every family behind live servers, and one fuzz request sent to one.

:class:`FamilyServers` builds a family's tiny GGUF (tests/models/gguf_factory.py for the dense
families, gguf_moe_factory.py for the mixture-of-experts ones), loads it the way ``afm-struct
serve --model tiny.gguf`` does and serves it over real HTTP on an ephemeral port, on first use.
Between them the families write every tool syntax the project supports: Hermes (qwen2, qwen3),
Llama JSON (llama), Mistral's two (mistral, mistral_args), Qwen3-Coder XML (qwen3_moe), GLM's
key/value tags (glm4_moe), Harmony channels (gpt_oss) and pythonic calls (llama_pythonic: Llama's
vocabulary under a template that writes ``[fn(a=1)]``; llama_harmony: Harmony's tags as text).

:func:`send` posts a :class:`FuzzCase` (streamed or not, cancelled by its
``X-Request-ID`` after some events when the case says so) and returns the contract's verdict.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from afm_struct.decoding.reasoning_gate import THINK_TAGS
from afm_struct.tools.formats import detect_format

from .contract import Violation, check
from .requests import FuzzCase

gguf_factory = __import__("pytest").importorskip("tests.models.gguf_factory")
gguf_moe_factory = __import__("pytest").importorskip("tests.models.gguf_moe_factory")

ROOT = Path(__file__).resolve().parents[2]
TOOL_FORMATS = ROOT / "grammars" / "tool_formats.json"
TOOL_TEMPLATES = ROOT / "tests" / "tools" / "data"


def _on_llama(template: str) -> Callable[[], Any]:
    """Llama 3.2's vocabulary and weights under another syntax's template (tests/tools/data)."""
    text = (TOOL_TEMPLATES / f"{template}.jinja").read_text(encoding="utf-8")
    return lambda: replace(gguf_factory.llama(), template=text)


# Family → its tiny model's builder.  The dense families first, in the order the survey's seeds
# were first drawn in (seed + index), then those added for the syntaxes of issue 29; Harmony
# on Llama's vocabulary, which has none of its special tokens, writes every tag as text.
BUILDERS: dict[str, Callable[[], Any]] = {
    **{name: gguf_factory.FAMILIES[name] for name in sorted(gguf_factory.FAMILIES)},
    **gguf_moe_factory.MOE_FAMILIES,
    "llama_pythonic": _on_llama("pythonic"),
    "llama_harmony": _on_llama("harmony"),
}
FAMILIES = tuple(BUILDERS)
# Token types a vocabulary marks as never-text: unknown (2), control (3), user-defined (4, where
# tool-call and thinking tags live).
NOT_TEXT = (2, 3, 4)


def family_markup(tiny: Any) -> tuple[str, ...]:
    """Every string that must never reach ``tiny``'s content or reasoning: its vocabulary's
    control and user-defined tokens, the tool formats' markers and thinking tags it holds as
    tokens, and every tag of the syntax its template writes, whether or not a token spells it
    (:func:`syntax_tags`)."""
    vocab = tiny.vocab
    marked = {t for t, kind in zip(vocab.tokens, vocab.types, strict=True) if kind in NOT_TEXT}
    tags = {tag for pair in THINK_TAGS for tag in pair}
    for fmt in json.loads(TOOL_FORMATS.read_text())["formats"]:
        tags |= {fmt.get(k) or "" for k in ("open", "close", "args_marker")} | set(fmt.get("markup", ()))
    own = syntax_tags(detect_format(tiny.template))
    return tuple(sorted(marked | (tags & set(vocab.tokens)) | own))


def syntax_tags(fmt: Any) -> set[str]:
    """The tags of one tool syntax as the model writes them: its markers and result/tool-list
    tags, its own reasoning channel's, and the tags around names, keys and values (Qwen3-Coder's
    ``<parameter=``, GLM's ``<arg_key>``), each split at whitespace.  Bare brackets and commas
    (pythonic's list, Mistral's array) are ordinary text elsewhere, so tags shorter than two
    characters are left out."""
    texts = [*fmt.markup, *(fmt.reasoning or ())]
    if fmt.body == "tagged":
        layout = fmt.layout
        texts += [layout.name_before, layout.name_after, layout.key_before, layout.key_after,
                  layout.value_after, layout.call_after]
    return {piece for text in texts for piece in text.split() if len(piece) >= 2}


@dataclass
class Family:
    """One family's live server and its markup."""

    name: str
    url: str
    markup: tuple[str, ...]
    server: Any


@dataclass
class FamilyServers:
    """Family name → a live server on its tiny model, started on first use."""

    directory: Path
    live: dict[str, Family] = field(default_factory=dict)

    def get(self, name: str) -> Family:
        if name not in self.live:
            from afm_struct.models.loader import load_model
            from server.live import start_server

            tiny = BUILDERS[name]()
            gguf_factory.build_reference(tiny)
            path = gguf_factory.write_gguf(tiny, self.directory / f"{name}.gguf")
            server = start_server(load_model(str(path)))
            self.live[name] = Family(name, server.url, family_markup(tiny), server)
        return self.live[name]

    def stop(self) -> None:
        for family in self.live.values():
            family.server.stop()
        self.live.clear()


@dataclass
class Outcome:
    """The verdict on one request, with what is needed to reproduce it."""

    family: str
    case: FuzzCase
    status: int
    violations: list[Violation]
    finish: str | None = None

    def report(self) -> str:
        lines = [f"{self.family}: HTTP {self.status}, {len(self.violations)} violation(s)"]
        lines += [f"  {v}" for v in self.violations]
        lines.append(f"  request: {self.case}")
        return "\n".join(lines)


def send(family: Family, case: FuzzCase, timeout: float = 120.0) -> Outcome:
    """Post ``case`` to ``family``'s server and check the response against the contract."""
    url = f"{family.url}/v1/chat/completions"
    request_id = f"fuzz-{uuid.uuid4().hex[:12]}"
    headers = {"X-Request-ID": request_id}
    if not case.body.get("stream"):
        r = httpx.post(url, json=case.body, headers=headers, timeout=timeout)
        payload = _json(r)
        found = check(case.body, family.markup, r.status_code, dict(r.headers), json_body=payload)
        finish = (
            ((payload or {}).get("choices") or [{}])[0].get("finish_reason") if r.status_code == 200 else None
        )
        return Outcome(family.name, case, r.status_code, found, finish)
    payloads: list[str] = []
    cancelled = False
    framing: list[Violation] = []
    with httpx.stream("POST", url, json=case.body, headers=headers, timeout=timeout) as r:
        if r.status_code != 200:
            r.read()
            found = check(case.body, family.markup, r.status_code, dict(r.headers), json_body=_json(r))
            return Outcome(family.name, case, r.status_code, found)
        expect_blank = False
        for line in _sse_lines(r):
            if expect_blank:
                if line != "":
                    framing.append(Violation("framing", f"an event not followed by a blank line: {line!r}"))
                expect_blank = False
                continue
            if not line.startswith("data: "):
                framing.append(Violation("framing", f"not a data line: {line!r}"))
                continue
            payloads.append(line[len("data: ") :])
            expect_blank = True
            if case.cancel_after is not None and len(payloads) == case.cancel_after:
                c = httpx.post(f"{family.url}/v1/chat/completions/{request_id}/cancel", timeout=timeout)
                cancelled = c.status_code == 200
        status, response_headers = r.status_code, dict(r.headers)
    found = framing + check(
        case.body, family.markup, status, response_headers, payloads=payloads, cancelled=cancelled
    )
    finish = next(
        (
            c["choices"][0]["finish_reason"]
            for c in _chunks(payloads)
            if c.get("choices") and c["choices"][0].get("finish_reason")
        ),
        None,
    )
    return Outcome(family.name, case, status, found, finish)


def _sse_lines(r: httpx.Response) -> Any:
    """The body's lines as SSE reads them: split at LF only (the server ends lines with LF).
    httpx's ``iter_lines`` also splits at U+0085, U+2028 and U+2029, which JSON may hold raw."""
    pending = ""
    for text in r.iter_text():
        pending += text
        *lines, pending = pending.split("\n")
        yield from (line.removesuffix("\r") for line in lines)
    if pending:
        yield pending


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None


def _chunks(payloads: list[str]) -> list[dict[str, Any]]:
    out = []
    for p in payloads:
        try:
            value = json.loads(p)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out
