"""Every error on Ollama's routes (``/api/*``) is Ollama's ``{"error": "message"}`` with the
status kept, including those answered before the route runs (API key, body limit, drain,
connection cap, request ID, unknown route or method), through the real ``ollama`` client where
it can send the request; ``/v1/*`` keeps the OpenAI envelope."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import ollama
import pytest

from afm_struct.testing import Script

from .conftest import USER, wait_until
from .test_connections import connect, read_until_closed
from .test_metrics import samples, total

ROUTES = ["/api/chat", "/api/generate"]


def _model(live: Any) -> str:
    return live.state.settings.model_names(live.loaded.info.id)[0]


@pytest.fixture
def client(serve) -> Iterator[Callable[..., ollama.Client]]:
    """Factory of ``ollama.Client``s, closed before the server stops (an open keep-alive
    connection would hold its shutdown for the grace period)."""
    made: list[ollama.Client] = []

    def make(live: Any, **headers: str) -> ollama.Client:
        made.append(ollama.Client(host=live.url, timeout=30, headers=headers))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _call(client: ollama.Client, route: str, model: str, **kwargs: Any) -> Any:
    """The route through the client; a stream is read to its end (where its error is raised)."""
    if route == "/api/chat":
        out = client.chat(model=model, messages=USER, **kwargs)
    else:
        out = client.generate(model=model, prompt="hi", **kwargs)
    return list(out)[-1] if kwargs.get("stream") else out


def _ollama_error(client: ollama.Client, route: str, model: str, **kwargs: Any) -> ollama.ResponseError:
    with pytest.raises(ollama.ResponseError) as info:
        _call(client, route, model, **kwargs)
    return info.value


def _body(route: str, model: str) -> dict[str, Any]:
    return ({"model": model, "messages": USER} if route == "/api/chat" else {"model": model, "prompt": "hi"})


def _assert_ollama_shaped(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and body["error"], body
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ROUTES)
def test_a_wrong_or_missing_api_key_is_an_ollama_401(serve, client, route) -> None:
    live = serve(api_keys=("right-key",))
    wrong = client(live, Authorization="Bearer wrong-key")
    err = _ollama_error(wrong, route, _model(live))
    assert err.status_code == 401 and isinstance(err.error, str) and "invalid API key" in err.error
    missing = _ollama_error(client(live), route, _model(live), stream=True)
    assert missing.status_code == 401 and isinstance(missing.error, str)
    assert "missing API key" in missing.error
    right = client(live, Authorization="Bearer right-key")
    assert _call(right, route, _model(live)).done is True


@pytest.mark.parametrize("route", ROUTES)
def test_a_body_over_the_limit_is_an_ollama_413(serve, client, route) -> None:
    live = serve(max_body_bytes=4096)
    ollama_client = client(live)
    if route == "/api/chat":
        big = {"messages": [{"role": "user", "content": "x" * 8192}]}
    else:
        big = {"prompt": "x" * 8192}
    with pytest.raises(ollama.ResponseError) as info:
        (ollama_client.chat if route == "/api/chat" else ollama_client.generate)(model=_model(live), **big)
    assert info.value.status_code == 413 and isinstance(info.value.error, str)
    assert "limit is 4096 bytes" in info.value.error


@pytest.mark.parametrize("route", ROUTES)
def test_a_draining_server_answers_an_ollama_503(serve, client, route) -> None:
    live = serve()
    live.app.state.drain.begin(60)
    response = httpx.post(f"{live.url}{route}", json=_body(route, _model(live)), timeout=30)
    assert "draining" in _assert_ollama_shaped(response, 503)
    assert response.headers["retry-after"] == "1"
    err = _ollama_error(client(live), route, _model(live))
    assert err.status_code == 503 and isinstance(err.error, str)


@pytest.mark.parametrize("route", ROUTES)
def test_a_full_queue_is_an_ollama_503(serve, client, route) -> None:
    live = serve(Script("tick " * 300, delay_s=0.02), max_active=1, max_queue=0, retry_after_s=2)
    body = _body(route, _model(live))
    with httpx.stream("POST", f"{live.url}{route}", json=body, timeout=30) as first:
        assert first.status_code == 200  # streaming (Ollama's default): it holds the one slot
        err = _ollama_error(client(live), route, _model(live))
        assert err.status_code == 503 and isinstance(err.error, str) and "retry" in err.error
        response = httpx.post(f"{live.url}{route}", json=body, timeout=30)
        _assert_ollama_shaped(response, 503)
        assert response.headers["retry-after"] == "2"


@pytest.mark.parametrize("route", ROUTES)
def test_connections_over_the_cap_get_an_ollama_503(serve, route) -> None:
    live = serve(max_connections=2)
    connections = live.server.server_state.connections
    data = json.dumps(_body(route, _model(live))).encode()
    with connect(live.url), connect(live.url), connect(live.url) as sock:
        assert wait_until(lambda: len(connections) == 3)
        sock.sendall(f"POST {route} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        raw = read_until_closed(sock)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head.lower()
    error = json.loads(body)
    assert list(error) == ["error"] and "connections open" in error["error"]


@pytest.mark.parametrize("route", ROUTES)
def test_an_unknown_model_is_an_ollama_404(serve, client, route) -> None:
    live = serve()
    err = _ollama_error(client(live), route, "no-such-model")
    assert err.status_code == 404 and isinstance(err.error, str) and "no-such-model" in err.error
    assert "/api/tags" in err.error and "/v1/models" not in err.error  # Ollama's own listing


@pytest.mark.parametrize("route", ROUTES)
def test_route_level_refusals_are_ollama_shaped(serve, route) -> None:
    live = serve()
    # A method the route does not serve: 405 with Allow.
    response = httpx.get(f"{live.url}{route}", timeout=30)
    assert "GET is not allowed" in _assert_ollama_shaped(response, 405)
    assert "POST" in response.headers["allow"]
    # An X-Request-ID this server refuses.
    response = httpx.post(f"{live.url}{route}", json=_body(route, _model(live)),
                          headers={"X-Request-ID": "has space"}, timeout=30)
    assert "X-Request-ID" in _assert_ollama_shaped(response, 400)


def test_an_unknown_ollama_route_is_an_ollama_404(serve) -> None:
    live = serve()
    response = httpx.post(f"{live.url}/api/embed", json={"model": _model(live), "input": "hi"}, timeout=30)
    assert "/api/embed" in _assert_ollama_shaped(response, 404)


def test_the_openai_routes_keep_the_envelope(serve) -> None:
    live = serve(api_keys=("right-key",), max_body_bytes=4096)
    key = {"Authorization": "Bearer right-key"}
    for response, status in [
        (httpx.post(f"{live.url}/v1/chat/completions", json={"messages": USER}, timeout=30), 401),
        (httpx.post(f"{live.url}/v1/chat/completions", headers=key,
                    json={"messages": [{"role": "user", "content": "x" * 8192}]}, timeout=30), 413),
        (httpx.post(f"{live.url}/v1/nothing", headers=key, timeout=30), 404),
    ]:
        assert response.status_code == status
        error = response.json()["error"]
        assert isinstance(error, dict) and {"message", "type", "param", "code"} <= set(error)


def test_ollama_errors_are_counted_by_type(serve) -> None:
    # Ollama's bodies carry no type: the layer that answered records it for the metrics.
    live = serve(api_keys=("right-key",))
    key = {"Authorization": "Bearer right-key"}
    _assert_ollama_shaped(httpx.post(f"{live.url}/api/chat", json=_body("/api/chat", "m"), timeout=30), 401)
    _assert_ollama_shaped(httpx.post(f"{live.url}/api/chat", json=_body("/api/chat", "no-such-model"),
                                     headers=key, timeout=30), 404)
    assert wait_until(lambda: all(
        total(samples(live.url, key), "afm_errors_total", type=kind) == 1
        for kind in ("invalid_request_error", "not_found_error")))  # the 401's type, the 404's


def test_a_stalled_body_is_an_ollama_408(serve) -> None:
    live = serve(body_timeout_s=0.5)
    with connect(live.url) as sock:
        sock.sendall(b"POST /api/chat HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"model\": ")  # the headers and part of the body
        raw = read_until_closed(sock)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    error = json.loads(body)
    assert list(error) == ["error"] and "did not arrive" in error["error"]


def test_an_unexpected_failure_is_an_ollama_500(serve, client, caplog) -> None:
    def broken_compiler(tokenizer, request):
        raise RuntimeError("compiler exploded")

    live = serve(compile_fn=broken_compiler)
    err = _ollama_error(client(live), "/api/chat", _model(live), format="json")
    assert err.status_code == 500 and isinstance(err.error, str) and "internal server error" in err.error
    assert "compiler exploded" not in err.error
