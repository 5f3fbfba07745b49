"""GGUF tensors read with numpy, for files ``mx.load`` cannot read whole: those holding MXFP4.

llama.cpp converts gpt-oss's expert weights to MXFP4, and ``mx.load`` stops at the first tensor
of a type it does not know, silently returning only those before it.  So a file with MXFP4 is
read here, every tensor in the layout ``mx.load`` gives (floats as they are; Q8_0, Q4_0 and Q4_1
as MLX's affine quantization: uint32-packed codes plus float16 scales and biases per 32 weights).

A GGUF MXFP4 block is 17 bytes for 32 weights: one E8M0 scale byte, then 16 bytes whose low
nibbles are weights 0-15 and high nibbles weights 16-31, each an FP4 (E2M1) code.  MLX's
``"mxfp4"`` mode has the same codes and scale byte (value = e2m1 * 2^(scale - 127); llama.cpp
writes it as a doubled table times 2^(scale - 128)) but packs the codes in order, low nibble
first.  Only the nibble order changes, so the weights can stay packed or be dequantized.
Q4_0 and Q4_1 order their nibbles the same way.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np

from ..errors import ModelLoadError
from .gguf_header import TensorInfo

BLOCK = 32
MXFP4_GROUP, MXFP4_BITS, MXFP4_MODE = 32, 4, "mxfp4"
F32, F16, Q4_0, Q4_1, Q8_0, BF16, MXFP4 = 0, 1, 2, 3, 8, 30, 39
_BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q8_0: 34, MXFP4: 17}
READABLE = frozenset({F32, F16, BF16, *_BLOCK_BYTES})


def _blocks(path: Path, info: TensorInfo) -> tuple[np.ndarray, list[int], int]:
    """The tensor's raw blocks as ``(rows, blocks, bytes)``, its leading shape and row length."""
    *lead, n_in = info.shape
    if n_in % BLOCK:
        raise ModelLoadError(f"{path.name}: tensor {info.name} has rows of {n_in} weights, "
                             f"not a multiple of {BLOCK}")
    rows, size = int(np.prod(lead, dtype=np.int64)), _BLOCK_BYTES[info.ggml_type]
    raw = np.fromfile(path, dtype=np.uint8, count=rows * (n_in // BLOCK) * size, offset=info.offset)
    return raw.reshape(rows, n_in // BLOCK, size), lead, n_in


def _pack(codes: np.ndarray, bits: int, lead: list[int], n_in: int) -> mx.array:
    """Codes ``(rows, blocks, 32)`` in weight order → MLX's uint32 words, low bits first."""
    if bits == 4:
        codes = codes[..., 0::2] | (codes[..., 1::2] << 4)
    packed = np.ascontiguousarray(codes.astype(np.uint8)).reshape(len(codes), -1).view("<u4")
    return mx.array(packed.reshape(*lead, n_in * bits // 32))


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """16 bytes per block → 32 codes in weight order (low nibbles, then high ones)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def _f16(raw: np.ndarray, at: int, lead: list[int]) -> np.ndarray:
    """The float16 stored at byte ``at`` of every block, shaped ``(*lead, blocks)``."""
    value = np.ascontiguousarray(raw[..., at:at + 2]).view("<f2")[..., 0]
    return value.reshape(*lead, raw.shape[1])


def read_tensor(path: Path, info: TensorInfo) -> dict[str, mx.array]:
    """``{name: array}`` for one tensor, plus ``name.scales`` / ``name.biases`` when quantized
    (MXFP4: scales only, uint8 E8M0)."""
    kind, name = info.ggml_type, info.name
    if kind in (F32, F16, BF16):
        dtype = {F32: np.float32, F16: np.float16, BF16: np.uint16}[kind]
        data = np.fromfile(path, dtype=dtype, count=int(np.prod(info.shape)), offset=info.offset)
        array = mx.array(data.reshape(info.shape))
        return {name: array.view(mx.bfloat16) if kind == BF16 else array}
    if kind not in _BLOCK_BYTES:
        raise ModelLoadError(f"{path.name}: tensor {info.name} has a type this reader does not know")
    raw, lead, n_in = _blocks(path, info)
    stem = name.removesuffix(".weight")
    if kind == MXFP4:
        scales = np.ascontiguousarray(raw[..., 0]).reshape(*lead, raw.shape[1])
        return {name: _pack(_nibbles(raw[..., 1:]), 4, lead, n_in), f"{stem}.scales": mx.array(scales)}
    if kind == Q8_0:  # d * q, q int8 → unsigned codes q + 128 with bias -128 d
        d = _f16(raw, 0, lead)
        codes = (raw[..., 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
        return {name: _pack(codes, 8, lead, n_in), f"{stem}.scales": mx.array(d),
                f"{stem}.biases": mx.array(d * np.float16(-128))}
    d = _f16(raw, 0, lead)
    if kind == Q4_0:  # d * (nibble - 8)
        return {name: _pack(_nibbles(raw[..., 2:]), 4, lead, n_in), f"{stem}.scales": mx.array(d),
                f"{stem}.biases": mx.array(d * np.float16(-8))}
    # Q4_1: d * nibble + m
    return {name: _pack(_nibbles(raw[..., 4:]), 4, lead, n_in), f"{stem}.scales": mx.array(d),
            f"{stem}.biases": mx.array(_f16(raw, 2, lead))}


def read_all(path: Path, tensors: tuple[TensorInfo, ...]) -> tuple[dict[str, mx.array], set[str]]:
    """Every tensor of the file, and the names of the MXFP4 weights among them."""
    out: dict[str, mx.array] = {}
    for info in tensors:
        out.update(read_tensor(path, info))
    return out, {t.name for t in tensors if t.ggml_type == MXFP4}


def dequantize_mxfp4(weight: mx.array, scales: mx.array, dtype: mx.Dtype) -> mx.array:
    """The float weights of an MXFP4 tensor read by :func:`read_tensor`."""
    return mx.dequantize(weight, scales, None, MXFP4_GROUP, MXFP4_BITS, mode=MXFP4_MODE).astype(dtype)
