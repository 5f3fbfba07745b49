"""GGUF weight types and load errors on tiny files (quantized, BF16, K-quants, missing parts)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from afm_struct.errors import ModelLoadError
from afm_struct.models.gguf import build_model, read_gguf
from afm_struct.models.gguf_arch import FAMILIES, ArchMeta
from afm_struct.models.loader import load_model

from .gguf_factory import build_reference, gguf, qwen3, tiny_gguf, write_gguf

TOKENS = mx.array([[5, 77, 130, 9, 250, 3, 44, 61]])


@pytest.mark.parametrize("dtype", ["Q8_0", "Q4_0", "Q4_1", "F16"])
def test_mlx_types_load_packed_and_dequantized(tmp_path: Path, dtype: str) -> None:
    tiny, path = tiny_gguf("qwen3", tmp_path, dtype=dtype)
    ref = tiny.reference(TOKENS).reshape(-1)
    dequantized = load_model(str(path), weights="float32").model(TOKENS).reshape(-1)
    packed = load_model(str(path), weights="quantized").model(TOKENS).astype(mx.float32).reshape(-1)
    assert float(mx.max(mx.abs(packed - dequantized))) < 2e-2  # the same weights either way

    def cosine(a: mx.array, b: mx.array) -> float:
        return float((a * b).sum() / mx.sqrt((a * a).sum() * (b * b).sum()))

    assert cosine(dequantized, ref) > {"Q8_0": 0.999, "F16": 0.9999}.get(dtype, 0.9)


def test_bf16_is_read_exactly(tmp_path: Path) -> None:
    tiny, path = tiny_gguf("gemma3", tmp_path, dtype="BF16")
    contents = read_gguf(path)
    stored = contents.tensors["blk.0.attn_q.weight"]
    assert stored.dtype == mx.bfloat16  # mx.load alone narrows BF16 to float16
    expected = tiny.reference.model.layers[0].self_attn.q_proj.weight.astype(mx.bfloat16)
    assert mx.array_equal(stored, expected)


def test_k_quants_are_refused_in_one_line_saying_what_to_convert_to(tmp_path: Path) -> None:
    tiny = qwen3()
    build_reference(tiny)
    path = write_gguf(tiny, tmp_path / "q4k.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "k.gguf"), "qwen3")
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((64, 144), np.uint8),
                      raw_dtype=gguf.GGMLQuantizationType.Q4_K)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError) as info:
        read_gguf(tmp_path / "k.gguf")
    message = str(info.value)
    assert "\n" not in message and "Q4_K" in message and "blk.0.ffn_down.weight" in message
    assert "Q8_0" in message and "mlx-lm" in message
    assert read_gguf(path).family.module == "qwen3"


def test_a_missing_tensor_is_named(tmp_path: Path) -> None:
    _, path = tiny_gguf("qwen3", tmp_path, drop=("blk.1.attn_k_norm.weight",))
    with pytest.raises(ModelLoadError, match=r"lacks tensor blk\.1\.attn_k_norm\.weight"):
        build_model(read_gguf(path), dequantize=True)


@pytest.mark.parametrize("arch", sorted(FAMILIES))
def test_a_missing_metadata_key_is_named(arch: str) -> None:
    meta = ArchMeta(arch, {}.get, {}, "m.gguf")
    with pytest.raises(ModelLoadError, match=rf"lacks {arch}\.(embedding_length|attention\.head_count)"):
        FAMILIES[arch].config(meta)


@pytest.mark.parametrize("dtype", ["Q8_0", "F16"])
def test_a_gguf_says_how_it_is_stored_and_auto_keeps_it_packed_when_fp32_would_not_fit(
        tmp_path: Path, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # /v1/models showed "stored": "" for every GGUF, and `auto` dequantized to fp32 whatever the
    # memory (mlx directories checked it; models/weights.py).
    from afm_struct.models import weights

    _, path = tiny_gguf("qwen3", tmp_path, dtype=dtype)
    roomy = load_model(str(path))
    assert roomy.info.stored == dtype and roomy.info.weights == "float32"
    assert roomy.info.weights_reason.startswith("cpu: fp32")
    monkeypatch.setattr(weights, "available_memory", lambda: 1000)  # bytes: nothing fits
    tight = load_model(str(path))
    assert tight.info.weights == "quantized" and "kept as stored" in tight.info.weights_reason
    assert tight.info.stored == dtype
