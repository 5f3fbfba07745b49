"""mlx-community directories as Mac users have them, served over HTTP (issue 48).

Tiny random-weight llama (Llama 3.1's vocabulary), qwen3 (Qwen3's) and gpt_oss (gpt-oss's, with
the Harmony template as ``chat_template.jinja``) directories, bf16 and 4-bit affine, built with
mlx-lm's own classes and ``save_model`` / ``quantize_model`` (``mlx_dir_factory.py``), each served
by a real server: plain chat, strict ``json_schema`` (whole and streamed), a strict tool call and
a cancel.  Then the weights ``auto`` picks, ``--weights float32``'s real dequantization, the bf16
gpt-oss experts on the CPU, a hub id through an offline Hugging Face cache (the CLI in a
subprocess) and the broken directories that must fail at load in one line.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from afm_struct.errors import ModelLoadError
from afm_struct.models import mlx_dir, weights
from afm_struct.models.loader import ChatTemplateOptions, LoadedModel, load_model
from tests.models import mlx_dir_factory as factory
from tests.operate.conftest import start_serve

DIRS = {f"{family}-{kind}": (family, bits)
        for family in factory.FAMILIES for kind, bits in (("bf16", None), ("4bit", 4))}
PERSON = {"type": "object", "additionalProperties": False, "required": ["name", "age", "tags"],
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "tags": {"type": "array", "maxItems": 2,
                                  "items": {"type": "string", "maxLength": 5}}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "strict": True,
    "parameters": {"type": "object", "additionalProperties": False, "required": ["city"],
                   "properties": {"city": {"type": "string", "maxLength": 12}}}}}
# Long by force (at least 300 numbers): a run still going when the cancel arrives.
LONG = {"type": "array", "minItems": 300, "items": {"type": "integer", "minimum": 0, "maximum": 9}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The six directories (skipped when the npm vocabularies cannot be had: offline)."""
    for family in factory.FAMILIES:
        if factory.vocabulary_folder(family) is None:
            pytest.skip(f"the npm package of the {family} vocabulary is not available (offline?)")
    root = tmp_path_factory.mktemp("mlx-dirs")
    return {name: factory.build(family, root / name, bits=bits) for name, (family, bits) in DIRS.items()}


@pytest.fixture(scope="module", params=list(DIRS))
def served(request: pytest.FixtureRequest, built: dict[str, Path]) -> Iterator[tuple[str, str, LoadedModel]]:
    """``(name, url, loaded)``: one server per directory, loaded with the default flags
    (``--weights auto``); pytest groups the tests by directory, so one runs at a time."""
    from server.live import start_server

    name = request.param
    loaded = load_model(str(built[name]))
    live = start_server(loaded, timeout_s=120)
    try:
        yield name, live.url, loaded
    finally:
        live.stop()


def _chat(url: str, **body: Any) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": "Tell me about Ada."}], "temperature": 0, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=180)


def _schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "strict": True, "schema": schema}}


def _sse(response: httpx.Response) -> list[dict[str, Any]]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[6:]))
    return events


def test_auto_dequantizes_to_fp32_on_the_cpu(served, built) -> None:
    name, url, loaded = served
    info = loaded.info
    assert info.weights == "float32" and info.device == "cpu"
    assert info.stored == ("bfloat16" if name.endswith("bf16") else info.stored)
    assert "4-bit affine" in info.stored or name.endswith("bf16")
    assert not weights._quantized_modules(loaded.model), "a quantized layer survived --weights auto"
    card = httpx.get(f"{url}/v1/models", timeout=60).json()["data"][0]
    assert card["id"] == built[name].name
    assert card["metadata"]["weights"] == "float32"
    assert card["metadata"]["stored"] == info.stored
    assert card["metadata"]["weights_reason"].startswith("cpu: fp32")


def test_plain_chat(served) -> None:
    _name, url, _loaded = served
    r = _chat(url, max_tokens=12)
    assert r.status_code == 200, r.text[:400]
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] in ("stop", "length")
    assert r.json()["usage"]["completion_tokens"] >= 1


def test_strict_json_schema(served) -> None:
    _name, url, _loaded = served
    r = _chat(url, max_tokens=80, response_format=_schema_format(PERSON))
    assert r.status_code == 200, r.text[:400]
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), PERSON)


def test_strict_json_schema_streamed(served) -> None:
    _name, url, _loaded = served
    body = {"messages": [{"role": "user", "content": "Ada?"}], "temperature": 0, "max_tokens": 80,
            "stream": True, "response_format": _schema_format(PERSON)}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=180) as r:
        assert r.status_code == 200
        events = _sse(r)
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    jsonschema.validate(json.loads(text), PERSON)
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"][0].get("finish_reason")]


def test_strict_tool_call(served) -> None:
    _name, url, _loaded = served
    r = _chat(url, max_tokens=96, tools=[WEATHER], tool_choice="required",
              parallel_tool_calls=False)
    assert r.status_code == 200, r.text[:400]
    message = r.json()["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    assert [c["function"]["name"] for c in calls] == ["get_weather"], message
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]),
                        WEATHER["function"]["parameters"])


def test_cancel(served) -> None:
    name, url, _loaded = served
    rid = f"cancel-{name}"
    body = {"messages": [{"role": "user", "content": "Count."}], "max_tokens": 1500, "stream": True,
            "response_format": _schema_format(LONG)}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=180,
                      headers={"X-Request-ID": rid}) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                break  # the run is under way
        cancelled = httpx.post(f"{url}/v1/chat/completions/{rid}/cancel", timeout=30)
        assert cancelled.status_code == 200 and cancelled.json()["cancelled"] is True
        rest = [json.loads(x[6:]) for x in lines if x.startswith("data: ") and x != "data: [DONE]"]
    finishes = [e["choices"][0]["finish_reason"] for e in rest if e.get("choices") and
                e["choices"][0].get("finish_reason")]
    assert finishes == ["cancelled"]


def _packed(path: Path) -> Any:
    """The directory's model as mlx-lm loads it (packed 4-bit layers), without its tokenizer:
    ``mlx_lm.load`` would also build the 151k-token tokenizer these tests never use (~2 s)."""
    from mlx_lm.utils import load_model as mlx_load_model

    model, _config = mlx_load_model(path)
    return model


def test_float32_really_dequantizes(built) -> None:
    """``--weights float32`` on a 4-bit directory: no packed layer is left, the fp32 model is
    larger than the packed one, and its logits are the packed model's computed in fp32."""
    path = built["qwen3-4bit"]
    dense = load_model(str(path), weights="float32")
    assert not weights._quantized_modules(dense.model)
    reference = _packed(path)
    assert weights.stored_format(reference) == "4-bit affine"
    packed_bytes = sum(v.nbytes for _, v in tree_flatten(reference.parameters()))
    assert dense.info.weight_bytes > 3 * packed_bytes
    reference.set_dtype(mx.float32)  # scales and norms in fp32: the same numbers, packed
    tokens = mx.array([[9707, 11, 1879, 0, 17, 42]])
    expected = reference(tokens)
    got = dense.model(tokens)
    assert mx.allclose(got, expected, atol=1e-4).item(), float(mx.abs(got - expected).max())


def test_bf16_gpt_oss_kept_as_stored_runs_on_the_cpu(built) -> None:
    """Weights kept as stored (bf16): the experts' gather_mm (float32-only on the CPU) is cast
    at load, so the first request does not fail."""
    loaded = load_model(str(built["gpt_oss-bf16"]), weights="quantized")
    assert loaded.info.weights == "as-stored" and loaded.info.stored == "bfloat16"
    assert "gather_mm" in loaded.info.weights_reason
    logits = loaded.model(mx.array([[1, 2, 3]]), cache=loaded.make_cache())
    assert bool(mx.all(mx.isfinite(logits)).item())


def test_auto_keeps_stored_weights_on_gpus_and_when_fp32_does_not_fit(built) -> None:
    model = _packed(built["qwen3-4bit"])
    need = weights.float32_bytes(model)
    assert weights.choose("auto", model, "cpu", 4 * need).weights == "float32"
    tight = weights.choose("auto", model, "cpu", int(1.5 * need))
    assert tight.weights == "as-stored" and "kept as stored" in tight.reason
    assert weights.choose("auto", model, "cpu", None).weights == "as-stored"
    for gpu in ("gpu (metal)", "gpu (cuda)"):
        assert weights.choose("auto", model, gpu, 100 * need).weights == "as-stored"
    assert weights.choose("float32", model, "gpu (metal)", None).weights == "float32"


def test_names(tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--someorg--tiny-qwen3" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    assert mlx_dir.names(str(snapshot), snapshot) == ("someorg/tiny-qwen3", ("tiny-qwen3",))
    assert mlx_dir.names("someorg/tiny-qwen3", snapshot) == ("someorg/tiny-qwen3", ("tiny-qwen3",))
    plain = tmp_path / "my-model"
    plain.mkdir()
    assert mlx_dir.names(str(plain), plain) == ("my-model", ())


def test_hub_id_through_an_offline_cache(built, tmp_path: Path) -> None:
    """``serve --model someorg/tiny-qwen3`` from an offline Hugging Face cache: listed by its hub
    id and its short name, answering to both; the load log says what the weights became and why;
    SIGTERM ends it cleanly."""
    hf_home = tmp_path / "hf"
    factory.hub_cache(hf_home, "someorg/tiny-qwen3", built["qwen3-4bit"])
    env = {**os.environ, "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_CACHE", None)
    proc = start_serve(["--model", "someorg/tiny-qwen3", "--no-store"], env=env, log_dir=tmp_path)
    try:
        proc.wait_ready(timeout=180)
        ids = [m["id"] for m in httpx.get(f"{proc.url}/v1/models", timeout=60).json()["data"]]
        assert ids == ["someorg/tiny-qwen3", "tiny-qwen3"]
        for model in ids:
            r = _chat(proc.url, model=model, max_tokens=80, response_format=_schema_format(PERSON))
            assert r.status_code == 200, r.text[:300]
            assert r.json()["model"] == model
            jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), PERSON)
        log = proc.stderr()
        assert "model someorg/tiny-qwen3, also as tiny-qwen3 (mlx, stored 4-bit affine → float32" in log, log
        assert "weights: cpu: fp32" in log
        assert proc.terminate() == 0
    finally:
        proc.kill()


def _broken(built: dict[str, Path], tmp_path: Path, drop: tuple[str, ...], *,
            template: bool = True) -> Path:
    path = tmp_path / "broken"
    shutil.copytree(built["qwen3-4bit"], path)
    for name in drop:
        (path / name).unlink()
    if not template:
        factory._drop_template(path)
    return path


@pytest.mark.parametrize(("drop", "message"), [
    (("tokenizer.json",), r"has no tokenizer: add one of tokenizer\.json"),
    (("tokenizer.json", "tokenizer_config.json"), r"has no tokenizer"),
    (("tokenizer_config.json",), r"has no chat template \(there is no tokenizer_config\.json"),
    (("config.json",), r"has no config\.json"),
])
def test_a_broken_directory_fails_at_load_naming_what_is_missing(built, tmp_path: Path,
                                                                 drop: tuple[str, ...], message: str) -> None:
    with pytest.raises(ModelLoadError, match=message):
        load_model(str(_broken(built, tmp_path, drop)))


def test_an_unreadable_tokenizer_fails_at_load(built, tmp_path: Path) -> None:
    path = _broken(built, tmp_path, ())
    (path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match=r"cannot load model .*broken"):
        load_model(str(path))


def test_no_template_needs_a_flag(built, tmp_path: Path) -> None:
    """Without a chat template: refused, unless --chat-template FILE or the opt-in ChatML
    default (logged) is given."""
    path = _broken(built, tmp_path, (), template=False)
    with pytest.raises(ModelLoadError, match=r"tokenizer_config\.json has no chat_template and no "
                                             r"chat_template\.jinja\): give --chat-template FILE"):
        load_model(str(path))
    said: list[str] = []
    loaded = load_model(str(path), templates=ChatTemplateOptions(default=True), progress=said.append)
    assert any("no chat template: using ChatML" in s for s in said)
    assert "<|im_start|>user" in loaded.tokenizer.hf.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False)
    custom = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    loaded = load_model(str(path), templates=ChatTemplateOptions(template=custom))
    assert loaded.tokenizer.hf.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False) == "[user] x\n[assistant] "


def test_the_cli_refuses_a_broken_directory_in_one_line(built, tmp_path: Path) -> None:
    path = _broken(built, tmp_path, ("tokenizer.json",))
    proc = start_serve(["--model", str(path), "--no-store"], log_dir=tmp_path)
    try:
        assert proc.proc.wait(timeout=120) == 1
    finally:
        proc.kill()
    errors = [line for line in proc.stderr().splitlines() if "error" in line.lower()]
    assert errors == [f"afm-struct: error: {path} has no tokenizer: add one of tokenizer.json, "
                      "tokenizer.model, vocab.json, tiktoken.model (with tokenizer_config.json) "
                      "from the model's original repository"], proc.stderr()
    assert "Traceback" not in proc.stderr()
