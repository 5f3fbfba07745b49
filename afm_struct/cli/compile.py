"""``afm-struct compile SCHEMA.json``: compile one JSON Schema and say how it will be enforced,
keyword by keyword (the enforcement report, :mod:`afm_struct.grammar.enforcement`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..errors import SchemaError


def run(args: argparse.Namespace) -> int:
    """Compile the schema file and print mode, reason, rewrites, backend, compile time and the
    enforcement report (``--json``: one object, the report under ``enforcement``)."""
    from ..grammar.compiler import ConstraintCompiler
    from ..grammar.enforcement import enforcement_report
    from ..grammar.spec import CompileOptions, JsonSchemaRequest
    from ..models import load_tokenizer

    path = Path(args.schema)
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise SchemaError(f"cannot read {path}: {exc.strerror}", path="$") from exc
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path} is not JSON: {exc.msg} (line {exc.lineno})", path="$") from exc
    # A MaskBench file wraps the schema with its tests: accept both shapes.
    schema = doc["schema"] if isinstance(doc, dict) and "tests" in doc and "schema" in doc else doc
    options = CompileOptions(backend=args.backend, whitespace=args.whitespace,
                             property_order=args.property_order, timeout_s=args.timeout)
    compiler = ConstraintCompiler(load_tokenizer(args.model), options)
    try:
        result = compiler.compile(JsonSchemaRequest(schema, strict=True))
    finally:
        compiler.close()
    fields = {"mode": result.mode.value, "rung": result.rung.value, "reason": result.reason,
              "rewrites": list(result.rewrites), "backend": result.backend,
              "compile_ms": round(result.compile_ms, 3)}
    report = enforcement_report(result)
    if args.json:
        print(json.dumps({**fields, "enforcement": report}))
        return 0
    for key, value in fields.items():
        shown = ", ".join(value) if isinstance(value, list) else value
        print(f"{key + ':':<12}{shown if shown not in (None, '') else '-'}")
    print("enforcement: " + ", ".join(f"{n} {s}" for s, n in report["counts"].items()))
    for entry in report["keywords"]:
        if entry["status"] != "enforced":  # the exceptions, one a line; --json lists them all
            how = f" ({', '.join(entry['how'])})" if "how" in entry else ""
            print(f"  {entry['status']:<10}{entry['path'] or '/'} {entry['keyword']}{how}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``compile``."""
    parser = sub.add_parser("compile", help="compile a JSON Schema; print mode, reason, rewrites, time")
    parser.add_argument("schema", help="a JSON Schema file (or a MaskBench file)")
    parser.add_argument("--backend", default="llguidance", choices=("llguidance", "outlines"))
    parser.add_argument("--whitespace", default="default", choices=("default", "compact", "flexible"))
    parser.add_argument("--property-order", default="schema", choices=("schema", "any"),
                        help="objects' properties only in the schema's order (default: every key is "
                             "forced) or in any order (each at most once)")
    parser.add_argument("--timeout", type=float, default=10.0, help="compile time limit (s)")
    parser.add_argument("--model", default=None, help="tokenizer source (default: the embedded model)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(func=run)
