"""One mapping table per GGUF architecture: mlx-lm class, tensor names, hyper-parameters.

Each family is loaded into mlx-lm's own model class (no model code here).  The tables follow
llama.cpp's converter (``convert_hf_to_gguf.py`` and gguf-py's tensor-name map), including the
two places where it changes weights rather than names:

* ``llama``: Q and K are permuted for interleaved RoPE, so the model is built with
  ``rope_traditional=True`` and the weights are used as stored.  Qwen, Phi-3 and Gemma keep
  NeoX RoPE and unpermuted weights, which their mlx-lm classes expect.
* Gemma: every ``*norm.weight`` is stored as ``1 + w`` (llama.cpp's RMSNorm multiplies by the
  weight; Gemma's adds one first), so the shift is undone here (:attr:`Family.norm_shift`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx

from ..errors import ModelLoadError

_ATTENTION = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
}
_MLP = {"ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_LLAMA_BLOCKS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                 **_ATTENTION, **_MLP}
_QK_NORM = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
_PHI3_BLOCKS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_qkv": "self_attn.qkv_proj", "attn_output": "self_attn.o_proj",
                "ffn_up": "mlp.gate_up_proj", "ffn_down": "mlp.down_proj"}
# Gemma 2/3 norm every sub-block on both sides; llama.cpp's names for the four norms.
_GEMMA_BLOCKS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
                 "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
                 **_ATTENTION, **_MLP}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
# Tensors that carry hyper-parameters, not weights: read by the config, never loaded.
AUX_TENSORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")


class ArchMeta:
    """Metadata of one file under its architecture's prefix, with errors naming the key."""

    def __init__(self, arch: str, meta: Callable[[str], Any], tensors: dict[str, mx.array],
                 path: Any) -> None:
        self.arch, self._meta, self.tensors, self.path = arch, meta, tensors, path

    def get(self, key: str, default: Any = None) -> Any:
        """``{arch}.{key}``, or ``default`` when absent."""
        value = self._meta(f"{self.arch}.{key}")
        return default if value is None else value

    def need(self, key: str) -> Any:
        """``{arch}.{key}``; a :class:`ModelLoadError` naming it when absent."""
        value = self._meta(f"{self.arch}.{key}")
        if value is None:
            raise ModelLoadError(f"GGUF metadata lacks {self.arch}.{key} in {self.path}")
        return value

    def tensor(self, name: str) -> mx.array:
        """An auxiliary tensor; a :class:`ModelLoadError` naming it when absent."""
        if name not in self.tensors:
            raise ModelLoadError(f"GGUF file {self.path} lacks tensor {name}")
        return self.tensors[name]


def _vocab_size(m: ArchMeta) -> int:
    vocab = m.get("vocab_size")
    if vocab is None:
        tokens = m._meta("tokenizer.ggml.tokens")
        vocab = len(tokens) if tokens is not None else None
    if vocab is None and "token_embd.weight" in m.tensors:
        vocab = m.tensors["token_embd.weight"].shape[0]
    if vocab is None:
        raise ModelLoadError(f"cannot tell the vocabulary size of {m.path}")
    return int(vocab)


def _common(m: ArchMeta, model_type: str, default_theta: float = 10000.0) -> dict[str, Any]:
    hidden, heads = int(m.need("embedding_length")), int(m.need("attention.head_count"))
    return {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(m.need("block_count")),
        "intermediate_size": int(m.need("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(m.get("attention.head_count_kv", heads)),
        "rms_norm_eps": float(m.need("attention.layer_norm_rms_epsilon")),
        "vocab_size": _vocab_size(m),
        "head_dim": int(m.get("attention.key_length") or hidden // heads),
        "rope_theta": float(m.get("rope.freq_base", default_theta)),
        "max_position_embeddings": int(m.get("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in m.tensors,
    }


def llama_config(m: ArchMeta) -> dict[str, Any]:
    """Llama 1-3 and Mistral-style llama variants (SmolLM, Mistral 7B, Ministral...)."""
    cfg = _common(m, "llama")
    cfg["head_dim"] = int(m.get("attention.key_length") or m.get("rope.dimension_count")
                          or cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg["rope_traditional"] = True  # Q/K are stored permuted for interleaved RoPE
    cfg["attention_bias"] = "blk.0.attn_q.bias" in m.tensors
    cfg["mlp_bias"] = "blk.0.ffn_up.bias" in m.tensors
    if (window := m.get("attention.sliding_window")) is not None:
        # Kept as mlx-lm keeps Mistral's HF config: without layer_types every layer attends fully.
        cfg["sliding_window"] = int(window)
    if "rope_freqs.weight" in m.tensors:
        # Llama 3.1+ keep their scaled RoPE as per-frequency factors (see finish_llama).
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 1.0,
                               "original_max_position_embeddings": cfg["max_position_embeddings"]}
    return cfg


def finish_llama(model: Any, m: ArchMeta, cfg: dict[str, Any]) -> None:
    """Llama 3.1+: RoPE frequencies are ``base^(2i/d)`` times the file's ``rope_freqs`` factors
    (what llama.cpp multiplies by), set on mlx-lm's Llama3RoPE in place of its formula."""
    if "rope_freqs.weight" not in m.tensors:
        return
    factors = m.tensor("rope_freqs.weight").astype(mx.float32)
    dims = int(factors.shape[-1]) * 2
    freqs = cfg["rope_theta"] ** (mx.arange(0, dims, 2, dtype=mx.float32) / dims) * factors
    # Evaluated here: a lazy array built on the loading thread cannot be evaluated from the
    # scheduler's thread (MLX streams are per thread), and _freqs is no parameter that the
    # loader's final eval of the parameters would reach.
    mx.eval(freqs)
    for layer in model.layers:
        layer.self_attn.rope._freqs = freqs


def qwen2_config(m: ArchMeta) -> dict[str, Any]:
    """Qwen2 / Qwen2.5 (biased Q/K/V, NeoX RoPE)."""
    cfg = _common(m, "qwen2", default_theta=1_000_000.0)
    cfg.pop("head_dim")  # mlx-lm's qwen2 derives it from hidden_size / heads
    return cfg


def qwen3_config(m: ArchMeta) -> dict[str, Any]:
    """Qwen3 dense (RMS-normed Q and K per head)."""
    return _common(m, "qwen3", default_theta=1_000_000.0)


def phi3_config(m: ArchMeta) -> dict[str, Any]:
    """Phi-3 / Phi-3.5 / Phi-4-mini (fused QKV and gate/up, partial and long RoPE)."""
    cfg = _common(m, "phi3")
    head_dim = cfg.pop("head_dim")
    cfg["partial_rotary_factor"] = int(m.get("rope.dimension_count", head_dim)) / head_dim
    if "rope_factors_long.weight" in m.tensors:
        cfg["rope_scaling"] = {
            "type": "longrope",
            "long_factor": m.tensor("rope_factors_long.weight").astype(mx.float32).tolist(),
            "short_factor": m.tensor("rope_factors_short.weight").astype(mx.float32).tolist(),
        }
        cfg["original_max_position_embeddings"] = int(m.need("rope.scaling.original_context_length"))
    return cfg


def _query_scalar(m: ArchMeta, cfg: dict[str, Any], big_layers: int) -> float:
    """Gemma's ``query_pre_attn_scalar``: GGUF has no key for it, so llama.cpp tells the 27B model
    (hidden / heads) from the others (head_dim) by its layer count; a stored scale wins."""
    if (scale := m.get("attention.scale")) is not None:
        return 1.0 / float(scale) ** 2
    if cfg["num_hidden_layers"] == big_layers:
        return cfg["hidden_size"] / cfg["num_attention_heads"]
    return float(cfg["head_dim"])


def gemma2_config(m: ArchMeta) -> dict[str, Any]:
    """Gemma 2 (scaled embeddings, attention and final logit soft-capping)."""
    cfg = _common(m, "gemma2")
    cfg["attn_logit_softcapping"] = float(m.get("attn_logit_softcapping", 50.0))
    cfg["final_logit_softcapping"] = float(m.get("final_logit_softcapping", 30.0))
    cfg["query_pre_attn_scalar"] = _query_scalar(m, cfg, big_layers=46)
    if (window := m.get("attention.sliding_window")) is not None:
        cfg["sliding_window"] = int(window)  # as mlx-lm's gemma2 reads the HF config: unused
    return cfg


def _window_pattern(m: ArchMeta) -> int:
    value = m.get("attention.sliding_window_pattern")
    if value is None:
        return 6  # llama.cpp's fixed Gemma 3 pattern: five local layers, then a global one
    if isinstance(value, int | float) or (hasattr(value, "ndim") and value.ndim == 0):
        return int(value)
    flags = [bool(v) for v in (value.tolist() if hasattr(value, "tolist") else value)]
    period = flags.index(False) + 1 if False in flags else len(flags) + 1
    if any(flags[i] != ((i + 1) % period != 0) for i in range(len(flags))):
        raise ModelLoadError(f"{m.path}: sliding-window layers are not periodic; mlx-lm's gemma3 "
                             "needs a fixed pattern")
    return period


def gemma3_config(m: ArchMeta) -> dict[str, Any]:
    """Gemma 3 text (QK-norm, local/global layers with their own RoPE bases)."""
    cfg = _common(m, "gemma3_text", default_theta=1_000_000.0)
    cfg.pop("tie_word_embeddings")  # mlx-lm's gemma3 decides from lm_head's presence (sanitize)
    cfg["query_pre_attn_scalar"] = _query_scalar(m, cfg, big_layers=62)
    cfg["sliding_window"] = int(m.need("attention.sliding_window"))
    cfg["sliding_window_pattern"] = _window_pattern(m)
    cfg["rope_local_base_freq"] = float(m.get("rope.freq_base_swa", 10000.0))
    if m.get("rope.scaling.type") == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": float(m.need("rope.scaling.factor"))}
    return cfg


@dataclass(frozen=True)
class Family:
    """How one GGUF architecture becomes an mlx-lm model."""

    architecture: str
    module: str  # mlx_lm.models.<module>
    blocks: dict[str, str]  # llama.cpp block tensor → parameter path inside mlx-lm's layer
    config: Callable[[ArchMeta], dict[str, Any]]
    norm_shift: float = 0.0  # added to stored ``*norm.weight`` tensors
    finish: Callable[[Any, ArchMeta, dict[str, Any]], None] | None = None
    top: dict[str, str] = field(default_factory=lambda: dict(TOP_NAMES))


FAMILIES: dict[str, Family] = {f.architecture: f for f in (
    Family("llama", "llama", _LLAMA_BLOCKS, llama_config, finish=finish_llama),
    Family("qwen2", "qwen2", _LLAMA_BLOCKS, qwen2_config),
    Family("qwen3", "qwen3", {**_LLAMA_BLOCKS, **_QK_NORM}, qwen3_config),
    Family("phi3", "phi3", _PHI3_BLOCKS, phi3_config),
    Family("gemma2", "gemma2", _GEMMA_BLOCKS, gemma2_config, norm_shift=-1.0),
    Family("gemma3", "gemma3_text", {**_GEMMA_BLOCKS, **_QK_NORM}, gemma3_config, norm_shift=-1.0),
)}
