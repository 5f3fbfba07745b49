"""Engine failures in the generation loop reach the caller as a fixed message; the engine's own
words (llguidance parser state) go to the log under the request's ID."""

from __future__ import annotations

import logging
from typing import Any

from afm_struct.decoding.generator import Finished, GenerationRequest, Generator
from afm_struct.decoding.sampling import SamplingParams
from afm_struct.grammar.compiler import compile_constraint
from afm_struct.grammar.spec import JsonSchemaRequest
from afm_struct.testing import Script, scripted_loaded_model

STATE_DUMP = "Parser state: Earley sets [item 3 @ 7: value -> . string] lexer=Lexeme{...}"


class _LyingMatcher:
    """A real matcher that then refuses the token it allowed (as a buggy engine would)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def advance(self, token: int) -> bool:
        return False

    def error(self) -> str:
        return STATE_DUMP


class _LyingConstraint:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def new_matcher(self) -> _LyingMatcher:
        return _LyingMatcher(self.inner.new_matcher())


def test_a_rejected_token_is_a_fixed_message_and_the_state_goes_to_the_log(tokenizer, caplog) -> None:
    constraint = compile_constraint(tokenizer, JsonSchemaRequest({"type": "object"}, strict=True))
    gen = Generator.from_loaded(scripted_loaded_model(tokenizer, Script('{"a": 1}')))
    prompt = tokenizer.encode_chat([{"role": "user", "content": "go"}])
    request = GenerationRequest(prompt, SamplingParams(temperature=0, max_tokens=8),
                                constraint=_LyingConstraint(constraint), request_id="req-lying-1")
    with caplog.at_level(logging.ERROR, logger="afm_struct"):
        (finish,) = [e for e in gen.generate(request) if isinstance(e, Finished)]
    assert finish.reason == "error" and finish.error is not None
    assert finish.error.status == 500 and finish.error.code == "generation_failed"
    message = finish.error.message
    assert "Parser state" not in message and "Earley" not in message and "Lexeme" not in message
    assert "server log" in message
    logged = [r for r in caplog.records if "req-lying-1" in r.getMessage()]
    assert logged and any(STATE_DUMP in r.getMessage() for r in logged)
