"""GGUF files mapped onto mlx-lm's own model classes (the per-family tables are in gguf_arch).

``mx.load`` already decodes GGUF's Q4_0/Q4_1/Q8_0 blocks into MLX's affine quantized layout
(uint32-packed weights plus per-group scales and biases), so the work here is naming, choosing
a weight representation and reading the hyper-parameters from the metadata.  A file holding
MXFP4 (gpt-oss's experts), which ``mx.load`` cannot read, is read by :mod:`gguf_tensors`.  Other
ggml types (K-quants, Q5) are refused up front with what to convert to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..errors import ModelLoadError
from .gguf_arch import AUX_TENSORS, FAMILIES, ArchMeta, Family
from .gguf_header import BF16, MLX_TYPES, MXFP4, GGUFHeader, read_header
from .gguf_tensors import MXFP4_BITS, MXFP4_GROUP, MXFP4_MODE, dequantize_mxfp4, read_all

SUPPORTED_ARCHITECTURES = tuple(FAMILIES)
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases|bias)$")
_TOP_RE = re.compile(r"^([a-z_]+)\.(weight|scales|biases|bias)$")


@dataclass(frozen=True)
class GGUFContents:
    """Raw tensors and metadata of one GGUF file."""

    path: Path
    tensors: dict[str, mx.array]
    metadata: dict[str, Any]
    mxfp4: frozenset[str] = frozenset()  # names of the MXFP4 weights (their scales: .scales)
    stored: str = ""  # the ggml type most of the weights are stored in ("Q8_0", "F16", ...)
    elements: int = 0  # the weights' element count (4 bytes each once dequantized to fp32)

    @property
    def family(self) -> Family:
        """The mapping table of this file's architecture."""
        return FAMILIES[str(self.meta("general.architecture"))]

    def meta(self, key: str, default: Any = None) -> Any:
        """A scalar metadata value as a Python object (arrays of size one are unwrapped)."""
        value = self.metadata.get(key, default)
        if isinstance(value, mx.array) and value.ndim == 0:
            return value.item()
        return value


def _check_types(header: GGUFHeader, path: Path) -> None:
    """One line naming a tensor MLX cannot load and what to convert the file to."""
    bad = [t for t in header.tensors if t.ggml_type not in MLX_TYPES and t.ggml_type != MXFP4]
    if bad:
        kinds = ", ".join(sorted({t.type_name for t in bad}))
        raise ModelLoadError(
            f"{path.name} holds {kinds} tensors (e.g. {bad[0].name}), which MLX cannot load: "
            "requantize it to Q8_0 or Q4_0 (llama-quantize --allow-requantize IN.gguf OUT.gguf Q8_0), "
            "or use an F16/BF16 GGUF or an mlx-lm model directory")


def _exact_bf16(path: Path, header: GGUFHeader, tensors: dict[str, mx.array]) -> None:
    """Re-read BF16 tensors from the file: ``mx.load`` narrows them to float16 (range lost)."""
    for info in header.tensors:
        if info.ggml_type == BF16:
            raw = np.fromfile(path, dtype=np.uint16, count=int(np.prod(info.shape)), offset=info.offset)
            tensors[info.name] = mx.array(raw.reshape(info.shape)).view(mx.bfloat16)


def read_gguf(path: str | Path) -> GGUFContents:
    """Read a GGUF file, turning any failure into a :class:`ModelLoadError` naming the cause."""
    path = Path(path)
    if not path.is_file():
        raise ModelLoadError(f"GGUF file not found: {path}")
    header = read_header(path)
    arch = header.architecture
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ModelLoadError(
            f"unsupported GGUF architecture {arch!r} in {path}; supported: "
            f"{', '.join(SUPPORTED_ARCHITECTURES)} (use an mlx-lm model directory for others)"
        )
    _check_types(header, path)
    try:
        tensors, metadata = mx.load(str(path), return_metadata=True)
    except Exception as exc:  # mlx raises plain RuntimeError/ValueError on corrupt files
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc} (is the file complete?)") from exc
    mxfp4: set[str] = set()
    if any(t.ggml_type == MXFP4 for t in header.tensors):
        # mx.load stops at the first MXFP4 tensor (without a word): read them all with numpy.
        del tensors
        tensors, mxfp4 = read_all(path, header.tensors)
    else:
        _exact_bf16(path, header, tensors)
    _split_fused_experts(tensors, mxfp4)
    by_type: dict[str, int] = {}
    for t in header.tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + int(np.prod(t.shape, dtype=np.int64))
    stored = max(by_type, key=by_type.__getitem__) if by_type else ""
    return GGUFContents(path=path, tensors=tensors, metadata=metadata, mxfp4=frozenset(mxfp4),
                        stored=stored, elements=sum(by_type.values()))


_FUSED = ".ffn_gate_up_exps."


def _split_fused_experts(tensors: dict[str, mx.array], mxfp4: set[str]) -> None:
    """llama.cpp's converter can write a layer's gate and up experts as one tensor
    (``ffn_gate_up_exps``: the gate rows, then the up rows); split it into the two mlx-lm holds.
    Packed codes, scales and biases split on the same rows; a bias ``(experts, 2 * ff)`` on its
    last axis."""
    for name in [n for n in tensors if _FUSED in n]:
        value = tensors.pop(name)
        axis = -1 if name.endswith(".bias") else -2
        if value.shape[axis] % 2:
            raise ModelLoadError(f"GGUF tensor {name} has an odd number of rows {value.shape}")
        gate, up = mx.split(value, 2, axis=axis)
        for part, half in (("ffn_gate_exps", gate), ("ffn_up_exps", up)):
            split = name.replace(_FUSED, f".{part}.")
            tensors[split] = half
            if name in mxfp4:
                mxfp4.add(split)
        mxfp4.discard(name)


def arch_meta(contents: GGUFContents) -> ArchMeta:
    """The file's metadata under its architecture's prefix."""
    return ArchMeta(str(contents.meta("general.architecture")), contents.meta, contents.tensors,
                    contents.path)


def model_config(contents: GGUFContents) -> dict[str, Any]:
    """mlx-lm ``ModelArgs`` fields of the file's family, from GGUF metadata."""
    return contents.family.config(arch_meta(contents))


def rename_tensor(name: str, family: Family = FAMILIES["llama"]) -> str:
    """GGUF tensor name → mlx-lm parameter name in ``family``'s model."""
    if m := _BLOCK_RE.match(name):
        layer, part, kind = m.groups()
        if (path := family.blocks.get(f"{part}.{kind}")) is not None:
            return f"model.layers.{layer}.{path}"
        if part not in family.blocks:
            raise ModelLoadError(f"unexpected GGUF tensor {name} for a {family.architecture} model")
        return f"model.layers.{layer}.{family.blocks[part]}.{kind}"
    if m := _TOP_RE.match(name):
        part, kind = m.groups()
        if part in family.top:
            return f"{family.top[part]}.{kind}"
    raise ModelLoadError(f"unexpected GGUF tensor {name} for a {family.architecture} model")


@dataclass(frozen=True)
class QuantSpec:
    """How one quantized matrix is packed."""

    bits: int
    group_size: int
    mode: str = "affine"

    def params(self) -> dict[str, Any]:
        """``to_quantized`` arguments (and the config entry): the mode only when not affine."""
        params: dict[str, Any] = {"group_size": self.group_size, "bits": self.bits}
        return params if self.mode == "affine" else {**params, "mode": self.mode}


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
    family, meta = contents.family, arch_meta(contents)
    renamed = {rename_tensor(k, family): v for k, v in contents.tensors.items()
               if k not in AUX_TENSORS and not (family.ignores and family.ignores(k, meta))}
    if family.norm_shift:
        for name, value in renamed.items():
            if name.endswith("norm.weight"):
                renamed[name] = value.astype(mx.float32) + family.norm_shift
    mxfp4 = {rename_tensor(k, family) for k in contents.mxfp4}
    specs: dict[str, QuantSpec] = {}
    out: dict[str, mx.array] = {}
    for name, value in renamed.items():
        if name.endswith((".scales", ".biases")):
            continue
        if name in mxfp4:
            prefix = name.rsplit(".", 1)[0]
            scales = renamed[f"{prefix}.scales"]
            if dequantize:
                out[name] = dequantize_mxfp4(value, scales, dtype)
            else:
                out[name], out[f"{prefix}.scales"] = value, scales
                specs[prefix] = QuantSpec(MXFP4_BITS, MXFP4_GROUP, MXFP4_MODE)
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


def _missing(model: nn.Module, weights: dict[str, mx.array], family: Family) -> None:
    """A :class:`ModelLoadError` naming the GGUF tensors the model needs and the file lacks."""
    from mlx.utils import tree_flatten

    wanted = {k for k, _ in tree_flatten(model.parameters())}
    missing = sorted(wanted - set(weights))
    extra = sorted(set(weights) - wanted)
    if not missing and not extra:
        return
    inverse = {v: k for k, v in {**family.blocks, **family.top}.items()}

    def gguf_name(param: str) -> str:
        parts = param.split(".")
        if parts[:2] == ["model", "layers"] and ".".join(parts[3:]) in inverse:
            return f"blk.{parts[2]}.{inverse['.'.join(parts[3:])]}"  # a whole-path key: exp_probs_b.bias
        if parts[:2] == ["model", "layers"]:
            inner = ".".join(parts[3:-1])
            return f"blk.{parts[2]}.{inverse.get(inner, inner)}.{parts[-1]}"
        return f"{inverse.get('.'.join(parts[:-1]), param)}.{parts[-1]}"

    if missing:
        names = ", ".join(gguf_name(p) for p in missing[:3])
        raise ModelLoadError(f"GGUF file lacks tensor {names} ({len(missing)} missing) for a "
                             f"{family.architecture} model")
    raise ModelLoadError(f"GGUF tensor {gguf_name(extra[0])} does not fit mlx-lm's "
                         f"{family.module} model (check the file's metadata)")


def build_model(contents: GGUFContents, *, dequantize: bool) -> tuple[nn.Module, dict[str, Any]]:
    """Instantiate the family's mlx-lm model with the file's weights loaded (and evaluated)."""
    import importlib

    family = contents.family
    module = importlib.import_module(f"mlx_lm.models.{family.module}")
    meta = arch_meta(contents)
    config = family.config(meta)
    try:
        model = module.Model(module.ModelArgs.from_dict(config))
    except (ValueError, TypeError, AssertionError) as exc:
        raise ModelLoadError(f"GGUF metadata of {contents.path} does not fit mlx-lm's {family.module} "
                             f"model: {exc}") from exc
    weights, specs = mlx_weights(contents, dequantize=dequantize)
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)  # e.g. gemma3 drops its LM head when it is tied
    if specs:
        def predicate(path: str, module: nn.Module) -> bool | dict[str, int]:
            spec = specs.get(path)
            return spec.params() if spec else False

        nn.quantize(model, class_predicate=predicate)
        config["quantization"] = {p: s.params() for p, s in specs.items()}
    _missing(model, weights, family)
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise ModelLoadError(f"GGUF weights of {contents.path} do not fit mlx-lm's {family.module} "
                             f"model: {exc}") from exc
    if family.finish is not None:
        family.finish(model, meta, config)
    mx.eval(model.parameters())
    return model, config
