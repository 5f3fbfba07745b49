"""Every grammar of llama.cpp's ``grammars/`` folder (vendored in tests/fixtures) sent as
llama.cpp's ``grammar`` field to the embedded model: converted and enforced, or refused with a
reason.  A short generation is judged against the grammar itself: a whole sentence when the
model stopped, a prefix the grammar can still complete when the budget cut it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.grammar_syntax import to_lark
from afm_struct.grammar.spec import LarkRequest

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "llama_cpp_grammars"
GRAMMARS = sorted(FIXTURE.glob("*.gbnf"))
# File name -> a phrase its 400 must say.  Empty: every file of the folder converts today
# (docs/constraints.md lists the refused ones, with reasons, when there are any).
REFUSED: dict[str, str] = {}
# The shortest output chess.gbnf allows is 20 tokens (a smaller budget is a 400).
MAX_TOKENS = 20


def test_the_fixture_is_llama_cpps_whole_folder_with_its_licence() -> None:
    assert [p.name for p in GRAMMARS] == [
        "arithmetic.gbnf", "c.gbnf", "chess.gbnf", "english.gbnf", "japanese.gbnf", "json.gbnf",
        "json_arr.gbnf", "list.gbnf"]
    licence = (FIXTURE / "LICENSE").read_text()
    assert "MIT License" in licence and "Copyright (c) 2023-2024 The ggml authors" in licence


@pytest.fixture(scope="module")
def answers(real_server) -> dict[str, httpx.Response]:
    """Each grammar sent as ``grammar`` to the embedded model, all at once (the server batches
    them: a third of the time of one after another)."""
    def ask(path: Path) -> httpx.Response:
        return httpx.post(f"{real_server.url}/v1/chat/completions", timeout=300, json={
            "messages": [{"role": "user", "content": f"Write something in the {path.stem} format."}],
            "grammar": path.read_text(encoding="utf-8"), "max_tokens": MAX_TOKENS, "temperature": 0})

    with ThreadPoolExecutor(len(GRAMMARS)) as pool:
        return dict(zip((p.name for p in GRAMMARS), pool.map(ask, GRAMMARS), strict=True))


@pytest.mark.model
@pytest.mark.parametrize("path", GRAMMARS, ids=lambda p: p.stem)
def test_llama_cpp_grammar_constrains_a_short_generation_or_is_refused(answers, tokenizer,
                                                                       path: Path) -> None:
    response = answers[path.name]
    if path.name in REFUSED:
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == "grammar" and REFUSED[path.name] in error["message"], error
        return
    assert response.status_code == 200, response.text
    assert response.headers["x-afm-constraint-mode"] == "exact"
    choice = response.json()["choices"][0]
    output = choice["message"]["content"] or ""
    grammar = path.read_text(encoding="utf-8")
    compiled = compile_constraint(tokenizer, LarkRequest(to_lark(grammar, param="grammar")[0]))
    if choice["finish_reason"] == "stop":
        assert compiled.validate(output).ok, output
    else:
        assert choice["finish_reason"] == "length"
        assert compiled.is_prefix(output), output
