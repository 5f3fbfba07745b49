"""Load a model and its tokenizer from a GGUF file, an mlx-lm directory / hub id, or the default."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from ..errors import ModelLoadError
from .embedded import EMBEDDED_NAME, embedded_model_path
from .tokenizer import Tokenizer
from .weights import WeightChoice

WEIGHT_MODES = ("auto", "float32", "float16", "bfloat16", "quantized")


@dataclass(frozen=True)
class ModelInfo:
    """What was loaded, for logs, ``/v1/models`` and profiles."""

    id: str
    path: str
    source: str  # "embedded", "gguf" or "mlx"
    context_length: int
    weights: str  # "float32", "float16", "bfloat16" or "quantized"
    weight_bytes: int
    device: str
    load_seconds: float
    stored: str = ""  # what the source holds (mlx directories: "bfloat16", "4-bit affine"...)
    weights_reason: str = ""  # why ``weights`` was chosen, for the load log and /v1/models
    aliases: tuple[str, ...] = ()  # other names it answers to (a hub id's short name)


@dataclass
class LoadedModel:
    """A model ready to run: ``model(tokens, cache=...)`` returns ``(B, L, vocab)`` logits."""

    model: nn.Module
    tokenizer: Tokenizer
    info: ModelInfo

    def make_cache(self) -> list[Any]:
        """A fresh KV cache for one sequence."""
        from mlx_lm.models.cache import make_prompt_cache

        return make_prompt_cache(self.model)


def device_name() -> str:
    """'gpu (metal)', 'gpu (cuda)' or 'cpu' for the default MLX device."""
    dev = mx.default_device()
    if dev.type == mx.gpu:
        return "gpu (metal)" if mx.metal.is_available() else "gpu (cuda)"
    return "cpu"


def choose_weights(mode: str) -> str:
    """The weight representation for this backend: measured fastest per backend.

    On the CPU, fp32 GEMM with an optimized BLAS beat MLX's 4-bit quantized matmul by ~2x
    (benchmarks/blas_weights.md); on GPUs the quantized kernels read less memory and win.
    """
    if mode not in WEIGHT_MODES:
        raise ModelLoadError(f"unknown weights mode {mode!r}; choose one of {', '.join(WEIGHT_MODES)}")
    if mode != "auto":
        return mode
    return "quantized" if mx.default_device().type == mx.gpu else "float32"


def _gguf_weights(mode: str, chosen: str, contents: Any) -> tuple[str, str]:
    """The representation a GGUF is loaded in, and why: ``auto`` on the CPU dequantizes to
    fp32 only when the fp32 copy fits in memory with a margin (as for mlx directories,
    models/weights.py); otherwise it keeps the packed quantized weights."""
    from .weights import FIT_SHARE, available_memory

    if mode != "auto":
        return chosen, f"--weights {mode}"
    if chosen != "float32":
        return chosen, f"{device_name()}: packed quantized kernels read less memory"
    need, available = 4 * contents.elements, available_memory()
    if contents.stored != "F32" and available is not None and need > FIT_SHARE * available:
        return "quantized", (f"cpu: fp32 would be faster but needs {need / 1e9:.1f} GB, more than "
                             f"{FIT_SHARE:.0%} of the memory available ({available / 1e9:.1f} GB); "
                             "kept as stored")
    return chosen, "cpu: fp32 with an optimized BLAS decodes fastest"


def _nbytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def _cast(model: nn.Module, weights: str) -> None:
    if weights in ("float16", "bfloat16", "float32"):
        dtype = getattr(mx, weights)
        model.set_dtype(dtype, predicate=lambda d: mx.issubdtype(d, mx.floating))


def _load_gguf(path: Path, mode: str, chosen: str,
               progress: Callable[[str], None]) -> tuple[nn.Module, Tokenizer, int, str, str, str]:
    """The model, tokenizer and context of a GGUF; the weights chosen, as stored, and why."""
    from .gguf import build_model, read_gguf
    from .gguf_tokenizer_cache import load_gguf_tokenizer

    progress(f"reading {path.name}")
    contents = read_gguf(path)
    weights, reason = _gguf_weights(mode, chosen, contents)
    progress("building tokenizer")
    tokenizer = load_gguf_tokenizer(path, lambda: contents)
    progress(f"mapping weights ({weights})")
    model, config = build_model(contents, dequantize=weights != "quantized")
    _cast(model, weights if weights != "quantized" else "")
    return model, tokenizer, int(config["max_position_embeddings"]), weights, contents.stored, reason


@dataclass(frozen=True)
class ChatTemplateOptions:
    """``--chat-template`` (the file's text) and ``--default-chat-template`` (ChatML when a model
    ships no template: opt-in, logged)."""

    template: str | None = None
    default: bool = False


def _load_mlx(path: Path, mode: str, templates: ChatTemplateOptions,
              progress: Callable[[str], None]) -> tuple[nn.Module, Tokenizer, int, WeightChoice]:
    from . import mlx_dir
    from . import weights as weights_mod

    mlx_dir.check_files(path)
    progress(f"loading {path} with mlx_lm")
    try:
        model, hf, eos, config = mlx_dir.load(path)
    except Exception as exc:  # mlx_lm raises many kinds: unreadable files, architectures
        raise ModelLoadError(f"cannot load model {str(path)!r}: {mlx_dir._one_line(exc)}") from exc
    mlx_dir.check_tokenizer(hf, path, chat_template=templates.template,
                            default_template=templates.default, say=progress)
    device = device_name()
    choice = weights_mod.choose(mode, model, device, weights_mod.available_memory())
    if choice.weights in ("float16", "bfloat16", "float32"):
        dtype = getattr(mx, choice.weights)
        replaced = weights_mod.dequantize(model, dtype)
        if replaced:
            progress(f"dequantized {replaced} layers to {choice.weights}")
        _cast(model, choice.weights)
    if device == "cpu":
        cast = weights_mod.cast_for_cpu(model)
        if cast:
            choice = WeightChoice(choice.weights, choice.stored,
                                  f"{choice.reason}; cast to fp32: {', '.join(cast)}")
    tokenizer = Tokenizer(hf, eos_ids=eos, add_bos=bool(getattr(hf, "add_bos_token", False)),
                          vocab_size=config.get("vocab_size"))
    ctx = int(config.get("max_position_embeddings") or config.get("context_length") or 4096)
    return model, tokenizer, ctx, choice


def evaluate_arrays(model: nn.Module) -> None:
    """Evaluate every array the model holds: its parameters and the private ones that
    ``parameters()`` leaves out (RoPE frequency tables such as ``_freqs``).

    The server runs the model on its scheduler thread; MLX streams are per thread, so an array
    still lazy from the loading thread fails there ("There is no Stream(cpu, 0) in current
    thread") on the first request.
    """
    private = [v for m in model.modules() for v in m.values() if isinstance(v, mx.array)]
    mx.eval(model.parameters(), private)


def load_model(spec: str | None = None, *, weights: str = "auto",
               progress: Callable[[str], None] | None = None,
               templates: ChatTemplateOptions | None = None) -> LoadedModel:
    """Load ``spec`` (GGUF path, mlx-lm directory or hub id), or the embedded model when None;
    ``templates`` applies to mlx-lm directories (a GGUF carries its template)."""
    progress = progress or (lambda _msg: None)
    chosen = choose_weights(weights)
    start = time.perf_counter()
    stored, reason, aliases = "", "", ()
    if spec is None:
        path = embedded_model_path()
        model, tokenizer, ctx, chosen, stored, reason = _load_gguf(path, weights, chosen, progress)
        ident, source = EMBEDDED_NAME, "embedded"
    elif spec.endswith(".gguf") or Path(spec).is_file():
        path = Path(spec)
        model, tokenizer, ctx, chosen, stored, reason = _load_gguf(path, weights, chosen, progress)
        ident, source = path.stem, "gguf"
    else:
        from .mlx_dir import locate, names

        path = locate(spec)
        model, tokenizer, ctx, choice = _load_mlx(path, weights, templates or ChatTemplateOptions(), progress)
        chosen, stored, reason = choice.weights, choice.stored, choice.reason
        (ident, aliases), source = names(spec, path), "mlx"
    model.eval()
    from .blas import blas_in_use, warn_if_reference_blas

    if device_name() == "cpu":
        warn_if_reference_blas()
    from .row_padding import pad_small_batches, wanted

    if wanted(blas_in_use()):
        pad_small_batches(model)  # float layers only; quantized ones keep their own kernels
    from . import cpu_exp

    if cpu_exp.wanted():
        cpu_exp.use_fast_swiglu(model)
    evaluate_arrays(model)
    info = ModelInfo(id=ident, path=str(path), source=source, context_length=ctx, weights=chosen,
                     weight_bytes=_nbytes(model), device=device_name(),
                     load_seconds=time.perf_counter() - start, stored=stored, weights_reason=reason,
                     aliases=aliases)
    return LoadedModel(model=model, tokenizer=tokenizer, info=info)


def load_tokenizer(spec: str | None = None) -> Tokenizer:
    """Only the tokenizer of ``spec`` (or of the embedded model): fast, no weights mapped."""
    if spec is None or spec.endswith(".gguf"):
        from .gguf import read_gguf
        from .gguf_tokenizer_cache import load_gguf_tokenizer

        # The disk cache holds the tokenizer of a GGUF read before: no header parsed then.
        path = embedded_model_path() if spec is None else Path(spec)
        return load_gguf_tokenizer(path, lambda: read_gguf(path))
    from mlx_lm.tokenizer_utils import load as load_tok  # type: ignore[attr-defined]

    try:
        wrapper = load_tok(Path(spec))
    except Exception as exc:
        raise ModelLoadError(f"cannot load the tokenizer of {spec!r}: {exc}") from exc
    return Tokenizer(wrapper._tokenizer, eos_ids=list(wrapper.eos_token_ids or []))
