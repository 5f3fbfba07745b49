"""``X-AFM-Constraint-Mode`` over real HTTP (scripted model): every constrained response names
the rung that served it, strict or not; free text has no such header."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import USER, stream_raw

UNIQUE = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True, "maxItems": 3}
LOOKAROUND = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?<!x)[a-z]{2}$"}},
              "required": ["a"]}
SIMPLE = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 5}}, "required": ["q"]}


def fmt(schema: dict[str, Any], strict: bool) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema, "strict": strict}}


def tool(schema: dict[str, Any], strict: bool = False) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "lookup", "parameters": schema, "strict": strict}}]


@pytest.fixture(scope="module")
def live(tokenizer):
    from afm_struct.testing import scripted_loaded_model
    from server.live import start_server

    server = start_server(scripted_loaded_model(tokenizer, "Hello there, world!"))
    yield server
    server.stop()


# (fields, X-AFM-Constraint-Mode, X-Grammar-Constraints)
CASES: list[tuple[str, dict[str, Any], str | None, str | None]] = [
    ("text", {}, None, None),
    ("json_object", {"response_format": {"type": "json_object"}}, "exact", None),
    ("strict exact", {"response_format": fmt(SIMPLE, True)}, "exact", None),
    ("non-strict relaxed", {"response_format": fmt(UNIQUE, False)}, "relaxed", None),
    ("strict relaxed", {"response_format": fmt(UNIQUE, True)}, "relaxed", "downgraded"),
    ("strict generic", {"response_format": fmt(LOOKAROUND, True)}, "generic_json", "downgraded"),
    ("non-strict generic", {"response_format": fmt(LOOKAROUND, False)}, "generic_json", None),
    ("tool exact", {"tools": tool(SIMPLE)}, "exact", None),
    # a non-strict tool whose schema fell back to generic JSON: silent before this header
    ("non-strict tool generic", {"tools": tool(LOOKAROUND)}, "generic_json", None),
    ("strict tool generic", {"tools": tool(LOOKAROUND, strict=True)}, "generic_json", "downgraded"),
    ("tool_choice none", {"tools": tool(SIMPLE), "tool_choice": "none"}, None, None),
    # tools and the format in one grammar: each branch at the rung it has alone, the weakest named
    ("tools + response_format", {"tools": tool(SIMPLE), "response_format": fmt(SIMPLE, False)},
     "exact", None),
    ("tools + strict response_format", {"tools": tool(SIMPLE, strict=True),
                                        "response_format": fmt(SIMPLE, True)}, "exact", None),
    ("tools + json_object", {"tools": tool(SIMPLE), "response_format": {"type": "json_object"}},
     "exact", None),
    ("tools + relaxed answer", {"tools": tool(SIMPLE), "response_format": fmt(UNIQUE, True)},
     "relaxed", "downgraded"),
    ("generic tool + exact answer", {"tools": tool(LOOKAROUND, strict=True),
                                     "response_format": fmt(SIMPLE, True)}, "generic_json", "downgraded"),
    # calls only: the format cannot apply, and is not reported
    ("required + response_format", {"tools": tool(SIMPLE), "tool_choice": "required",
                                    "response_format": fmt(UNIQUE, True)}, "exact", None),
    ("tool_choice none + response_format", {"tools": tool(SIMPLE), "tool_choice": "none",
                                            "response_format": fmt(UNIQUE, True)}, "relaxed", "downgraded"),
    ("regex without mask", {"guided_regex": "(?=a)a+"}, "unconstrained", "downgraded"),
]


@pytest.mark.parametrize("fields, mode, downgraded", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("stream", [False, True])
def test_the_mode_header_names_the_rung_that_served(live, fields, mode, downgraded, stream) -> None:
    body = {"messages": USER, "max_tokens": 40, **fields}
    if stream:
        response, _ = stream_raw(live.url, body)
    else:
        response = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert response.headers.get("x-afm-constraint-mode") == mode
    assert response.headers.get("x-grammar-constraints") == downgraded
