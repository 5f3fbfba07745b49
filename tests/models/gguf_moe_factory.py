"""Tiny random-weight mixture-of-experts models, written to GGUF as llama.cpp's converter does.

Kept apart from :mod:`gguf_factory`'s ``FAMILIES`` (which many suites sweep) so that only the
MoE tests pay for these.  As there, names come from the ``gguf`` package's own tensor map: the
converter stacks each layer's experts into one tensor per projection under the merged Hugging
Face name (``mlp.experts.gate_proj`` → ``ffn_gate_exps``), which is what mlx-lm's
``switch_mlp`` holds, so the map is asked under that name.  The metadata keys are the
converter's (``expert_count``, ``expert_feed_forward_length``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .gguf_factory import CHATML, Tiny, base_config, build_reference, byte_bpe_vocab, write_gguf

gguf = __import__("pytest").importorskip("gguf")

TOOLS_DATA = Path(__file__).parent.parent / "tools" / "data"
EXPERTS, USED, EXPERT_FFN = 4, 2, 32


def _template(name: str) -> str:
    """The family's tool-call template (tests/tools/data, written from its published syntax)."""
    return (TOOLS_DATA / f"{name}.jinja").read_text(encoding="utf-8")


def hf_names(name: str) -> tuple[str, str]:
    """mlx-lm parameter → (Hugging Face module path, suffix) as the converter maps it."""
    name = name.replace(".switch_mlp.", ".experts.")  # the converter's merged-experts name
    if name.endswith(".self_attn.sinks"):
        return name, "weight"  # gpt-oss's converter appends ".weight" to the sinks
    if name.endswith(".e_score_correction_bias"):
        return name.removesuffix("_bias"), "bias"
    stem, suffix = name.rsplit(".", 1)
    return stem, suffix


def qwen3_moe() -> Tiny:
    """Qwen3-Coder-30B-A3B's layout: QK-norm, every layer routed (softmax, top-k renormalized),
    untied head, Qwen3-Coder's XML tool calls."""
    vocab = byte_bpe_vocab("qwen2", CHATML, ["<tool_call>", "</tool_call>", "<think>", "</think>"],
                           eos="<|im_end|>")
    cfg = base_config("qwen3_moe", vocab, tie_word_embeddings=False, num_experts=EXPERTS,
                      num_experts_per_tok=USED, decoder_sparse_step=1, mlp_only_layers=[],
                      moe_intermediate_size=EXPERT_FFN, norm_topk_prob=True)
    return Tiny("qwen3moe", "qwen3_moe", cfg, vocab, _template("qwen3_coder"), gguf_names=hf_names,
                metadata={"expert_count": EXPERTS, "expert_used_count": USED,
                          "expert_feed_forward_length": EXPERT_FFN})


GLM_CONTROL = ["<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
               "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>",
               "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"]


def _glm_mtp_block(model: Any) -> dict[str, np.ndarray]:
    """GLM-4.5 ships a next-token-prediction block after its layers (``blk.N.nextn.*`` plus a
    layer's own tensors); the converter keeps it, plain decoding never runs it."""
    n, hidden = model.args.num_hidden_layers, model.args.hidden_size
    rng = np.random.default_rng(1)
    return {f"blk.{n}.attn_norm.weight": np.ones(hidden, np.float32),
            f"blk.{n}.nextn.eh_proj.weight": rng.normal(size=(hidden, 2 * hidden)).astype(np.float32),
            f"blk.{n}.nextn.enorm.weight": np.ones(hidden, np.float32),
            f"blk.{n}.nextn.hnorm.weight": np.ones(hidden, np.float32)}


def glm4_moe() -> Tiny:
    """GLM-4.5's layout: one leading dense layer, then sigmoid-routed experts with a selection
    bias, routed scaling and a shared expert; biased Q/K/V, QK-norm, half-rotary NeoX RoPE, an
    MTP block after the layers; GLM's <arg_key>/<arg_value> tool calls (its tags are control
    tokens, as in GLM's own vocabulary)."""
    vocab = byte_bpe_vocab("glm4", GLM_CONTROL, eos="<|endoftext|>")
    cfg = base_config("glm4_moe", vocab, num_hidden_layers=3, tie_word_embeddings=False,
                      n_routed_experts=EXPERTS, num_experts_per_tok=USED, moe_intermediate_size=EXPERT_FFN,
                      n_shared_experts=1, first_k_dense_replace=1, routed_scaling_factor=2.5,
                      norm_topk_prob=True, n_group=1, topk_group=1, use_qk_norm=True,
                      attention_bias=True, partial_rotary_factor=0.5, rope_scaling=None)
    return Tiny("glm4moe", "glm4_moe", cfg, vocab, _template("glm45"), gguf_names=hf_names,
                extra_tensors=_glm_mtp_block, extra_blocks=1, metadata={
                    "expert_count": EXPERTS, "expert_used_count": USED,
                    "expert_feed_forward_length": EXPERT_FFN, "expert_shared_count": 1,
                    "leading_dense_block_count": 1, "expert_weights_scale": 2.5,
                    "expert_weights_norm": True, "nextn_predict_layers": 1,
                    "expert_gating_func": gguf.ExpertGatingFuncType.SIGMOID,
                    "rope_dimension_count": cfg["head_dim"] // 2})


HARMONY_CONTROL = ["<|startoftext|>", "<|endoftext|>", "<|start|>", "<|message|>", "<|end|>",
                   "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"]


def gpt_oss() -> Tiny:
    """gpt-oss's layout: biased attention with sinks, sliding-window (window 4, shorter than
    the test prompts) and full layers alternating, biased router and SwiGLU-OAI experts, YaRN
    RoPE; Harmony tool calls."""
    vocab = byte_bpe_vocab("gpt-4o", HARMONY_CONTROL, eos="<|return|>")
    cfg = base_config("gpt_oss", vocab, num_local_experts=EXPERTS, num_experts_per_tok=USED,
                      intermediate_size=EXPERT_FFN, sliding_window=4, rope_theta=150000.0,
                      rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 64,
                                    "beta_fast": 32.0, "beta_slow": 1.0})
    cfg.pop("max_position_embeddings")
    return Tiny("gpt-oss", "gpt_oss", cfg, vocab, _template("harmony"), gguf_names=hf_names, metadata={
        "expert_count": EXPERTS, "expert_used_count": USED, "expert_feed_forward_length": EXPERT_FFN,
        "sliding_window": 4, "rope_scaling_type": gguf.RopeScalingType.YARN, "rope_scaling_factor": 4.0,
        "rope_scaling_orig_ctx_len": 64, "rope_scaling_yarn_beta_fast": 32.0,
        "rope_scaling_yarn_beta_slow": 1.0})


MOE_FAMILIES = {"qwen3_moe": qwen3_moe, "glm4_moe": glm4_moe, "gpt_oss": gpt_oss}


def tiny_moe_gguf(name: str, directory: Path, **kwargs: Any) -> tuple[Tiny, Path]:
    """MoE family ``name``'s tiny reference model and the GGUF file written from it."""
    tiny = MOE_FAMILIES[name]()
    build_reference(tiny)
    return tiny, write_gguf(tiny, directory / f"{name}.gguf", **kwargs)
