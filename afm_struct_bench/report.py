"""``afm-struct bench report RESULTS... --out DIR``: one Markdown report with PNG plots, and
the same as one self-contained ``report.html`` (plots embedded, every run's environment:
:mod:`.report_html`).

Reads the JSON files written by ``bench masks``, ``bench decode``, ``bench extract``,
``bench serve`` and ``bench soak`` (the kind is told by the keys, so files can be passed in any order or as
folders), and writes ``DIR/report.md`` plus one PNG per plot.  A kind with no files simply has
no section; an unknown file is skipped with a warning, and a section that cannot be drawn from a
malformed file says so instead of failing the whole report.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .report_html import write_html

log = logging.getLogger("afm_struct_bench")

KINDS = ("masks", "decode", "extract", "serve", "soak")
DECODE_MODES = ("free", "constrained", "constrained_ff")
TITLES = {"masks": "Grammar compile and mask times", "decode": "Decoding speed and validity",
          "extract": "Extraction accuracy: free vs constrained", "serve": "Latency under load",
          "soak": "Soak: mixed (and hostile) traffic over time"}

Result = tuple[str, dict[str, Any]]  # (label, document)


def detect_kind(doc: Any) -> str | None:
    """``masks``, ``decode``, ``extract``, ``serve``, ``soak`` or None, from the document's keys."""
    if not isinstance(doc, dict):
        return None
    if {"outcomes", "cancels", "rss_bytes"} <= doc.keys():
        return "soak"
    if doc.get("benchmark") == "extract" or ("per_task" in doc and "summary" in doc):
        return "extract"
    runs = doc.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, dict) and "concurrency" in r for r in runs):
        return "serve"
    if "free_tok_s" in doc or "constrained_tok_s" in doc:
        return "decode"
    if "mask_us" in doc and "compile_us" in doc:
        return "masks"
    return None


def collect(paths: list[str]) -> dict[str, list[Result]]:
    """Results by kind; folders are searched for ``*.json``; unknown files are skipped."""
    files: list[Path] = []
    for p in map(Path, paths):
        files.extend(sorted(p.rglob("*.json")) if p.is_dir() else [p])
    found: dict[str, list[Result]] = {k: [] for k in KINDS}
    stems: dict[str, list[str]] = {k: [] for k in KINDS}
    for path in files:
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            log.warning("skipping %s: %s", path, exc)
            continue
        kind = detect_kind(doc)
        if kind is None:
            log.warning("skipping %s: not a masks, decode, extract, serve or soak result", path)
            continue
        label = doc.get("backend", path.stem) if kind == "masks" else path.stem
        found[kind].append((label, doc))
        stems[kind].append(path.stem)
    for kind, results in found.items():  # two masks runs of one backend: tell them by file name
        labels = [label for label, _ in results]
        if len(set(labels)) < len(labels):
            names = stems[kind] if len(set(stems[kind])) == len(stems[kind]) else \
                [f"{stem} ({i + 1})" for i, stem in enumerate(stems[kind])]
            results[:] = [(name, doc) for name, (_, doc) in zip(names, results, strict=True)]
    return found


# -- plotting ------------------------------------------------------------------------------------

def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def _plain_log_ticks(plt: Any, ax: Any) -> None:
    """``20`` instead of ``2 x 10^1`` on a log axis (minor ticks too)."""
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: f"{y:g}"))
    # Only 2x and 5x minor labels: all nine crowd the axis when the data span decades.
    ax.yaxis.set_minor_formatter(plt.FuncFormatter(lambda y, _: f"{y:g}" if f"{y:g}"[0] in "25" else ""))


def plot_bars(path: Path, title: str, groups: list[str], series: dict[str, list[float | None]], *,
              ylabel: str, log_scale: bool = False, percent: bool = False) -> None:
    """Grouped bars: one group per ``groups`` entry, one bar per series (None draws nothing)."""
    plt = _pyplot()
    n = len(groups)
    width_in = min(12.0, max(6.0, 1.4 * n + 2, 0.55 * n * max(1, len(series)) + 2))
    fig, ax = plt.subplots(figsize=(width_in, 4.2))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None else 0.0 for v in values]
        bars = ax.bar(xs, heights, width, label=name)
        for bar, v in zip(bars, values, strict=True):
            if v is not None and n * len(series) <= 24:  # beyond that the labels overlap
                text = f"{v:.0%}" if percent else f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"
                ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                            va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), groups, rotation=20 if len(groups) > 4 else 0, ha="right"
                  if len(groups) > 4 else "center")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log_scale:
        ax.set_yscale("log")
        _plain_log_ticks(plt, ax)
    if percent:
        ax.set_ylim(0, 1.12)
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: f"{y:.0%}"))
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_distributions(path: Path, title: str, data: dict[str, list[float]], *, ylabel: str) -> None:
    """One box (with the points) per label, log scale: compile times span orders of magnitude."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(data) + 2), 4.2))
    labels = list(data)
    ax.boxplot([data[k] for k in labels], showfliers=False)
    for i, k in enumerate(labels, start=1):
        n = len(data[k])
        jitter = [i + 0.25 * ((j * 7919) % 97 / 97 - 0.5) for j in range(n)]  # deterministic spread
        ax.scatter(jitter, data[k], s=6, alpha=0.4)
    ax.set_xticks(range(1, len(labels) + 1), [f"{k}\n(n={len(data[k])})" for k in labels])
    ax.set_yscale("log")
    _plain_log_ticks(plt, ax)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_serve(path: Path, results: list[Result]) -> None:
    """TTFT, end-to-end latency (p50/p95/p99), throughput and the server's CPU per token
    against concurrency; one line per run and mix (first round of each)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    for label, doc in results:
        for mix, runs in _serve_lines(doc).items():
            name = f"{label} {mix}" if mix else label
            conc = [r["concurrency"] for r in runs]
            for ax, key in zip(axes[:2], ("ttft_ms", "latency_ms"), strict=True):
                for q, style in styles.items():
                    ys = [(r.get(key) or {}).get(q) for r in runs]
                    if any(y is not None for y in ys):
                        ax.plot(conc, [y if y is not None else float("nan") for y in ys], style,
                                marker="o", label=f"{name} {q}")
            axes[2].plot(conc, [r.get("throughput_tok_s") or 0.0 for r in runs], marker="o", label=name)
            cpu = [r.get("server_cpu_us_per_token") for r in runs]
            if any(c is not None for c in cpu):
                axes[3].plot(conc, [c if c is not None else float("nan") for c in cpu], marker="o",
                             label=name)
    for ax, (name, unit) in zip(axes, (("time to first token", "ms"), ("request latency", "ms"),
                                      ("throughput", "tok/s"),
                                      ("server CPU per generated token", "µs")), strict=True):
        ax.set_title(name)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _serve_lines(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """A serve document's runs by mix (first round), sorted by concurrency; files written before
    ``--mixes`` have one unnamed mix."""
    first = min((r.get("round", 1) for r in doc["runs"]), default=1)
    lines: dict[str, list[dict[str, Any]]] = {}
    for r in doc["runs"]:
        if r.get("round", 1) == first:
            lines.setdefault(r.get("mix", ""), []).append(r)
    return {m: sorted(rs, key=lambda r: r["concurrency"]) for m, rs in lines.items()}


# -- sections ------------------------------------------------------------------------------------

def _fmt(value: Any, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def _pct(d: dict[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return value if isinstance(value, dict) else {}


def section_masks(results: list[Result], out: Path) -> list[str]:
    """Table of counts and percentiles; compile-time distribution; mask-time percentiles."""
    lines = ["| run | schemas | enforced | downgraded | compile error | validation err | invalidation err "
             "| compile p50 / p90 / p99 (ms) | mask p50 / p90 / p99 (µs) |", "|---" * 9 + "|"]
    for label, d in results:
        c, m = _pct(d, "compile_us"), _pct(d, "mask_us")
        ms = [None if c.get(q) is None else c[q] / 1e3 for q in ("p50", "p90", "p99")]
        lines.append(f"| {label} | {d.get('schemas', '–')} | {d.get('enforced', '–')} "
                     f"| {d.get('downgraded', '–')} | {d.get('compile_error', '–')} "
                     f"| {d.get('validation_error', '–')} | {d.get('invalidation_error', '–')} "
                     f"| {' / '.join(_fmt(v, '.2f') for v in ms)} "
                     f"| {' / '.join(_fmt(m.get(q)) for q in ('p50', 'p90', 'p99'))} |")
    raw = {label: [r["compile_us"] / 1e3 for r in d.get("per_schema", [])
                   if isinstance(r, dict) and r.get("compile_us")] for label, d in results}
    if all(raw.values()):
        plot_distributions(out / "masks_compile.png", "Compile time per schema", raw, ylabel="ms (log)")
    else:  # only percentiles recorded
        plot_bars(out / "masks_compile.png", "Compile time percentiles", [q for q in ("p50", "p90", "p99")],
                  {label: [_pct(d, "compile_us").get(q, 0) / 1e3 for q in ("p50", "p90", "p99")]
                   for label, d in results}, ylabel="ms (log)", log_scale=True)
    masks_raw = {label: [t for r in d.get("per_schema", []) if isinstance(r, dict)
                         for t in r.get("mask_us") or []] for label, d in results}
    if all(masks_raw.values()):
        plot_distributions(out / "masks_mask.png", "Time per token mask", masks_raw, ylabel="µs (log)")
    else:
        plot_bars(out / "masks_mask.png", "Time per token mask (percentiles)", ["p50", "p90", "p99"],
                  {label: [_pct(d, "mask_us").get(q) for q in ("p50", "p90", "p99")] for label, d in results},
                  ylabel="µs (log)", log_scale=True)
    return [*lines, "", "![compile time](masks_compile.png)", "", "![mask time](masks_mask.png)"]


def _decode_engines(label: str, d: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{series label: {tok_s, ttft_ms, valid_json_rate, schema_valid_rate}}`` for one file."""
    engines = d.get("per_engine")
    if isinstance(engines, dict) and engines:
        return {f"{label} {name}" if label else name: e for name, e in engines.items() if isinstance(e, dict)}
    tok = {m: d.get(f"{m}_tok_s") for m in DECODE_MODES}
    rest = {k: _pct(d, k) for k in ("ttft_ms", "valid_json_rate", "schema_valid_rate")}
    return {label: {"tok_s": tok, **rest}}


def section_decode(results: list[Result], out: Path) -> list[str]:
    """tok/s and validity per mode (and engine, when recorded)."""
    series: dict[str, dict[str, Any]] = {}
    for label, d in results:
        series.update(_decode_engines(label if len(results) > 1 else "", d) or {})
    lines = ["| run | mode | tok/s | TTFT (ms) | valid JSON | schema valid |", "|---|---|---|---|---|---|"]
    for name, e in series.items():
        for m in DECODE_MODES:
            ttft = _pct(e, "ttft_ms").get(m)
            ttft = ttft.get("p50") if isinstance(ttft, dict) else ttft
            vj, sv = _pct(e, "valid_json_rate").get(m), _pct(e, "schema_valid_rate").get(m)
            lines.append(f"| {name or 'decode'} | {m} | {_fmt(_pct(e, 'tok_s').get(m))} "
                         f"| {_fmt(ttft, '.0f')} | {_fmt(vj, '.0%')} | {_fmt(sv, '.0%')} |")
    speeds = {name or "decode": [_pct(e, "tok_s").get(m) for m in DECODE_MODES] for name, e in series.items()}
    plot_bars(out / "decode_tok_s.png", "Decode speed: free vs constrained vs fast-forward",
              list(DECODE_MODES), speeds, ylabel="tokens / s")
    groups = [f"{m}\n{k}" for k in ("valid JSON", "schema valid") for m in DECODE_MODES]
    plot_bars(out / "decode_validity.png", "Decoding validity", groups,
              {name or "decode": [_pct(e, key).get(m) for key in ("valid_json_rate", "schema_valid_rate")
                                  for m in DECODE_MODES] for name, e in series.items()},
              ylabel="rate", percent=True)
    return [*lines, "", "![tok/s](decode_tok_s.png)", "", "![validity](decode_validity.png)"]


_EXTRACT_METRICS = (("JSON valid", "json_valid_rate", "sanitized_json_valid_rate"),
                    ("schema valid", "schema_valid_rate", "sanitized_schema_valid_rate"),
                    ("field accuracy", "field_accuracy", "field_accuracy_sanitized"))


def section_extract(results: list[Result], out: Path) -> list[str]:
    """Validity and field accuracy, free (raw and sanitized) vs constrained; per category."""
    from .extract import markdown_table

    lines: list[str] = []
    series: dict[str, list[float | None]] = {}
    for label, d in results:
        summary = d.get("summary") or {}
        prefix = f"{label} " if len(results) > 1 else ""
        settings = d.get("settings") or {}
        keys = ("temperature", "seed", "max_tokens", "repetition_penalty", "fast_forward", "backend")
        shown = ", ".join(f"{k} {settings[k]}" for k in keys if k in settings)
        lines += [f"**{label}**: model `{d.get('model', '?')}`, {d.get('tasks', '?')} tasks; {shown}", ""]
        try:
            lines += [markdown_table(summary), ""]
        except (KeyError, TypeError, ValueError):
            lines += ["(summary incomplete)", ""]
        free, constrained = summary.get("free") or {}, summary.get("constrained") or {}
        series[f"{prefix}free"] = [free.get(raw) for _, raw, _ in _EXTRACT_METRICS]
        series[f"{prefix}free, sanitized"] = [free.get(clean) for _, _, clean in _EXTRACT_METRICS]
        series[f"{prefix}constrained"] = [constrained.get(raw) for _, raw, _ in _EXTRACT_METRICS]
        cats = d.get("per_category") or {}
        if cats:
            lines += ["| category | free field accuracy | constrained field accuracy |", "|---|---|---|"]
            lines += [f"| {c} | {_fmt(v.get('free'), '.0%')} | {_fmt(v.get('constrained'), '.0%')} |"
                      for c, v in cats.items()]
            lines.append("")
    plot_bars(out / "extract_validity.png", "Extraction: free vs constrained",
              [name for name, _, _ in _EXTRACT_METRICS], series, ylabel="rate", percent=True)
    lines.append("![extraction validity and accuracy](extract_validity.png)")
    cat_series: dict[str, list[float | None]] = {}
    categories = sorted({c for _, d in results for c in (d.get("per_category") or {})})
    for label, d in results:
        cats = d.get("per_category") or {}
        prefix = f"{label} " if len(results) > 1 else ""
        for mode in ("free", "constrained"):
            cat_series[prefix + mode] = [(cats.get(c) or {}).get(mode) for c in categories]
    if categories:
        plot_bars(out / "extract_categories.png", "Field accuracy by category", categories, cat_series,
                  ylabel="field accuracy", percent=True)
        lines += ["", "![field accuracy by category](extract_categories.png)"]
    return lines


def section_serve(results: list[Result], out: Path) -> list[str]:
    """Per concurrency level: throughput, TTFT and latency percentiles, errors."""
    lines = ["| run | mix | round | concurrency | throughput (tok/s) | server CPU per token (µs) "
             "| TTFT p50 / p95 / p99 (ms) | latency p50 / p95 / p99 (ms) | errors | downgrades |",
             "|---" * 10 + "|"]
    for label, d in results:
        for r in sorted(d["runs"], key=lambda r: (r.get("round", 1), r["concurrency"])):
            t, lat = _pct(r, "ttft_ms"), _pct(r, "latency_ms")
            lines.append(f"| {label} | {r.get('mix', '–')} | {r.get('round', 1)} | {r['concurrency']} "
                         f"| {_fmt(r.get('throughput_tok_s'))} "
                         f"| {_fmt(r.get('server_cpu_us_per_token'), '.0f')} "
                         f"| {' / '.join(_fmt(t.get(q), '.0f') for q in ('p50', 'p95', 'p99'))} "
                         f"| {' / '.join(_fmt(lat.get(q), '.0f') for q in ('p50', 'p95', 'p99'))} "
                         f"| {r.get('errors', '–')} | {r.get('downgrades', '–')} |")
    plot_serve(out / "serve_latency.png", results)
    return [*lines, "", "![latency under load](serve_latency.png)"]


def plot_rss(path: Path, results: list[Result]) -> None:
    """The server's resident memory over a soak, one line per run, warm-up value dashed."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.2))
    for label, doc in results:
        points = [(t / 60, b / 2**20) for t, b in doc.get("rss_samples") or [] if b]
        if not points:
            continue
        line = ax.plot(*zip(*points, strict=True), marker=".", label=label)[0]
        warm = (doc.get("rss_bytes") or {}).get("warm")
        if warm:
            ax.axhline(warm / 2**20, linestyle="--", color=line.get_color(), alpha=0.6)
            ax.axhline(warm * 1.05 / 2**20, linestyle=":", color=line.get_color(), alpha=0.6)
    ax.set_xlabel("minutes")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title("Server resident memory (dashed: after warm-up; dotted: +5%)")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section_soak(results: list[Result], out: Path) -> list[str]:
    """Per run: the soak's own tables (verdict, hostile kinds, harmed requests); RSS over time."""
    from .soak_summary import markdown

    lines: list[str] = []
    for label, doc in results:
        lines += [f"**{label}**", "", markdown(doc), ""]
    if any(doc.get("rss_samples") for _, doc in results):
        plot_rss(out / "soak_rss.png", results)
        lines.append("![RSS over the soak](soak_rss.png)")
    return lines


SECTIONS: dict[str, Callable[[list[Result], Path], list[str]]] = {
    "masks": section_masks, "decode": section_decode, "extract": section_extract, "serve": section_serve,
    "soak": section_soak}


def write_report(paths: list[str], out: Path) -> Path:
    """Write ``out/report.md`` and its PNGs from the result files; return the report path."""
    out.mkdir(parents=True, exist_ok=True)
    found = collect(paths)
    lines = ["# afm-struct benchmark report", ""]
    envs = [d["environment"] for rs in found.values() for _, d in rs
            if isinstance(d.get("environment"), dict)]
    if envs:
        e = envs[0]
        lines += [f"Environment (first result): {e.get('cpu', '?')}, {e.get('cores', '?')} cores, "
                  f"MLX device {e.get('mlx_device', '?')}, BLAS {e.get('blas', '?')}, "
                  f"python {e.get('python', '?')}, {e.get('time_utc', '?')}.", ""]
    for kind in KINDS:
        results = found[kind]
        if not results:
            continue
        lines += [f"## {TITLES[kind]} (`bench {kind}`)", "",
                  "Files: " + ", ".join(f"`{label}`" for label, _ in results), ""]
        try:
            lines += SECTIONS[kind](results, out)
        except Exception as exc:  # one malformed file must not cost the other sections
            log.warning("cannot render the %s section: %s", kind, exc)
            lines.append(f"(could not render this section: {exc})")
        lines.append("")
    if not any(found.values()):
        lines.append("No benchmark results found.")
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    write_html(report, [(label, d["environment"]) for rs in found.values() for label, d in rs
                        if isinstance(d.get("environment"), dict)])
    return report


def run(args: argparse.Namespace) -> int:
    """Build the report; exit 2 when no input exists."""
    missing = [p for p in args.results if not Path(p).exists()]
    if missing:
        print(f"afm-struct: error: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    report = write_report(args.results, Path(args.out))
    print(report)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench report``."""
    parser = sub.add_parser("report", help="Markdown and HTML report with plots from benchmark result files")
    parser.add_argument("results", nargs="+", help="result JSON files or folders of them")
    parser.add_argument("--out", required=True, help="output folder (report.md, PNGs, report.html)")
    parser.add_argument("--log-level", default="warning")
    parser.set_defaults(func=run)
