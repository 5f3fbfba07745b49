"""API keys: ``Authorization: Bearer`` on every route but /health (server/auth.py), over real HTTP."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from afm_struct.errors import AfmError
from server import auth
from server.settings import ServerSettings
from server.tenants import ANONYMOUS, ApiKey, key_digest, tenant_of

from .conftest import USER

EXE = str(Path(sys.executable).with_name("afm-struct"))
KEYS = ("key-one", "key-two")
ENV = {k: v for k, v in os.environ.items() if k != "AFM_STRUCT_API_KEYS"}


@pytest.fixture
def url(serve: Any) -> str:
    return serve("Hello there, world!", api_keys=KEYS).url  # type: ignore[no-any-return]


def _assert_401(response: httpx.Response, fragment: str) -> None:
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.headers["x-request-id"] and response.headers["openai-request-id"]
    error = response.json()["error"]
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    assert fragment in error["message"] and "key-one" not in error["message"]


def test_missing_key_is_401_with_the_envelope(url: str) -> None:
    _assert_401(httpx.post(f"{url}/v1/chat/completions", json={"messages": USER}), "missing API key")
    _assert_401(httpx.get(f"{url}/v1/models"), "missing API key")


@pytest.mark.parametrize("header", ["Bearer wrong", "Bearer key-one-x", "Bearer key-on", "Basic key-one",
                                    "key-one", "Bearer"])
def test_wrong_key_is_401(url: str, header: str) -> None:
    _assert_401(httpx.get(f"{url}/v1/models", headers={"Authorization": header}), "invalid API key")


@pytest.mark.parametrize("key", KEYS)
def test_right_key_streams_and_cancels(url: str, key: str) -> None:
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": "auth-1"}
    with httpx.stream("POST", f"{url}/v1/chat/completions", headers=headers,
                      json={"messages": USER, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        body = response.read().decode()
    assert body.rstrip().endswith("data: [DONE]")
    assert httpx.get(f"{url}/v1/models", headers={"Authorization": f"bearer {key}"}).status_code == 200
    late = httpx.post(f"{url}/v1/chat/completions/auth-1/cancel", headers=headers)
    assert late.status_code == 404 and late.json()["cancelled"] is False


def test_every_route_but_health_needs_the_key(url: str) -> None:
    assert httpx.get(f"{url}/health").status_code == 200
    for method, path in [("POST", "/v1/chat/completions/x/cancel"), ("GET", "/openapi.json"),
                         ("GET", "/no/such/route")]:
        _assert_401(httpx.request(method, f"{url}{path}"), "missing API key")


def test_no_keys_means_open(serve: Any) -> None:
    live = serve("Hi")
    assert httpx.get(f"{live.url}/v1/models").status_code == 200


def test_constant_time_check_compares_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []
    real = auth.hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        seen.append(b)
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    keys = (b"a" * 8, b"b" * 8, b"c" * 8)
    assert auth.key_matches(b"a" * 8, keys)  # a hit on the first key still compares the rest
    assert seen == list(keys)
    assert not auth.key_matches(b"", keys)


def test_keys_from_cli_env_and_file(tmp_path: Path) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("# team keys\nfile-1\n\nfile-2, file-3\n")
    keys = auth.load_api_keys(["cli-1", "file-1"], str(key_file), {auth.ENV_VAR: "env-1, env-2"})
    assert [k.secret for k in keys] == ["cli-1", "file-1", "file-2", "file-3", "env-1", "env-2"]
    assert all(k.name is None for k in keys)
    assert auth.load_api_keys([], None, {}) == ()
    with pytest.raises(AfmError, match="cannot read the API key file"):
        auth.load_api_keys([], str(tmp_path / "missing"), {})
    assert "api_keys" not in repr(ServerSettings(api_keys=("secret",)))
    assert "secret" not in repr(ServerSettings(api_keys=("secret",)))


def test_loopback_detection() -> None:
    assert auth.is_loopback("127.0.0.1") and auth.is_loopback("localhost") and auth.is_loopback("::1")
    assert not auth.is_loopback("0.0.0.0") and not auth.is_loopback("192.168.1.4")


def test_serve_warns_on_a_public_address_without_a_key(tmp_path: Path) -> None:
    """The warning comes before the model loads; a missing model then ends the run quickly."""
    proc = subprocess.run([EXE, "serve", "--host", "0.0.0.0", "--model", str(tmp_path / "nope.gguf")],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert "warning: serving on 0.0.0.0 without an API key" in proc.stderr
    proc = subprocess.run([EXE, "serve", "--host", "0.0.0.0", "--api-key", "k",
                           "--model", str(tmp_path / "nope.gguf")],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert "without an API key" not in proc.stderr and proc.returncode == 1


def test_client_sends_its_api_key(url: str) -> None:
    from afm_struct.client import AfmHTTPError, Client

    with Client(url, api_key="key-two", timeout=30) as client:
        assert client.chat(USER, stream=False, max_tokens=3).content
    with Client(url, timeout=30) as client, pytest.raises(AfmHTTPError) as caught:
        client.chat(USER, stream=False, max_tokens=3)
    assert caught.value.status == 401


def test_a_key_file_may_name_its_keys(tmp_path: Path) -> None:
    """``name: key`` lines name a key's tenant; the old formats still work beside them; a
    named key's tenant is its name, an unnamed one's a hash; neither holds the key."""
    key_file = tmp_path / "keys"
    key_file.write_text("# tenants\nacme: sk-acme-1\n  globex:\tsk-globex-1  \nsk-bare-1, sk-bare-2\n"
                        "acme: sk-acme-2\nurn:x:y\n")
    keys = auth.load_api_keys([], str(key_file), {auth.ENV_VAR: "initech: sk-initech\nsk-env"})
    assert [(k.name, k.secret) for k in keys] == [
        ("acme", "sk-acme-1"), ("globex", "sk-globex-1"), (None, "sk-bare-1"), (None, "sk-bare-2"),
        ("acme", "sk-acme-2"), (None, "urn:x:y"), ("initech", "sk-initech"), (None, "sk-env")]
    acme1, acme2, bare = keys[0].tenant, keys[4].tenant, keys[2].tenant
    assert acme1 == acme2 and acme1.label == "acme"  # two keys of one tenant (a rotation)
    digest = hashlib.sha256(b"sk-bare-1").hexdigest()
    assert bare.owner == f"key:{digest}" and bare.label == f"key-{digest[:12]}"
    assert keys[3].tenant != bare
    for key in keys:
        assert key.secret not in repr(key) and key.secret not in repr(key.tenant)


@pytest.mark.parametrize("text, fragment", [
    ("acme: k1 k2\n", "line 1 of the API key file"),
    ("ok\nbad name!: k1\n", "line 2 of the API key file"),
    ("acme: k1\nglobex: k1\n", "one API key is given twice, with 'acme' and 'globex'"),
    ("k1\nacme: k1\n", "one API key is given twice, with no name and 'acme'"),
])
def test_bad_key_files_are_refused_without_echoing_a_key(tmp_path: Path, text: str, fragment: str) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text(text)
    with pytest.raises(AfmError) as caught:
        auth.load_api_keys([], str(key_file), {})
    assert fragment in caught.value.message and "k1" not in caught.value.message


def test_named_keys_reach_the_server_from_a_key_file(tmp_path: Path, serve: Any) -> None:
    key_file = tmp_path / "keys"
    key_file.write_text("acme: sk-acme-1\nsk-bare-1\n")
    live = serve("Hi", api_keys=auth.load_api_keys([], str(key_file), {}))
    for key in ("sk-acme-1", "sk-bare-1"):
        r = httpx.get(f"{live.url}/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200
    _assert_401(httpx.get(f"{live.url}/v1/models", headers={"Authorization": "Bearer acme"}),
                "invalid API key")


def _tenant_seen(keys: tuple[ApiKey, ...], headers: list[tuple[bytes, bytes]],
                 path: str = "/v1/models") -> Any:
    """What :func:`tenant_of` says inside an app behind the key middleware (None: refused)."""
    seen: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(tenant_of(scope))

    async def send(message: Any) -> None:
        pass

    scope = {"type": "http", "path": path, "headers": headers}
    asyncio.run(auth.ApiKeyMiddleware(app, keys)(scope, None, send))  # type: ignore[arg-type]
    return seen[0] if seen else None


def test_tenant_of_is_the_keys_tenant_and_one_implicit_owner_without_keys() -> None:
    assert _tenant_seen((), []) == ANONYMOUS  # no keys: everyone is the one owner
    keys = (ApiKey("k-named-1234", name="acme"), ApiKey("k-bare-5678"))
    assert _tenant_seen(keys, [(b"authorization", b"Bearer k-named-1234")]).owner == "name:acme"
    bare = _tenant_seen(keys, [(b"authorization", b"Bearer k-bare-5678")])
    assert bare.owner == "key:" + key_digest("k-bare-5678") and "k-bare-5678" not in repr(bare)
    assert _tenant_seen(keys, [(b"authorization", b"Bearer wrong")]) is None
    with pytest.raises(RuntimeError, match="ApiKeyMiddleware"):
        tenant_of({"type": "http", "state": {}})
