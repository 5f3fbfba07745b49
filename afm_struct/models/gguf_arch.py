"""One mapping table per GGUF architecture: mlx-lm class, tensor names, hyper-parameters.

Each family is loaded into mlx-lm's own model class (no model code here).  The tables follow
llama.cpp's converter (``convert_hf_to_gguf.py`` and gguf-py's tensor-name map), including the
two places where it changes weights rather than names:

* ``llama``: Q and K are permuted for interleaved RoPE, so the model is built with
  ``rope_traditional=True`` and the weights are used as stored.  Qwen, Phi-3 and Gemma keep
  NeoX RoPE and unpermuted weights, which their mlx-lm classes expect.
* Gemma: every ``*norm.weight`` is stored as ``1 + w`` (llama.cpp's RMSNorm multiplies by the
  weight; Gemma's adds one first), so the shift is undone here (:attr:`Family.norm_shift`).

Mixture-of-experts families store each layer's experts stacked, one ``(experts, out, in)``
tensor per projection (``ffn_gate_exps`` / ``ffn_up_exps`` / ``ffn_down_exps``), which is the
layout of mlx-lm's ``SwitchGLU``, so they load as stored; the router is ``ffn_gate_inp``.
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
_MOE = {"ffn_gate_inp": "mlp.gate", "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
        "ffn_up_exps": "mlp.switch_mlp.up_proj", "ffn_down_exps": "mlp.switch_mlp.down_proj"}
_QWEN3_MOE_BLOCKS = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                     **_ATTENTION, **_QK_NORM, **_MOE}
# GLM-4.5/4.6: leading dense layers (_MLP), then routed experts with a sigmoid router whose
# selection bias is ``exp_probs_b.bias``, plus shared experts.  Keys "part.kind" name a whole
# parameter path (tensors whose mlx-lm name is not "<module>.<kind>").
_GLM4_MOE_BLOCKS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
                    **_ATTENTION, **_QK_NORM, **_MLP, **_MOE,
                    "exp_probs_b.bias": "mlp.gate.e_score_correction_bias",
                    "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
                    "ffn_up_shexp": "mlp.shared_experts.up_proj",
                    "ffn_down_shexp": "mlp.shared_experts.down_proj"}
# gpt-oss: biased attention with per-head sinks, a biased router, biased experts (SwiGLU-OAI).
_GPT_OSS_BLOCKS = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
                   **_ATTENTION, "attn_sinks.weight": "self_attn.sinks", "ffn_gate_inp": "mlp.router",
                   "ffn_gate_exps": "mlp.experts.gate_proj", "ffn_up_exps": "mlp.experts.up_proj",
                   "ffn_down_exps": "mlp.experts.down_proj"}
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


def _rope_scaling(m: ArchMeta) -> dict[str, Any] | None:
    """YaRN as llama.cpp's converter stores it (type, factor, original context, betas)."""
    kind = m.get("rope.scaling.type")
    if kind in (None, "none"):
        return None
    if kind != "yarn":
        raise ModelLoadError(f"{m.path}: RoPE scaling {kind!r} is not supported for {m.arch}")
    scaling = {"rope_type": "yarn", "factor": float(m.need("rope.scaling.factor")),
               "original_max_position_embeddings": int(m.need("rope.scaling.original_context_length"))}
    for key in ("beta_fast", "beta_slow"):
        if (value := m.get(f"rope.scaling.yarn_{key}")) is not None:
            scaling[key] = float(value)
    return scaling


def _experts(m: ArchMeta) -> tuple[int, int]:
    """(experts, experts used per token)."""
    return int(m.need("expert_count")), int(m.need("expert_used_count"))


def qwen3_moe_config(m: ArchMeta) -> dict[str, Any]:
    """Qwen3 MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): every layer routed, softmax router,
    top-k weights renormalized (llama.cpp hard-codes that for this architecture)."""
    cfg = _common(m, "qwen3_moe", default_theta=1_000_000.0)
    cfg["num_experts"], cfg["num_experts_per_tok"] = _experts(m)
    cfg["moe_intermediate_size"] = int(m.need("expert_feed_forward_length"))
    cfg.update(decoder_sparse_step=1, mlp_only_layers=[],
               norm_topk_prob=bool(m.get("expert_weights_norm", True)), rope_scaling=_rope_scaling(m))
    return cfg


def glm4_moe_layers(m: ArchMeta) -> int:
    """GLM-4.5's main layers: llama.cpp's block count includes the next-token-prediction (MTP)
    blocks appended after them, which plain decoding does not run."""
    return int(m.need("block_count")) - int(m.get("nextn_predict_layers", 0))


def glm4_moe_ignores(name: str, m: ArchMeta) -> bool:
    """The MTP blocks' tensors (``blk.N.*`` from the first block past the main layers)."""
    if not name.startswith("blk."):
        return False
    return int(name.split(".", 2)[1]) >= glm4_moe_layers(m)


def glm4_moe_config(m: ArchMeta) -> dict[str, Any]:
    """GLM-4.5 / 4.6 (and Air): partial NeoX RoPE, biased Q/K/V, optional QK-norm, leading dense
    layers, sigmoid router with a selection bias, scaled routed experts plus shared experts."""
    cfg = _common(m, "glm4_moe")
    gating = m.get("expert_gating_func", 2)
    if int(gating) != 2:
        raise ModelLoadError(f"{m.path}: GLM-4 MoE router gating {gating} is not sigmoid (2)")
    shared = int(m.get("expert_shared_count", 0))
    cfg["num_hidden_layers"] = glm4_moe_layers(m)
    cfg["n_routed_experts"], cfg["num_experts_per_tok"] = _experts(m)
    cfg.update(
        moe_intermediate_size=int(m.need("expert_feed_forward_length")),
        n_shared_experts=shared or None,
        first_k_dense_replace=int(m.get("leading_dense_block_count", 0)),
        routed_scaling_factor=float(m.get("expert_weights_scale", 1.0)),
        norm_topk_prob=bool(m.get("expert_weights_norm", True)),
        n_group=int(m.get("expert_group_count", 1)), topk_group=int(m.get("expert_group_used_count", 1)),
        partial_rotary_factor=int(m.get("rope.dimension_count", cfg["head_dim"])) / cfg["head_dim"],
        use_qk_norm="blk.0.attn_q_norm.weight" in m.tensors,
        attention_bias="blk.0.attn_q.bias" in m.tensors,
        rope_scaling=_rope_scaling(m))
    return cfg


def gpt_oss_config(m: ArchMeta) -> dict[str, Any]:
    """gpt-oss: alternating sliding-window (even layers, as llama.cpp fixes it) and full
    attention with sinks, softmax over the top-k router logits, YaRN RoPE."""
    cfg = _common(m, "gpt_oss", default_theta=150000.0)
    cfg["num_local_experts"], cfg["num_experts_per_tok"] = _experts(m)
    cfg["intermediate_size"] = int(m.get("expert_feed_forward_length") or cfg["intermediate_size"])
    cfg["sliding_window"] = int(m.need("attention.sliding_window"))
    cfg["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention"
                          for i in range(cfg["num_hidden_layers"])]
    cfg["rope_scaling"] = _rope_scaling(m)
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
    ignores: Callable[[str, ArchMeta], bool] | None = None  # tensors the model does not run


FAMILIES: dict[str, Family] = {f.architecture: f for f in (
    Family("llama", "llama", _LLAMA_BLOCKS, llama_config, finish=finish_llama),
    Family("qwen2", "qwen2", _LLAMA_BLOCKS, qwen2_config),
    Family("qwen3", "qwen3", {**_LLAMA_BLOCKS, **_QK_NORM}, qwen3_config),
    Family("phi3", "phi3", _PHI3_BLOCKS, phi3_config),
    Family("gemma2", "gemma2", _GEMMA_BLOCKS, gemma2_config, norm_shift=-1.0),
    Family("gemma3", "gemma3_text", {**_GEMMA_BLOCKS, **_QK_NORM}, gemma3_config, norm_shift=-1.0),
    Family("qwen3moe", "qwen3_moe", _QWEN3_MOE_BLOCKS, qwen3_moe_config),
    Family("glm4moe", "glm4_moe", _GLM4_MOE_BLOCKS, glm4_moe_config, ignores=glm4_moe_ignores),
    Family("gpt-oss", "gpt_oss", _GPT_OSS_BLOCKS, gpt_oss_config),
)}
