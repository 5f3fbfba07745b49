"""GGUF files of llama-family models mapped onto mlx-lm's llama model.

``mx.load`` already decodes GGUF's Q4_0/Q4_1/Q8_0 blocks into MLX's affine quantized layout
(uint32-packed weights plus per-group scales and biases), so the work here is naming, choosing
a weight representation and reading the hyper-parameters from the metadata.  llama.cpp's
converter permutes Q and K for interleaved ("traditional") RoPE, so the model is built with
``rope_traditional=True`` and the weights are used as stored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ..errors import ModelLoadError
from .gguf_header import check_gguf

SUPPORTED_ARCHITECTURES = ("llama",)

_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases|bias)$")
_TOP_RE = re.compile(r"^([a-z_]+)\.(weight|scales|biases|bias)$")


@dataclass(frozen=True)
class GGUFContents:
    """Raw tensors and metadata of one GGUF file."""

    path: Path
    tensors: dict[str, mx.array]
    metadata: dict[str, Any]

    def meta(self, key: str, default: Any = None) -> Any:
        """A scalar metadata value as a Python object (arrays of size one are unwrapped)."""
        value = self.metadata.get(key, default)
        if isinstance(value, mx.array) and value.ndim == 0:
            return value.item()
        return value


def read_gguf(path: str | Path) -> GGUFContents:
    """Read a GGUF file, turning any failure into a :class:`ModelLoadError` naming the cause."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    arch = check_gguf(path)
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"unsupported GGUF architecture {arch!r} in {path}; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (use an mlx-lm model directory for others)"
        )
    try:
        tensors, metadata = mx.load(str(path), return_metadata=True)
    except Exception as exc:  # mlx raises plain RuntimeError/ValueError on corrupt files
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc} (is the file complete?)") from exc
    return GGUFContents(path=path, tensors=tensors, metadata=metadata)


def model_config(contents: GGUFContents) -> dict[str, Any]:
    """mlx-lm llama ``ModelArgs`` fields from GGUF metadata."""
    arch = contents.meta("general.architecture")

    def need(key: str) -> Any:
        value = contents.meta(f"{arch}.{key}")
        if value is None:
            raise ModelLoadError(f"GGUF metadata lacks {arch}.{key} in {contents.path}")
        return value

    hidden = int(need("embedding_length"))
    heads = int(need("attention.head_count"))
    tokens = contents.metadata.get("tokenizer.ggml.tokens")
    vocab = contents.meta(f"{arch}.vocab_size") or (len(tokens) if tokens else None)
    if vocab is None:
        raise ModelLoadError(f"cannot tell the vocabulary size of {contents.path}")
    head_dim = contents.meta(f"{arch}.rope.dimension_count") or hidden // heads
    return {
        "model_type": "llama",
        "hidden_size": hidden,
        "num_hidden_layers": int(need("block_count")),
        "intermediate_size": int(need("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(contents.meta(f"{arch}.attention.head_count_kv") or heads),
        "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
        "vocab_size": int(vocab),
        "head_dim": int(head_dim),
        "rope_theta": float(contents.meta(f"{arch}.rope.freq_base") or 10000.0),
        "rope_traditional": True,
        "max_position_embeddings": int(contents.meta(f"{arch}.context_length") or 2048),
        "tie_word_embeddings": "output.weight" not in contents.tensors,
    }


def rename_tensor(name: str) -> str:
    """GGUF tensor name → mlx-lm llama parameter name."""
    if m := _BLOCK_RE.match(name):
        layer, part, kind = m.groups()
        if part not in _BLOCK_NAMES:
            raise ModelLoadError(f"unexpected GGUF tensor {name}")
        kind = "bias" if kind == "bias" else kind
        return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    if m := _TOP_RE.match(name):
        part, kind = m.groups()
        if part in _TOP_NAMES:
            return f"{_TOP_NAMES[part]}.{kind}"
    raise ModelLoadError(f"unexpected GGUF tensor {name}")


@dataclass(frozen=True)
class QuantSpec:
    """How one quantized matrix is packed."""

    bits: int
    group_size: int


def quant_spec(weight: mx.array, scales: mx.array) -> QuantSpec:
    """Infer bits and group size from packed shapes (in = groups * group_size = 32 * cols / bits).

    GGUF's block formats that ``mx.load`` keeps quantized all use blocks of 32, so the
    smallest group size that gives a valid bit width is the right one.
    """
    packed_cols, groups = weight.shape[-1], scales.shape[-1]
    for group_size in (32, 64, 128):
        in_features = groups * group_size
        bits, rem = divmod(packed_cols * 32, in_features)
        if rem == 0 and bits in (2, 3, 4, 5, 6, 8):
            return QuantSpec(bits, group_size)
    raise ModelLoadError(f"cannot infer quantization of a {weight.shape} matrix with {groups} groups")


def mlx_weights(contents: GGUFContents, *, dequantize: bool, dtype: mx.Dtype = mx.float32
                ) -> tuple[dict[str, mx.array], dict[str, QuantSpec]]:
    """Renamed weights, either dequantized to ``dtype`` or kept packed with their specs."""
    renamed = {rename_tensor(k): v for k, v in contents.tensors.items()}
    specs: dict[str, QuantSpec] = {}
    out: dict[str, mx.array] = {}
    for name, value in renamed.items():
        if name.endswith((".scales", ".biases")):
            continue
        prefix = name.rsplit(".", 1)[0]
        scales = renamed.get(f"{prefix}.scales")
        if scales is None or not name.endswith(".weight"):
            out[name] = value.astype(dtype) if value.dtype != dtype and dequantize else value
            continue
        spec = quant_spec(value, scales)
        biases = renamed[f"{prefix}.biases"]
        if dequantize:
            out[name] = mx.dequantize(value, scales, biases, spec.group_size, spec.bits).astype(dtype)
        else:
            out[name], out[f"{prefix}.scales"], out[f"{prefix}.biases"] = value, scales, biases
            specs[prefix] = spec
    return out, specs


def build_model(contents: GGUFContents, *, dequantize: bool) -> tuple[nn.Module, dict[str, Any]]:
    """Instantiate mlx-lm's llama model with the file's weights loaded (and evaluated)."""
    from mlx_lm.models import llama

    config = model_config(contents)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights, specs = mlx_weights(contents, dequantize=dequantize)
    if specs:
        def predicate(path: str, module: nn.Module) -> bool | dict[str, int]:
            spec = specs.get(path)
            return {"group_size": spec.group_size, "bits": spec.bits} if spec else False

        nn.quantize(model, class_predicate=predicate)
        config["quantization"] = {
            p: {"group_size": s.group_size, "bits": s.bits} for p, s in specs.items()
        }
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(f"GGUF weights of {contents.path} do not fit a llama model: {exc}") from exc
    mx.eval(model.parameters())
    return model, config
