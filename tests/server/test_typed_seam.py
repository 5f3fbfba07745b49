"""The typed seam between server and engine: MLX-free wire modules, finish reasons, downgrades."""

from __future__ import annotations

import json
import subprocess
import sys
import typing

import pytest

from afm_struct.grammar.downgrade import is_downgraded
from afm_struct.grammar.spec import Mode, Rung
from afm_struct.turn.events import ResponseIdentity
from afm_struct.turn.outputs import Finished, FinishReason, Timings, Usage
from server import schemas, sse
from server.chat import chunks

IDENT = ResponseIdentity(id="chatcmpl-abc", created=1700000000, model="m")


def test_wire_modules_do_not_import_mlx() -> None:
    # A fresh interpreter: this test process has MLX loaded already.
    code = ("import sys, server.sse, server.profile, server.channels, server.logprob_routing, "
            "server.chat.chunks, server.chat.encoder, afm_struct.turn.events, "
            "afm_struct.turn.markers, afm_struct.turn.reasoning, "
            "afm_struct.turn.outputs; "
            "print(sorted(m for m in sys.modules if m == 'mlx' or m.startswith('mlx.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("reason", list(FinishReason))
def test_finish_reasons_encode_to_the_same_bytes_as_their_strings(reason: FinishReason) -> None:
    assert sse.encode_event(chunks.finish_chunk(IDENT, reason)) == \
        sse.encode_event(chunks.finish_chunk(IDENT, reason.value))  # type: ignore[arg-type]
    body = chunks.completion_body(IDENT, content="x", reasoning_content=None, tool_calls=None,
                               finish_reason=reason, usage=Usage(1, 2))
    plain = {**body, "choices": [{**body["choices"][0], "finish_reason": reason.value}]}
    # As starlette's JSONResponse renders a body.
    render = dict(ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":"))
    assert json.dumps(body, **render) == json.dumps(plain, **render)  # type: ignore[arg-type]
    assert f"{reason}" == str(reason) == reason.value


def test_finish_reasons_match_the_response_schema() -> None:
    literal = typing.get_type_hints(schemas.Choice)["finish_reason"]
    assert set(typing.get_args(literal)) == {r.value for r in FinishReason}


def test_finished_compares_with_wire_strings() -> None:
    fin = Finished(FinishReason.LENGTH, Usage(), Timings(), "")
    assert fin.reason == "length" and FinishReason("length") is FinishReason.LENGTH


@pytest.mark.parametrize(("strict", "served", "expected"), [
    (True, Rung.EXACT, False), (True, Rung.RELAXED, True), (True, Rung.GENERIC_JSON, True),
    (True, Rung.UNCONSTRAINED, True), (True, Mode.ENFORCED, False), (True, Mode.DOWNGRADED, True),
    (False, Rung.RELAXED, False), (False, Rung.UNCONSTRAINED, False), (False, Mode.DOWNGRADED, False),
])
def test_downgraded_means_strict_below_the_exact_rung(strict: bool, served: Mode | Rung,
                                                      expected: bool) -> None:
    assert is_downgraded(strict, served) is expected
