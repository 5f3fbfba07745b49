"""400s for a bad schema, regex or grammar say what to fix, never quote the engine's dump."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from afm_struct.errors import SchemaError
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.diagnostics import grammar_problem, regex_problem, safe_phrase
from afm_struct.grammar.spec import JsonSchemaRequest, LarkRequest, RegexRequest

# What llguidance / jsonschema text looks like: code excerpts, carets, its grammar, Python reprs.
ENGINE_TEXT = re.compile(r"\n|\^|start:|regex parse error|\(in regex\)|Failed validating|"
                         r"On instance|'[^']*' is|\{'")

CASES = [  # (request, path, words the message must contain)
    (RegexRequest("a(b"), "$.pattern", "invalid regex: unclosed group"),
    (RegexRequest("[z-a]"), "$.pattern", "invalid character class range"),
    (LarkRequest("start: foo"), "$.grammar", 'line 1, column 8: unknown rule or terminal name "foo"'),
    (LarkRequest("start: /a(/"), "$.grammar", "invalid regex (unclosed group)"),
    (LarkRequest('start: %json {"type": "strin"}'), "$.grammar", "the %json schema does not compile"),
    (JsonSchemaRequest({"type": "strin"}), "$.type", '"strin" is not a valid value'),
    (JsonSchemaRequest({"properties": {"a": {"minLength": -1}}}), "$.properties.a.minLength", "-1"),
    (JsonSchemaRequest({"required": "a"}), "$.required", '"a" must be of type array'),
    (JsonSchemaRequest({"properties": {"a": {"type": {"x": 1}}}}), "$.properties.a.type", '{"x":1}'),
]


@pytest.mark.parametrize(("request_", "path", "words"), CASES, ids=[str(i) for i in range(len(CASES))])
def test_compile_errors_name_the_problem_without_engine_text(tokenizer, request_, path, words) -> None:
    with pytest.raises(SchemaError) as err:
        compile_constraint(tokenizer, request_)
    message = err.value.message
    assert err.value.status == 400 and err.value.path == path
    assert words in message, message
    assert not ENGINE_TEXT.search(message), message


def test_only_plain_phrases_pass() -> None:
    assert safe_phrase("unclosed group") == "unclosed group"
    for dump in ("state: {lexer: 3}", "line one\nline two", "x" * 200, "Token(12) [1, 2]", ""):
        assert safe_phrase(dump) is None
    assert regex_problem("regex parse error:\n  a(\n   ^\nerror: {weird [state]}") == (
        "the pattern is not a valid regular expression for the grammar engine")
    assert grammar_problem("at 3(1): Earley {set: [1, 2]}\n  3 | x") == (
        "at line 3, column 1: the grammar does not compile")


_SOURCES = [p for d in ("afm_struct", "server") for p in (Path(__file__).parents[2] / d).rglob("*.py")
            if "bench" not in p.parts and "cli" not in p.parts]
# An AfmError (or subclass) built from an f-string that interpolates a caught exception.
_LEAK = re.compile(r"(?:Error|Exceeded)\(\s*f[\"'][^\"']*\{(?:exc|err|e)\b")


def test_no_client_error_interpolates_an_exception() -> None:
    """Grep: request-path errors never put a caught exception's text in their message (the CLI,
    model loading (ModelLoadError) and reading the API key file at start-up are operator-facing
    and may)."""
    # Also operator-facing: opening the response store at start-up (a schema from a newer
    # afm-struct) and parsing the configured API keys.
    operator = ("ModelLoadError(", "cannot read the API key file", "cannot use the response store",
                "(check --api-key, --api-key-file", "raise AfmError(f\"line {number} of {source}",
                "cannot read the batch input",  # run-batch's own local input file
                "side file {path.name} unreadable")  # the disk cache's warning log line, then a rebuild
    leaks = [f"{p.name}:{i}" for p in _SOURCES for i, line in enumerate(p.read_text().splitlines(), 1)
             if _LEAK.search(line) and not any(o in line for o in operator)]
    assert _SOURCES and leaks == []
