"""The enforcement report (afm_struct/grammar/enforcement.py) against what the ladder did:
statuses by rung, the rewrite that took a keyword, and the development set, where every
downgraded schema names at least one keyword not enforced and no exact one names any.

The dev-set test takes every 100th schema (34 of them, ~10 s at load 7 on 2 cores);
``AFM_STRUCT_RANDOM_EXAMPLES`` set (any value) runs the whole set (3,336 files, ~7 min on 2 busy
cores)."""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from afm_struct.cli import compile as compile_cli
from afm_struct.errors import AfmError
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.enforcement import NOT_EXACT, enforcement_report, keyword_sites, keyword_status
from afm_struct.grammar.spec import JsonSchemaRequest, Rung
from tests.dev_set import dev_doc, dev_files

STRIDE = 1 if os.environ.get("AFM_STRUCT_RANDOM_EXAMPLES") else 100


def _by_keyword(report: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(e["path"], e["keyword"]): e for e in report["keywords"]}


def test_exact_schema_with_rewrites_names_how(tokenizer) -> None:
    schema = {"type": "object", "properties": {
        "when": {"type": "string", "format": "date"},
        "kind": {"oneOf": [{"const": "a"}, {"const": "b"}]},
        "n": {"type": "integer", "not": {"const": 3}}},
        "required": ["when"], "additionalProperties": False}
    compiled = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
    assert compiled.rung is Rung.EXACT, compiled.reason
    report = _by_keyword(enforcement_report(compiled))
    assert report[("/properties/when", "format")] == {
        "path": "/properties/when", "keyword": "format", "status": "rewritten", "how": ["exact_format"]}
    assert report[("/properties/kind", "oneOf")]["how"] == ["oneof_disjoint"]
    assert report[("/properties/n", "not")]["how"] == ["not_positive"]
    # keywords inside a rewritten subschema keep their own status
    assert report[("/properties/kind/oneOf/0", "const")]["status"] == "enforced"
    assert {e["status"] for e in report.values()} == {"enforced", "rewritten"}


def test_relaxed_generic_and_unconstrained_rungs(tokenizer) -> None:
    relaxed = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True},
                                                "id": {"type": "string", "pattern": "^a"}}}
    compiled = compile_constraint(tokenizer, JsonSchemaRequest(relaxed, strict=True))
    assert compiled.rung is Rung.RELAXED and compiled.reason == "unsupported_keyword:uniqueItems"
    report = enforcement_report(compiled)
    statuses = {(e["path"], e["keyword"]): e["status"] for e in report["keywords"]}
    assert statuses[("/properties/tags", "uniqueItems")] == "validated"
    assert statuses[("/properties/id", "pattern")] == "relaxed"  # the table's "partial"
    assert statuses[("", "type")] == statuses[("/properties/tags", "type")] == "enforced"
    assert report["counts"] == {"enforced": 4, "rewritten": 0, "relaxed": 1, "validated": 1}
    served = enforcement_report(compiled, rung=Rung.UNCONSTRAINED, reason="a tool grammar owns the mask")
    assert served["rung"] == "unconstrained" and served["counts"]["validated"] == 6
    generic = enforcement_report(compiled, rung=Rung.GENERIC_JSON, reason="compile_timeout")
    kept = [(e["path"], e["keyword"]) for e in generic["keywords"] if e["status"] == "enforced"]
    assert kept == [("", "type")]


def test_keyword_sites_walk_subschemas_as_the_rewrites_do() -> None:
    schema = {"$defs": {"a/b": {"minimum": 1}}, "items": [{"type": "string"}, {"enum": [1]}],
              "dependencies": {"x": ["y"], "z": {"required": ["w"]}}, "title": "not a keyword",
              "properties": {"pattern": {"pattern": "^x"}}, "enum": [{"type": "x"}]}
    assert sorted(keyword_sites(schema)) == sorted([
        ("", "items"), ("", "dependencies"), ("", "properties"), ("", "enum"),
        ("/$defs/a~1b", "minimum"), ("/items/0", "type"), ("/items/1", "enum"),
        ("/dependencies/z", "required"), ("/properties/pattern", "pattern")])


def test_the_report_matches_the_ladder_on_the_dev_set(tokenizer) -> None:
    rungs: Counter[str] = Counter()
    wrong: list[tuple[int, str, Any]] = []
    for index in range(0, len(dev_files()), STRIDE):
        schema = dev_doc(index)["schema"]
        try:
            compiled = compile_constraint(tokenizer, JsonSchemaRequest(schema, strict=True))
        except AfmError:  # an invalid schema: refused, nothing served
            rungs["refused"] += 1
            continue
        rungs[str(compiled.rung)] += 1
        report = enforcement_report(compiled)
        assert json.loads(json.dumps(report)) == report
        named = [(e["path"], e["keyword"]) for e in report["keywords"] if e["status"] in NOT_EXACT]
        if compiled.rung is Rung.EXACT and named:
            wrong.append((index, "exact, yet names keywords not enforced", named[:3]))
        elif compiled.rung is not Rung.EXACT and not named:
            wrong.append((index, f"{compiled.rung} ({compiled.reason}), yet names none", report["counts"]))
    assert not wrong, wrong[:10]
    assert rungs["exact"] > 10 * (rungs["relaxed"] + rungs["generic_json"]), rungs


def _compile_cli(path: Path, capsys: Any, *, as_json: bool) -> str:
    args = argparse.Namespace(schema=str(path), backend="llguidance", whitespace="default",
                              property_order="schema", timeout=10.0, model=None, json=as_json)
    assert compile_cli.run(args) == 0
    return str(capsys.readouterr().out)


def test_compile_cli_prints_the_report(tmp_path: Path, capsys: Any, monkeypatch: Any, tokenizer: Any) -> None:
    import afm_struct.models

    monkeypatch.setattr(afm_struct.models, "load_tokenizer", lambda _source=None: tokenizer)
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}))
    report = json.loads(_compile_cli(path, capsys, as_json=True))["enforcement"]
    assert report["rung"] == "relaxed"
    assert [e for e in report["keywords"] if e["status"] == "validated"] == [
        {"path": "", "keyword": "uniqueItems", "status": "validated"}]
    text = _compile_cli(path, capsys, as_json=False)
    assert "enforcement: 3 enforced, 0 rewritten, 0 relaxed, 1 validated" in text
    assert "  validated / uniqueItems" in text


def test_the_outlines_backend_reads_the_tables_outlines_column() -> None:
    served = SimpleNamespace(kind="json_schema", rung=Rung.RELAXED, reason=None, schema={},
                             backend="outlines", rewrite_sites=())
    assert keyword_status("minimum", "", served, {})[0] == "validated"  # outlines=False
    assert keyword_status("maxLength", "", served, {})[0] == "enforced"
    assert keyword_status("minimum", "", SimpleNamespace(**{**vars(served), "backend": "llguidance"}),
                          {})[0] == "enforced"
