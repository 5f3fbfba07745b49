"""The fan-out crash: a lone request, then a burst of same-length prompts, on the real model.

A burst that arrives while a lone request decodes is prefilled together in a batch cache built
with room for a full batch; joining the running batch copied that cache's whole buffer (spare
rows included) into the live rows, which failed after the row count had grown, and every request
in the burst, then the lone one, got HTTP 500.  Reproduced on a fresh server, as a user met it.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import jsonschema
import pytest

from server.live import start_server
from server.settings import ServerSettings

pytestmark = pytest.mark.model

FILM = {"type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
        "required": ["title", "year"], "additionalProperties": False}


def _body(i: int, strict: bool) -> dict:
    body = {"messages": [{"role": "user", "content": f"Invent film number {i} as a JSON record."}],
            "max_tokens": 12, "temperature": 0}
    if strict:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "film", "strict": True, "schema": FILM}}
    return body


async def _post(client: httpx.AsyncClient, url: str, body: dict) -> httpx.Response:
    return await client.post(f"{url}/v1/chat/completions", json=body)


@pytest.mark.parametrize("strict", [True, False], ids=["json_schema", "plain"])
def test_lone_request_then_same_length_burst_all_succeed(embedded, strict):
    live = start_server(embedded, ServerSettings(max_active=8, max_queue=16))
    try:
        async def go() -> list[list[httpx.Response]]:
            async with httpx.AsyncClient(timeout=120) as client:
                waves = [[await _post(client, live.url, _body(0, strict))]]
                # The burst, then one past the batch (4 wait in the queue; numbers past 9 would
                # change the length, so the second wave repeats prompts: prefix-cache hits).
                for n in (8, 12):
                    waves.append(await asyncio.gather(
                        *[_post(client, live.url, _body(i % 9 + 1, strict)) for i in range(n)]))
                return waves

        waves = asyncio.run(go())
    finally:
        live.stop()
    assert len({len(embedded.tokenizer.encode_chat(_body(i, strict)["messages"]))
                for i in range(1, 10)}) == 1  # the shape that crashed: equal prompt lengths
    for wave in waves:
        for response in wave:
            assert response.status_code == 200, response.text
            choice = response.json()["choices"][0]
            if strict and choice["finish_reason"] == "stop":
                jsonschema.validate(json.loads(choice["message"]["content"]), FILM)
