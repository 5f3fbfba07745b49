"""HTTP methods on every route: HEAD answers like GET without a body, OPTIONS and 405 say what
a path allows (RFC 9110), and ``GET /v1/models/{model}`` as OpenAI serves it."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import openai
import pytest

from .conftest import USER

NAMES = ("gpt-4o-mini", "mlx-community/SmolLM2-135M-Instruct")
GET_PATHS = ("/health", "/v1/models", "/v1/models/gpt-4o-mini",
             "/v1/models/mlx-community/SmolLM2-135M-Instruct", "/openapi.json", "/docs", "/redoc")
POST_PATHS = ("/v1/chat/completions", "/v1/chat/completions/some-id/cancel")
# Headers that differ between two responses whatever the method.
_PER_RESPONSE = {"date", "x-request-id", "openai-request-id"}


def _raw(url: str, requests: list[str]) -> bytes:
    """Send raw HTTP/1.1 requests on one connection (the last says ``Connection: close``) and
    return every byte the server sent until it closed."""
    host, port = url.removeprefix("http://").split(":")
    last = len(requests) - 1
    wire = "".join(f"{line}\r\nHost: {host}\r\n" + ("Connection: close\r\n" if i == last else "") + "\r\n"
                   for i, line in enumerate(requests))
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(wire.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


def _headers(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k not in _PER_RESPONSE}


@pytest.mark.parametrize("path", GET_PATHS)
def test_head_answers_like_get_without_a_body(serve, path: str) -> None:
    live = serve(served_model_names=NAMES)
    get = httpx.get(live.url + path)
    head = httpx.head(live.url + path)
    assert get.status_code == 200, get.text
    assert head.status_code == 200
    if path != "/health":  # /health's body (uptime, RSS) changes between two requests
        assert _headers(head) == _headers(get)
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.headers["x-request-id"]
    # On the wire: no body after HEAD's headers; the next response on the connection parses.
    raw = _raw(live.url, [f"HEAD {path} HTTP/1.1", "GET /v1/models HTTP/1.1"])
    first, rest = raw.split(b"\r\n\r\n", 1)
    assert first.startswith(b"HTTP/1.1 200 ")
    assert rest.startswith(b"HTTP/1.1 200 "), rest[:80]


def test_head_is_open_on_health_and_keyed_elsewhere(serve) -> None:
    live = serve(api_keys=("k",))
    assert httpx.head(f"{live.url}/health").status_code == 200
    assert httpx.head(f"{live.url}/v1/models").status_code == 401
    assert httpx.head(f"{live.url}/v1/models", headers={"Authorization": "Bearer k"}).status_code == 200


@pytest.mark.parametrize(("path", "allow"), [*((p, "GET, HEAD, OPTIONS") for p in GET_PATHS),
                                             *((p, "OPTIONS, POST") for p in POST_PATHS)])
def test_options_and_405_name_the_allowed_methods(serve, path: str, allow: str) -> None:
    live = serve(served_model_names=NAMES)
    options = httpx.options(live.url + path)
    assert options.status_code == 204 and options.content == b""
    assert options.headers["allow"] == allow
    wrong = "PUT" if "GET" in allow else "GET"
    refused = httpx.request(wrong, live.url + path)
    assert refused.status_code == 405
    assert refused.headers["allow"] == allow
    assert refused.json()["error"]["code"] == "method_not_allowed"


def test_unknown_paths_stay_404_whatever_the_method(serve) -> None:
    live = serve()
    for method in ("GET", "HEAD", "OPTIONS", "POST"):
        assert httpx.request(method, f"{live.url}/v1/nothing").status_code == 404


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=30)


def test_retrieve_model_returns_the_listed_object_for_every_served_name(serve) -> None:
    live = serve(served_model_names=NAMES)
    listed = {m.id: m for m in _sdk(live.url).models.list().data}
    assert set(listed) == set(NAMES)
    for name in NAMES:  # the SDK sends the slash of a hub id as %2F
        model = _sdk(live.url).models.retrieve(name)
        assert model == listed[name]
        assert model.object == "model" and model.owned_by == "afm-struct"
    body: dict[str, Any] = httpx.get(f"{live.url}/v1/models/gpt-4o-mini").json()
    metadata = body.pop("metadata")
    assert body == {"id": "gpt-4o-mini", "object": "model", "created": listed["gpt-4o-mini"].created,
                    "owned_by": "afm-struct"}
    # What was loaded and how: afm-struct's extension, the same under every name.
    info = live.loaded.info
    assert metadata["source"] == info.source and metadata["weights"] == info.weights
    assert metadata["weight_bytes"] == info.weight_bytes


def test_retrieve_an_unknown_model_is_a_404_naming_the_param(serve) -> None:
    live = serve(served_model_names=NAMES)
    for unknown in ("gpt-9", live.loaded.info.id, "gpt-4o-mini/extra"):
        with pytest.raises(openai.NotFoundError) as err:
            _sdk(live.url).models.retrieve(unknown)
        body = err.value.body
        assert isinstance(body, dict)
        assert body["code"] == "model_not_found" and body["param"] == "model"
        assert body["type"] == "not_found_error" and "gpt-4o-mini" in body["message"]


def test_retrieve_without_served_names_is_the_model_id(serve) -> None:
    live = serve()
    model = _sdk(live.url).models.retrieve(live.loaded.info.id)
    assert model.id == live.loaded.info.id
    # and the name the model answers to works in a completion
    response = _sdk(live.url).chat.completions.create(model=model.id, messages=USER, max_tokens=3)
    assert response.model == model.id
