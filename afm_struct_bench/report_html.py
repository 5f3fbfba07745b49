"""The benchmark report as one self-contained HTML file: ``report.html`` beside ``report.md``.

The Markdown report (:mod:`.report`) is rendered here with the few constructs it uses
(headings, pipe tables, paragraphs, list items, ``**bold**`` and ``code``), each plot embedded
as a base64 PNG (the file needs nothing beside it: mail it, attach it to an issue), and the
environment of every result file (versions, CPU, cores, MLX device, BLAS, command, time) in a
table at the end.  Standard library only.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")
_INLINE = re.compile(r"`([^`]+)`|\*\*([^*]+)\*\*")
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;margin:.6em 0;font-size:13px}
th,td{border:1px solid #d2d2d7;padding:.2em .5em}
th{background:#f5f5f7}td{font-variant-numeric:tabular-nums}img{max-width:100%;margin:.5em 0}
code{background:#f5f5f7;padding:0 .2em;border-radius:3px}
h2{border-bottom:1px solid #d2d2d7;padding-bottom:.2em}"""


def inline(text: str) -> str:
    """One line's text, escaped, with ``code`` and ``**bold**`` marked up."""
    out, at = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[at:m.start()]))
        out.append(f"<code>{html.escape(m.group(1))}</code>" if m.group(1) is not None
                   else f"<strong>{html.escape(m.group(2))}</strong>")
        at = m.end()
    out.append(html.escape(text[at:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table(rows: list[str]) -> str:
    body = [r for r in rows if not re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*\|?", r.strip())]
    head, rest = body[0], body[1:]
    parts = ["<table><thead><tr>", *(f"<th>{inline(c)}</th>" for c in _cells(head)), "</tr></thead><tbody>"]
    for row in rest:
        parts += ["<tr>", *(f"<td>{inline(c)}</td>" for c in _cells(row)), "</tr>"]
    return "".join([*parts, "</tbody></table>"])


def _image(alt: str, src: str, folder: Path) -> str:
    path = folder / src
    if not path.is_file() or path.suffix.lower() != ".png":
        return f"<p>(missing plot {html.escape(src)})</p>"
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def render(markdown: str, folder: Path) -> str:
    """The HTML body of the report's Markdown; images are read from ``folder`` and embedded."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("|"):
            block = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                block.append(lines[i])
                i += 1
            out.append(_table(block))
            continue
        i += 1
        stripped = line.strip()
        if not stripped:
            continue
        if (m := re.match(r"^(#{1,4})\s+(.*)$", stripped)) is not None:
            level = len(m.group(1))
            out.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
        elif (m := _IMAGE.match(stripped)) is not None:
            out.append(_image(m.group(1), m.group(2), folder))
        elif stripped.startswith(("- ", "* ")):
            out.append(f"<ul><li>{inline(stripped[2:])}</li></ul>")
        else:
            out.append(f"<p>{inline(stripped)}</p>")
    return "\n".join(out)


def environment_section(environments: Iterable[tuple[str, dict[str, Any]]]) -> str:
    """A table per distinct environment: every field, versions one per row."""
    seen: list[dict[str, Any]] = []
    labels: list[list[str]] = []
    for label, env in environments:
        if env in seen:
            labels[seen.index(env)].append(label)
        else:
            seen.append(env)
            labels.append([label])
    if not seen:
        return "<h2>Environment</h2><p>No result file recorded its environment.</p>"
    parts = ["<h2>Environment</h2>"]
    for env, names in zip(seen, labels, strict=True):
        parts.append(f"<p>Results: {', '.join(f'<code>{html.escape(n)}</code>' for n in names)}</p>")
        rows = []
        for key, value in env.items():
            if isinstance(value, dict):
                rows += [(f"{key}: {k}", v) for k, v in value.items()]
            else:
                rows.append((key, value))
        cells = [(html.escape(str(k)), html.escape(v if isinstance(v, str) else json.dumps(v)))
                 for k, v in rows]
        parts.append("<table><tbody>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in cells)
                     + "</tbody></table>")
    return "".join(parts)


def write_html(report_md: Path, environments: Iterable[tuple[str, dict[str, Any]]]) -> Path:
    """Write ``report.html`` beside ``report_md`` (its PNGs embedded); return its path."""
    folder = report_md.parent
    body = render(report_md.read_text(), folder)
    page = (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>afm-struct benchmark report</title><style>{_STYLE}</style></head><body>\n"
            f"{body}\n{environment_section(environments)}\n</body></html>\n")
    path = folder / "report.html"
    path.write_text(page)
    return path
