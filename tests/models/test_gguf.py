"""GGUF → mlx-lm llama mapping on the embedded file and on hand-made bad files."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from afm_struct.errors import ModelLoadError
from afm_struct.models.embedded import embedded_model_path
from afm_struct.models.gguf import (
    build_model,
    mlx_weights,
    model_config,
    quant_spec,
    read_gguf,
    rename_tensor,
)


@pytest.fixture(scope="module")
def contents():
    return read_gguf(embedded_model_path())


def test_tensor_names_map_onto_llama_parameters():
    assert rename_tensor("blk.3.attn_q.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert rename_tensor("blk.0.ffn_down.scales") == "model.layers.0.mlp.down_proj.scales"
    assert rename_tensor("blk.12.ffn_norm.weight") == "model.layers.12.post_attention_layernorm.weight"
    assert rename_tensor("token_embd.biases") == "model.embed_tokens.biases"
    assert rename_tensor("output_norm.weight") == "model.norm.weight"
    assert rename_tensor("output.weight") == "lm_head.weight"
    with pytest.raises(ModelLoadError, match="unexpected GGUF tensor"):
        rename_tensor("blk.0.attn_qkv.weight")


def test_config_read_from_metadata(contents):
    cfg = model_config(contents)
    assert cfg["hidden_size"] == 576
    assert cfg["num_hidden_layers"] == 30
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (9, 3)
    assert cfg["intermediate_size"] == 1536
    assert cfg["vocab_size"] == 49152
    assert cfg["rope_traditional"] is True  # GGUF stores Q/K permuted for interleaved RoPE
    assert cfg["rope_theta"] == 100000.0
    assert cfg["tie_word_embeddings"] is True


def test_mixed_quantization_is_inferred_per_matrix(contents):
    t = contents.tensors
    emb = quant_spec(t["token_embd.weight"], t["token_embd.scales"])
    q = quant_spec(t["blk.0.attn_q.weight"], t["blk.0.attn_q.scales"])
    down = quant_spec(t["blk.0.ffn_down.weight"], t["blk.0.ffn_down.scales"])
    assert (emb.bits, emb.group_size) == (8, 32)
    assert (q.bits, q.group_size) == (4, 32)
    assert (down.bits, down.group_size) == (4, 32)


def test_dequantized_and_quantized_weights_agree(contents):
    deq, specs = mlx_weights(contents, dequantize=True)
    packed, packed_specs = mlx_weights(contents, dequantize=False)
    assert specs == {}
    assert packed_specs["model.layers.0.self_attn.q_proj"].bits == 4
    name = "model.layers.0.self_attn.k_proj"
    spec = packed_specs[name]
    again = mx.dequantize(packed[f"{name}.weight"], packed[f"{name}.scales"], packed[f"{name}.biases"],
                          spec.group_size, spec.bits)
    assert deq[f"{name}.weight"].shape == (192, 576)
    assert deq[f"{name}.weight"].dtype == mx.float32
    np.testing.assert_allclose(np.array(deq[f"{name}.weight"]), np.array(again.astype(mx.float32)))


def test_quantized_model_matches_dequantized_model(contents):
    fp, _ = build_model(contents, dequantize=True)
    q, cfg = build_model(contents, dequantize=False)
    assert cfg["quantization"]["model.embed_tokens"] == {"group_size": 32, "bits": 8}
    tokens = mx.array([[1, 4093, 198, 6004, 2]])
    a, b = fp(tokens), q(tokens)
    assert int(mx.argmax(a[0, -1])) == int(mx.argmax(b[0, -1]))
    assert float(mx.max(mx.abs(a - b))) < 0.5


def test_missing_file(tmp_path):
    with pytest.raises(ModelLoadError, match="not found"):
        read_gguf(tmp_path / "nope.gguf")


def test_corrupt_file(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 10)
    with pytest.raises(ModelLoadError, match="unsupported GGUF version"):
        read_gguf(bad)
    header = b"GGUF" + (3).to_bytes(4, "little") + (1).to_bytes(8, "little") + (1).to_bytes(8, "little")
    bad.write_bytes(header + (10**12).to_bytes(8, "little") + b"key")  # a key longer than the file
    with pytest.raises(ModelLoadError, match="truncated or corrupt"):
        read_gguf(bad)


def test_unsupported_architecture(tmp_path):
    path = tmp_path / "falcon.gguf"
    mx.save_gguf(str(path), {"token_embd.weight": mx.zeros((4, 4))},
                 {"general.architecture": "falcon"})
    with pytest.raises(ModelLoadError, match="unsupported GGUF architecture 'falcon'"):
        read_gguf(path)


def test_truncated_file(tmp_path):
    data = embedded_model_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="truncated"):
        read_gguf(cut)


def test_a_header_cut_inside_the_vocabulary_is_refused(tmp_path):
    """The header's string arrays (tokens, merges) are stepped over, not decoded: a file that
    ends inside one, in a string or in a string's length, is still refused by the header check."""
    from afm_struct.models.gguf_header import read_header

    data = embedded_model_path().read_bytes()
    cut = tmp_path / "cut.gguf"
    for size in range(400_000, 400_016):  # SmolLM2's tokens array spans bytes ~1k-763k
        cut.write_bytes(data[:size])
        with pytest.raises(ModelLoadError, match="truncated or corrupt"):
            read_header(cut)


def test_not_a_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_text("hello, I am a text file")
    with pytest.raises(ModelLoadError, match="not a GGUF file"):
        read_gguf(bad)
