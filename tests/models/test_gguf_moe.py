"""The mixture-of-experts GGUF families end to end on tiny random-weight models (no downloads).

For qwen3moe (Qwen3-Coder-30B-A3B), glm4moe (GLM-4.5/4.6) and gpt-oss: mlx-lm's class with
random weights (4 experts, 2 used) is written to GGUF as llama.cpp's converter would
(tests/models/gguf_moe_factory.py), loaded back by our loader, and run from a fresh thread as
the server's scheduler runs it: its logits must be mlx-lm's.  Served over HTTP with the
family's tool-call template in its metadata, the syntax is detected from that template and a
tool request is answered.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import mlx.core as mx
import numpy as np
import pytest

from afm_struct.errors import ModelLoadError
from afm_struct.models.loader import LoadedModel, load_model

from .gguf_factory import build_reference, write_gguf
from .gguf_moe_factory import MOE_FAMILIES, Tiny, gpt_oss, tiny_moe_gguf

NAMES = sorted(MOE_FAMILIES)
SYNTAX = {"qwen3_moe": "qwen3_coder", "glm4_moe": "glm45", "gpt_oss": "harmony"}
TOKENS = [5, 77, 130, 9, 250, 3, 44, 61, 200, 12, 33, 100, 7, 8]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather", "strict": True,
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Tiny, LoadedModel]]:
    """Each family's reference model and the model our loader read back from its GGUF (loaded
    on this thread; the tests run it on others)."""
    directory = tmp_path_factory.mktemp("moe")
    out = {}
    for name in NAMES:
        tiny, path = tiny_moe_gguf(name, directory)
        out[name] = (tiny, load_model(str(path), weights="float32"))
    return out


def _greedy_reference(tiny: Tiny, prompt: list[int], n: int, eos: frozenset[int]) -> list[int]:
    """mlx-lm's model decoding greedily with mlx-lm's own caches (gpt-oss: rotating ones)."""
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(tiny.reference)
    logits, out = tiny.reference(mx.array([prompt]), cache=cache), []
    while len(out) < n and (not out or out[-1] not in eos):
        out.append(int(mx.argmax(logits[0, -1])))
        logits = tiny.reference(mx.array([out[-1:]]), cache=cache)
    return out


@pytest.mark.parametrize("family", NAMES)
def test_logits_match_mlx_lm_from_a_fresh_thread(built, family: str) -> None:
    """Loaded on one thread, run on another (the server's scheduler): the logits are mlx-lm's
    on the same weights, and the engine's greedy generation (prefill, decode steps, its batch
    caches; gpt-oss's sliding window of 4 is shorter than the prompt) writes what mlx-lm's
    model writes decoding greedily with mlx-lm's caches."""
    from afm_struct.decoding.generator import GenerationRequest, Generator
    from afm_struct.decoding.sampling import SamplingParams
    from afm_struct.turn.outputs import TextDelta

    tiny, loaded = built[family]
    tokens = mx.array([TOKENS])
    prompt = loaded.tokenizer.encode_chat([{"role": "user", "content": "hello there, city of Paris"}])
    got: dict[str, Any] = {}

    def run() -> None:
        try:
            logits = loaded.model(tokens)
            mx.eval(logits)
            got["logits"] = logits
            gen = Generator.from_loaded(loaded)
            params = SamplingParams(temperature=0.0, max_tokens=10)
            got["events"] = list(gen.generate(GenerationRequest(prompt, params)))
        except Exception as exc:  # reported on the test's thread below
            got["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert "error" not in got, got.get("error")
    end = got["events"][-1]
    assert end.reason in ("stop", "length") and end.error is None, end.error
    expected = tiny.reference(tokens)
    assert got["logits"].shape == expected.shape
    assert float(mx.max(mx.abs(expected - got["logits"]))) < 1e-4
    eos = loaded.tokenizer.eos_token_ids
    reference = [t for t in _greedy_reference(tiny, prompt, 10, eos) if t not in eos]
    text = "".join(e.text for e in got["events"] if isinstance(e, TextDelta))
    # Random weights end on any bytes: a character the end cuts is dropped, not sent as U+FFFD
    # (StreamingDetokenizer.flush), so the two agree up to the last whole character.
    assert text.rstrip("\ufffd") == loaded.tokenizer.decode(reference).rstrip("\ufffd")


def test_the_routing_is_exercised(built) -> None:
    """The check above can fail on a wrong expert layout: different tokens pick different
    experts, and each model's logits depend on which experts run."""
    tiny, _ = built["qwen3_moe"]
    block = tiny.reference.model.layers[0].mlp
    x = tiny.reference.model.embed_tokens(mx.array([TOKENS]))
    chosen = mx.argpartition(block.gate(x), kth=-2, axis=-1)[..., -2:]
    assert len({tuple(sorted(row)) for row in np.array(chosen[0]).tolist()}) > 1


def test_glm_mtp_block_is_not_loaded(built) -> None:
    """GLM-4.5's file has one block more than the model runs (next-token prediction)."""
    tiny, loaded = built["glm4_moe"]
    assert len(loaded.model.layers) == tiny.config["num_hidden_layers"] == 3


@pytest.mark.parametrize("family", NAMES)
def test_tool_syntax_detected_from_the_gguf_template(built, family: str) -> None:
    from afm_struct.tools.formats import chat_template_of, detect_format

    assert detect_format(chat_template_of(built[family][1].tokenizer)).name == SYNTAX[family]


@pytest.fixture(scope="module")
def served(built) -> Iterator[dict[str, str]]:
    """A live server per family (reasoning off: a random model that opens a thinking block or
    Harmony's analysis channel may never leave it)."""
    from server.live import start_server
    from server.settings import ServerSettings

    servers = {name: start_server(built[name][1], ServerSettings(reasoning="off")) for name in NAMES}
    yield {name: s.url for name, s in servers.items()}
    for server in servers.values():
        server.stop()


@pytest.mark.parametrize("family", NAMES)
def test_tool_request_over_http(served, family: str) -> None:
    body = {"model": family, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False,
            "temperature": 0, "max_tokens": 160}
    r = httpx.post(f"{served[family]}/v1/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text[:400]
    choice = r.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    # A greedy random gpt-oss stays in Harmony's (free) analysis channel until the budget-aware
    # closer ends it and writes the call: "length", with the call whole.
    assert choice["finish_reason"] == ("length" if family == "gpt_oss" else "tool_calls"), choice
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), WEATHER["function"]["parameters"])


def _mxfp4_experts(model: Any) -> None:
    """Round the expert weights to MXFP4 (gguf-py's quantizer, llama.cpp's format), so the file
    written from them holds the reference's weights exactly."""
    import gguf
    from mlx.utils import tree_flatten, tree_unflatten

    kind = gguf.GGMLQuantizationType.MXFP4
    rounded = [(k, mx.array(gguf.quants.dequantize(gguf.quants.quantize(np.array(v), kind), kind)))
               for k, v in tree_flatten(model.parameters())
               if ".experts." in k and k.endswith("proj.weight")]
    assert len(rounded) == 3 * model.args.num_hidden_layers
    model.update(tree_unflatten(rounded))
    mx.eval(model.parameters())


@pytest.fixture(scope="module")
def mxfp4(tmp_path_factory: pytest.TempPathFactory) -> tuple[Tiny, Path]:
    """gpt-oss with its expert weights in MXFP4, as llama.cpp converts the released checkpoints."""
    tiny = gpt_oss()
    tiny.post_build = _mxfp4_experts
    build_reference(tiny)
    path = write_gguf(tiny, tmp_path_factory.mktemp("mxfp4") / "gpt-oss-mxfp4.gguf",
                      dtype_of=lambda name: "MXFP4" if name.endswith("_exps.weight") else "F32")
    return tiny, path


@pytest.mark.parametrize("weights", ["float32", "quantized"])
def test_mxfp4_experts_load(mxfp4, weights: str) -> None:
    """MXFP4 experts (``mx.load`` silently stops at the first) are read from the file: dequantized, the
    logits are mlx-lm's on the same weights; kept packed (MLX's mxfp4 mode), they agree to
    float rounding."""
    from afm_struct.models.gguf import read_gguf

    tiny, path = mxfp4
    assert len(read_gguf(path).mxfp4) == 3 * tiny.config["num_hidden_layers"]
    loaded = load_model(str(path), weights=weights)
    if weights == "quantized":
        experts = loaded.model.model.layers[0].mlp.experts.gate_proj
        assert experts.mode == "mxfp4" and experts.weight.dtype == mx.uint32
    tokens = mx.array([TOKENS])
    diff = float(mx.max(mx.abs(tiny.reference(tokens) - loaded.model(tokens))))
    assert diff < (1e-4 if weights == "float32" else 1e-3), diff


def test_an_unreadable_quantization_is_still_refused(tmp_path: Path) -> None:
    """Types neither MLX nor this loader read are refused in one line, MoE files too."""
    tiny = gpt_oss()
    build_reference(tiny)
    path = write_gguf(tiny, tmp_path / "q5.gguf",
                      dtype_of=lambda name: "Q5_0" if name.endswith("ffn_up_exps.weight") else "F32")
    with pytest.raises(ModelLoadError) as info:
        load_model(str(path), weights="float32")
    assert "Q5_0" in str(info.value) and "ffn_up_exps.weight" in str(info.value)


def test_the_numpy_reader_reads_as_mx_load(tmp_path: Path) -> None:
    """Files with MXFP4 are read whole by numpy: every other type must come out exactly as
    ``mx.load`` gives it (Q8_0/Q4_0/Q4_1 in MLX's affine layout, BF16 exact)."""
    import gguf

    from afm_struct.models.gguf import read_gguf
    from afm_struct.models.gguf_header import read_header
    from afm_struct.models.gguf_tensors import read_tensor

    rng = np.random.default_rng(3)
    x = (rng.normal(size=(2, 6, 64)) * 0.3).astype(np.float32)
    path = tmp_path / "types.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    for kind in ("Q8_0", "Q4_0", "Q4_1"):
        qtype = getattr(gguf.GGMLQuantizationType, kind)
        writer.add_tensor(f"{kind}.weight", gguf.quants.quantize(x, qtype), raw_dtype=qtype)
    writer.add_tensor("F32.weight", x)
    writer.add_tensor("F16.weight", x.astype(np.float16))
    bf16 = gguf.quants.quantize(x, gguf.GGMLQuantizationType.BF16)
    writer.add_tensor("BF16.weight", bf16, raw_dtype=gguf.GGMLQuantizationType.BF16)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    expected = read_gguf(path).tensors  # mx.load, BF16 re-read exactly
    got: dict[str, mx.array] = {}
    for info in read_header(path).tensors:
        got.update(read_tensor(path, info))
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert mx.array_equal(got[name], value).item(), name


@pytest.mark.parametrize(("family", "dropped"), [("glm4_moe", "blk.2.exp_probs_b.bias"),
                                                 ("gpt_oss", "blk.1.attn_sinks.weight"),
                                                 ("qwen3_moe", "blk.0.ffn_down_exps.weight")])
def test_a_missing_moe_tensor_is_named(tmp_path: Path, family: str, dropped: str) -> None:
    from afm_struct.models.gguf import build_model, read_gguf

    _, path = tiny_moe_gguf(family, tmp_path, drop=(dropped,))
    with pytest.raises(ModelLoadError, match=rf"lacks tensor {dropped.replace('.', '[.]')} "):
        build_model(read_gguf(path), dequantize=True)


@pytest.mark.parametrize("family", NAMES)
def test_q8_0_experts_load_packed_and_dequantized(tmp_path: Path, family: str) -> None:
    """Stacked experts quantized to Q8_0 (routers and biases stay F32, as llama.cpp writes
    them) load packed into mlx-lm's QuantizedSwitchLinear or dequantized: the same weights."""
    from mlx_lm.models.switch_layers import QuantizedSwitchLinear

    _, path = tiny_moe_gguf(family, tmp_path, dtype="Q8_0")
    tokens = mx.array([TOKENS])
    packed_model = load_model(str(path), weights="quantized").model
    assert any(isinstance(m, QuantizedSwitchLinear) for m in packed_model.modules())
    packed = packed_model(tokens)
    dequantized = load_model(str(path), weights="float32").model(tokens)
    assert float(mx.max(mx.abs(packed - dequantized))) < 5e-2


def test_glm_gets_no_bos_even_when_the_file_asks(tmp_path: Path) -> None:
    """llama.cpp drops BOS for the glm4 pre-tokenizer (GLM's template writes [gMASK]<sop>
    itself); a file saying add_bos_token with [gMASK] as BOS must not get it twice."""
    from afm_struct.models.loader import load_tokenizer

    from .gguf_moe_factory import glm4_moe

    tiny = glm4_moe()
    tiny.vocab.bos, tiny.vocab.add_bos = tiny.vocab.id("[gMASK]"), True
    build_reference(tiny)
    tok = load_tokenizer(str(write_gguf(tiny, tmp_path / "glm.gguf")))
    assert not tok.add_bos
    assert tok.encode("[gMASK]<sop>hi", add_special_tokens=True)[:2] == [
        tiny.vocab.id("[gMASK]"), tiny.vocab.id("<sop>")]


def _fused_gate_up(model: Any) -> dict[str, np.ndarray]:
    """gpt-oss's experts with gate and up fused as llama.cpp's converter can write them:
    ``ffn_gate_up_exps`` holds the gate rows, then the up rows (biases on their last axis)."""
    out = {}
    for i, layer in enumerate(model.model.layers):
        gate, up = layer.mlp.experts.gate_proj, layer.mlp.experts.up_proj
        out[f"blk.{i}.ffn_gate_up_exps.weight"] = np.concatenate(
            [np.array(gate.weight), np.array(up.weight)], axis=1)
        out[f"blk.{i}.ffn_gate_up_exps.bias"] = np.concatenate([np.array(gate.bias), np.array(up.bias)], -1)
    return out


def test_fused_gate_up_experts_are_split(tmp_path: Path) -> None:
    """A file with ``ffn_gate_up_exps`` (and no separate gate/up experts) gives mlx-lm's logits."""
    tiny = gpt_oss()
    tiny.extra_tensors = _fused_gate_up
    build_reference(tiny)
    layers = range(tiny.config["num_hidden_layers"])
    separate = tuple(f"blk.{i}.ffn_{p}_exps.{k}"
                     for i in layers for p in ("gate", "up") for k in ("weight", "bias"))
    loaded = load_model(str(write_gguf(tiny, tmp_path / "fused.gguf", drop=separate)), weights="float32")
    tokens = mx.array([TOKENS])
    assert float(mx.max(mx.abs(tiny.reference(tokens) - loaded.model(tokens)))) < 1e-4
