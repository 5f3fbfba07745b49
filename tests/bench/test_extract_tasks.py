"""Integrity of the extraction task file and the pure parts of ``bench extract``."""

from __future__ import annotations

import json

import jsonschema
import pytest

from afm_struct_bench.extract import build_messages, load_tasks, markdown_table, summarize_mode
from afm_struct_bench.scoring import count_leaves

TASKS = load_tasks()


def test_enough_tasks_and_categories() -> None:
    assert len(TASKS) >= 20
    assert len({t["category"] for t in TASKS}) >= 5
    ids = [t["id"] for t in TASKS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("task", TASKS, ids=[t["id"] for t in TASKS])
def test_task_is_well_formed(task: dict) -> None:
    assert set(task) == {"id", "category", "source", "schema", "expected"}
    schema = task["schema"]
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(task["expected"], schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert len(schema["required"]) >= 4
    assert count_leaves(task["expected"]) >= 5
    assert 2 <= task["source"].count(". ") + 1 and len(task["source"]) > 150


def test_some_tasks_nest_objects_or_arrays() -> None:
    kinds = {p.get("type") for t in TASKS for p in t["schema"]["properties"].values()}
    assert {"array", "object", "boolean", "integer", "number", "string"} <= kinds
    assert any("enum" in p for t in TASKS for p in t["schema"]["properties"].values())


def test_prompt_shows_schema_and_source() -> None:
    task = TASKS[0]
    [message] = build_messages(task)
    assert task["source"] in message["content"]
    assert '"additionalProperties": false' in message["content"]


def test_summary_and_table() -> None:
    row = {"json_valid": True, "schema_valid": False, "sanitized_json_valid": True,
           "sanitized_schema_valid": False, "fields_matched": 3, "fields_total": 4,
           "fields_matched_sanitized": 3, "decode_tok_s": 10.0, "ttft_ms": 50.0,
           "completion_tokens": 20, "finish_reason": "stop"}
    bad = {**row, "json_valid": False, "sanitized_json_valid": False, "fields_matched": 0,
           "fields_matched_sanitized": 0, "finish_reason": "length"}
    summary = summarize_mode([row, bad])
    assert summary["json_valid_rate"] == 0.5 and summary["schema_valid_rate"] == 0.0
    assert summary["field_accuracy"] == 3 / 8
    assert summary["field_accuracy_schema_valid_only"] is None
    assert summarize_mode([{**row, "schema_valid": True}, bad])["field_accuracy_schema_valid_only"] == 0.75
    assert summary["finish_reasons"] == {"stop": 1, "length": 1}
    table = markdown_table({"free": summary, "constrained": summary})
    assert table.count("\n") == 3 and "37.5%" in table


def test_judge_raw_vs_sanitized(tokenizer) -> None:
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct_bench.extract import judge

    task = next(t for t in TASKS if t["id"] == "contact_01")
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(task["schema"]))
    exact = json.dumps(task["expected"])
    ok = judge(constraint, task["expected"], exact)
    assert ok["json_valid"] and ok["schema_valid"] and ok["fields_matched"] == ok["fields_total"] == 5
    fenced = judge(constraint, task["expected"], f"Sure! Here it is:\n```json\n{exact}\n```\nAnything else?")
    assert not fenced["json_valid"] and not fenced["schema_valid"] and fenced["fields_matched"] == 0
    assert fenced["sanitized_json_valid"] and fenced["sanitized_schema_valid"]
    assert fenced["fields_matched_sanitized"] == 5
    partial = judge(constraint, task["expected"], '{"name": "priya  raman", "email": 3}')
    assert partial["json_valid"] and not partial["schema_valid"] and partial["fields_matched"] == 1
    assert partial["wrong"] == ["email"] and "phone" in partial["missing"]


def test_fitting_budget_is_reported_apart() -> None:
    ok = {"json_valid": True, "schema_valid": True, "sanitized_json_valid": True,
          "sanitized_schema_valid": True, "fields_matched": 2, "fields_total": 2,
          "fields_matched_sanitized": 2, "completion_tokens": 20, "finish_reason": "length",
          "fits_budget": True}
    cut = {**ok, "schema_valid": False, "json_valid": False, "fits_budget": False}
    summary = summarize_mode([ok, cut, cut])
    assert summary["tasks_fitting_budget"] == 1 and summary["schema_valid_rate_fitting"] == 1.0
    assert "1 of 3 tasks have an instance that fits" in markdown_table({"constrained": summary})


def test_shortest_instance_is_an_upper_bound_that_validates(tokenizer) -> None:
    """The search's instance is a real one: its tokens decode to text the schema accepts."""
    from afm_struct.grammar.closer.completion import closing_vocab_for, shortest_completion
    from afm_struct.grammar.compiler import compile_constraint
    from afm_struct.grammar.spec import JsonSchemaRequest
    from afm_struct_bench.extract import shortest_instance_tokens

    task = next(t for t in TASKS if t["id"] == "contact_01")
    constraint = compile_constraint(tokenizer, JsonSchemaRequest(task["schema"]))
    n = shortest_instance_tokens(tokenizer, constraint, tokenizer.vocab_size)
    found = shortest_completion(constraint.new_matcher(), closing_vocab_for(tokenizer),
                                vocab_size=tokenizer.vocab_size, decode=tokenizer.decode, max_tokens=2048)
    assert n is not None and found is not None and n == len(found) > 5
    assert constraint.validate(tokenizer.decode(found)).ok
