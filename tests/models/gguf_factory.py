"""Tiny random-weight models of each family, written to GGUF the way llama.cpp's converter does.

The reference is mlx-lm's own class with Hugging Face-layout weights; the file is written with
the ``gguf`` package: tensor names from its name map (llama.cpp's), metadata from its writer
helpers, and llama.cpp's two weight changes (Q/K permuted for llama, Gemma norms stored as
``1 + w``).  Our loader then has to undo exactly what the converter did.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

gguf = __import__("pytest").importorskip("gguf")

DATA = Path(__file__).parent / "data"
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 2, 4, 2, 16, 96


def _byte_chars() -> list[str]:
    """GPT-2's byte → printable character table (what byte-level BPE vocabularies hold)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


BPE_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"),
              ("Ġ", "c"), ("i", "t"), ("Ġc", "it"), ("Ġcit", "y"), ("Ġ", "P"), ("a", "r")]
SPM_PIECES = ["▁t", "he", "▁the", "in", "▁a", "er", "on", "▁c", "it", "▁cit", "▁city", "▁P", "ar"]


@dataclass
class Vocab:
    """A tiny vocabulary in GGUF's terms."""

    model: str  # "gpt2" or "llama"
    tokens: list[str]
    types: list[int]
    merges: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    pre: str = "default"
    bos: int | None = None
    eos: int | None = None
    add_bos: bool = False
    add_space_prefix: bool = True

    def id(self, token: str) -> int:
        """The id of ``token``."""
        return self.tokens.index(token)


def byte_bpe_vocab(pre: str, control: list[str], user: list[str] = (), *, bos: str | None = None,
                   eos: str) -> Vocab:
    """Byte-level BPE: the 256 byte characters, a few merges, then the added tokens."""
    tokens = _byte_chars()
    tokens += ["".join(m) for m in BPE_MERGES]
    types = [1] * len(tokens)
    tokens += list(control) + list(user)
    types += [3] * len(control) + [4] * len(user)
    return Vocab("gpt2", tokens, types, merges=[" ".join(m) for m in BPE_MERGES], pre=pre,
                 bos=tokens.index(bos) if bos else None, eos=tokens.index(eos), add_bos=bos is not None)


def spm_vocab(control: list[str], *, add_space_prefix: bool = True, bos: str = "<s>",
              eos: str = "</s>", extra_specials: tuple[str, ...] = ()) -> Vocab:
    """SentencePiece: <unk>/BOS/EOS, 256 byte pieces, characters and a few merged pieces."""
    tokens = ["<unk>", bos, eos, *extra_specials]
    types = [2, 3, 3] + [3] * len(extra_specials)
    scores = [0.0] * len(tokens)
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    scores += [0.0] * 256
    chars = ["▁", *"etaoinshrdlcumwfgypbvkjxqzPTACSW,.:{}\"'"]
    for i, piece in enumerate(chars + SPM_PIECES):
        tokens.append(piece)
        types.append(1)
        scores.append(-float(i) if piece in chars else -1.0 - float(len(piece)) / 10)
    tokens += list(control)
    types += [3] * len(control)
    scores += [0.0] * len(control)
    return Vocab("llama", tokens, types, scores=scores, bos=1, eos=2, add_bos=True,
                 add_space_prefix=add_space_prefix)


@dataclass
class Tiny:
    """One family's tiny model: mlx-lm reference, its config and the GGUF it was written to."""

    arch: str
    module: str
    config: dict[str, Any]
    vocab: Vocab
    template: str
    reference: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)  # extra writer calls: add_<key>(value)
    extra_tensors: Any = None  # (reference model) -> {GGUF name: array}, e.g. rope_freqs
    post_build: Any = None  # (reference model) -> None, after the random weights are set
    gguf_names: Any = None  # (mlx-lm parameter name) -> (HF module path, suffix), for MoE layouts
    extra_blocks: int = 0  # blocks written after the model's layers (GLM's next-token prediction)


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K permutation (HF's rotate-half layout → interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def build_reference(tiny: Tiny, seed: int = 0) -> Any:
    """mlx-lm's model for ``tiny.config`` with random weights (fp32)."""
    module = importlib.import_module(f"mlx_lm.models.{tiny.module}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(tiny.config))
    params = {k: mx.random.normal(v.shape) * 0.2 for k, v in tree_flatten(model.parameters())}
    for k in params:
        if "norm" in k:  # norms near their neutral value, random enough to matter
            base = 0.0 if tiny.arch.startswith("gemma") else 1.0
            params[k] = base + mx.random.normal(params[k].shape) * 0.1
    model.update(tree_unflatten(list(params.items())))
    if tiny.post_build is not None:
        tiny.post_build(model)
    mx.eval(model.parameters())
    tiny.reference = model
    return model


def write_gguf(tiny: Tiny, path: Path, *, dtype: str = "F32", metadata: dict[str, Any] | None = None,
               drop: tuple[str, ...] = (), dtype_of: Any = None) -> Path:
    """Write ``tiny.reference`` as llama.cpp would convert it (names, metadata, permutations);
    ``dtype_of(gguf_name)`` picks a tensor's type when given (else ``dtype``)."""
    cfg, model, vocab = tiny.config, tiny.reference, tiny.vocab
    arch = gguf.MODEL_ARCH_NAMES
    arch_enum = next(k for k, v in arch.items() if v == tiny.arch)
    blocks = cfg["num_hidden_layers"] + tiny.extra_blocks
    names = gguf.get_tensor_name_map(arch_enum, blocks)
    w = gguf.GGUFWriter(str(path), tiny.arch)
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    for name, value in tree_flatten(model.parameters()):
        stem, suffix = tiny.gguf_names(name) if tiny.gguf_names else name.rsplit(".", 1)
        gname = names.get_name(stem)
        assert gname is not None, name
        gname = f"{gname}.{suffix}"
        if gname in drop:
            continue
        data = np.array(value.astype(mx.float32))
        if tiny.arch == "llama" and gname.endswith(("attn_q.weight", "attn_k.weight")):
            data = _permute(data, heads if ".attn_q." in gname else kv)
        if tiny.arch.startswith("gemma") and gname.endswith("norm.weight"):
            data = data + 1.0
        kind = dtype_of(gname) if dtype_of else dtype
        # The converter keeps 1-D tensors, biases (MoE experts' are 2-D) and routers in F32.
        if kind == "F32" or data.ndim == 1 or not gname.endswith(".weight") or ".ffn_gate_inp." in gname:
            w.add_tensor(gname, data)
        elif kind == "F16":
            w.add_tensor(gname, data.astype(np.float16))
        else:
            qtype = getattr(gguf.GGMLQuantizationType, kind)
            w.add_tensor(gname, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    w.add_block_count(blocks)
    w.add_context_length(cfg.get("max_position_embeddings", 4096))
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(cfg.get("rope_theta", 10000.0))
    if "head_dim" in cfg:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    for gname, data in (tiny.extra_tensors(model) if tiny.extra_tensors else {}).items():
        w.add_tensor(gname, data)
    for key, value in {**tiny.metadata, **(metadata or {})}.items():
        getattr(w, f"add_{key}")(value)
    w.add_tokenizer_model(vocab.model)
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.merges:
        w.add_token_merges(vocab.merges)
    if vocab.scores:
        w.add_token_scores(vocab.scores)
        w.add_add_space_prefix(vocab.add_space_prefix)
        w.add_unk_token_id(0)
    if vocab.bos is not None:
        w.add_bos_token_id(vocab.bos)
    w.add_eos_token_id(vocab.eos)
    w.add_add_bos_token(vocab.add_bos)
    w.add_chat_template(tiny.template)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def template(name: str) -> str:
    """A chat template from tests/models/data (written from the published template's structure)."""
    return (DATA / f"{name}.jinja").read_text(encoding="utf-8")


def base_config(model_type: str, vocab: Vocab, **extra: Any) -> dict[str, Any]:
    """The shared tiny hyper-parameters in mlx-lm's ModelArgs terms."""
    return {"model_type": model_type, "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
            "intermediate_size": FFN, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "rms_norm_eps": 1e-6, "vocab_size": len(vocab.tokens), "head_dim": HEAD_DIM,
            "max_position_embeddings": 4096, "rope_theta": 10000.0, **extra}


CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen2() -> Tiny:
    """Qwen2.5: biased Q/K/V, tied embeddings, qwen2 pre-tokenizer, Hermes tool calls."""
    vocab = byte_bpe_vocab("qwen2", CHATML, ["<tool_call>", "</tool_call>"], eos="<|im_end|>")
    cfg = base_config("qwen2", vocab, tie_word_embeddings=True)
    return Tiny("qwen2", "qwen2", cfg, vocab, template("qwen2.5"))


def qwen3() -> Tiny:
    """Qwen3: QK-norm, untied LM head, <think> reasoning, Hermes tool calls."""
    vocab = byte_bpe_vocab("qwen2", CHATML, ["<tool_call>", "</tool_call>", "<think>", "</think>"],
                           eos="<|im_end|>")
    cfg = base_config("qwen3", vocab, tie_word_embeddings=False)
    return Tiny("qwen3", "qwen3", cfg, vocab, template("qwen3"))


def _llama3_rope_freqs(model: Any) -> dict[str, np.ndarray]:
    """llama.cpp's ``rope_freqs``: Llama 3.1 scaled frequencies over the unscaled ones."""
    rope = model.layers[0].self_attn.rope
    dims = rope.dims
    plain = 10000.0 ** (np.arange(0, dims, 2, dtype=np.float32) / dims)
    return {"rope_freqs.weight": (np.array(rope._freqs) / plain).astype(np.float32)}


def llama() -> Tiny:
    """Llama 3.2: llama-bpe, BOS, scaled RoPE as rope_freqs, JSON tool calls (llama3_json)."""
    vocab = byte_bpe_vocab("llama-bpe", ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                         "<|end_header_id|>", "<|eot_id|>", "<|python_tag|>"],
                           bos="<|begin_of_text|>", eos="<|eot_id|>")
    cfg = base_config("llama", vocab, tie_word_embeddings=True, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64})
    return Tiny("llama", "llama", cfg, vocab, template("llama3.2"), extra_tensors=_llama3_rope_freqs)


MISTRAL_CONTROL = ["[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                   "[TOOL_RESULTS]", "[/TOOL_RESULTS]"]


def mistral() -> Tiny:
    """Mistral 7B v0.3: SentencePiece with control tokens, untied, [TOOL_CALLS] [...] calls."""
    vocab = spm_vocab(MISTRAL_CONTROL)
    cfg = base_config("llama", vocab, tie_word_embeddings=False)
    return Tiny("llama", "llama", cfg, vocab, template("mistral-v0.3"),
                metadata={"sliding_window": 4096})


def mistral_args() -> Tiny:
    """Mistral Small 3.2 (tekken BPE): head_dim apart from hidden/heads, [TOOL_CALLS]name[ARGS]{...}."""
    vocab = byte_bpe_vocab("tekken", ["<unk>", "<s>", "</s>", *MISTRAL_CONTROL, "[SYSTEM_PROMPT]",
                                      "[/SYSTEM_PROMPT]", "[ARGS]", "[CALL_ID]"], bos="<s>", eos="</s>")
    cfg = base_config("llama", vocab, tie_word_embeddings=False, head_dim=24)
    return Tiny("llama", "llama", cfg, vocab, template("mistral-small-3.2"))


def phi3() -> Tiny:
    """Phi-3 / 3.5-mini: fused QKV and gate/up, partial RoPE, SentencePiece, no tool template."""
    vocab = spm_vocab(["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"])
    cfg = base_config("phi3", vocab, tie_word_embeddings=False, partial_rotary_factor=0.5)
    return Tiny("phi3", "phi3", cfg, vocab, template("phi3"),
                metadata={"rope_dimension_count": HEAD_DIM // 2})


GEMMA_TURNS = ["<start_of_turn>", "<end_of_turn>"]


def gemma2() -> Tiny:
    """Gemma 2: norms stored as 1 + w, scaled embeddings, soft-capping, no space prefix."""
    vocab = spm_vocab(GEMMA_TURNS, add_space_prefix=False, bos="<bos>", eos="<eos>")
    cfg = base_config("gemma2", vocab, query_pre_attn_scalar=float(HEAD_DIM),
                      attn_logit_softcapping=50.0, final_logit_softcapping=30.0)
    return Tiny("gemma2", "gemma2", cfg, vocab, template("gemma3"), metadata={
        "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "sliding_window": 4096})


def gemma3() -> Tiny:
    """Gemma 3: QK-norm, local (window 4) and global layers with their own RoPE bases, tied."""
    vocab = spm_vocab(GEMMA_TURNS, add_space_prefix=False, bos="<bos>", eos="<eos>")
    cfg = base_config("gemma3_text", vocab, query_pre_attn_scalar=float(HEAD_DIM), sliding_window=4,
                      sliding_window_pattern=2, rope_theta=1_000_000.0, rope_local_base_freq=10000.0)
    return Tiny("gemma3", "gemma3_text", cfg, vocab, template("gemma3"),
                metadata={"sliding_window": 4, "sliding_window_pattern": [True, False]},
                post_build=lambda model: model.sanitize({}))  # no lm_head: tied, as Gemma ships


FAMILIES = {"qwen2": qwen2, "qwen3": qwen3, "llama": llama, "mistral": mistral,
            "mistral_args": mistral_args, "phi3": phi3, "gemma2": gemma2, "gemma3": gemma3}


def tiny_gguf(name: str, directory: Path, **kwargs: Any) -> tuple[Tiny, Path]:
    """Family ``name``'s tiny reference model and the GGUF file written from it."""
    tiny = FAMILIES[name]()
    build_reference(tiny)
    return tiny, write_gguf(tiny, directory / f"{name}.gguf", **kwargs)
