"""Pad a small batch of rows before a CPU matmul so that OpenBLAS uses every core.

Multithreaded OpenBLAS splits an ``sgemm`` across threads along the batch of rows, and below
about 16 rows it runs on one thread.  A continuous batch of 4-15 rows (8 decoding streams, or
one stream fast-forwarding 4+ forced tokens) therefore ran the embedded model's linear layers
single-threaded: 30 layers x 7 projections took ~40 ms at 8 rows and ~34 ms at 16 on the
2-core reference machine (``/tmp`` probes, medians of 7), and a whole 8-row decode pass went
from ~79 to ~70 ms when padded.  Two and three rows lose from padding (more work, no extra
thread), so they are left alone.

Only for float weights on the CPU device with OpenBLAS: GPU kernels and quantized matmuls have
no such cliff, and the reference BLAS is single-threaded (padding would only add work).
``AFM_STRUCT_PAD_ROWS=0`` turns it off (to measure the difference).
"""

from __future__ import annotations

import os
from typing import Any

import mlx.core as mx
import mlx.nn as nn

PAD_TO = 16
PAD_FROM = 4


def _padded(x: mx.array, matmul: Any) -> mx.array:
    rows = 1
    for d in x.shape[:-1]:
        rows *= d
    if not PAD_FROM <= rows < PAD_TO:
        return matmul(x)
    flat = mx.pad(x.reshape(rows, x.shape[-1]), [(0, PAD_TO - rows), (0, 0)])
    out = matmul(flat)[:rows]
    return out.reshape(*x.shape[:-1], out.shape[-1])


class RowPaddedLinear(nn.Linear):
    """``nn.Linear`` whose small batches are padded to ``PAD_TO`` rows."""

    def __call__(self, x: mx.array) -> mx.array:
        """Same result as ``nn.Linear``; 4-15 rows run as 16."""
        return _padded(x, super().__call__)


class RowPaddedEmbedding(nn.Embedding):
    """``nn.Embedding`` whose tied LM head (``as_linear``) pads small batches the same way."""

    def as_linear(self, x: mx.array) -> mx.array:
        """Same result as ``nn.Embedding.as_linear``; 4-15 rows run as 16."""
        return _padded(x, super().as_linear)


def wanted(blas: str) -> bool:
    """Whether padding pays here: the CPU device with OpenBLAS, unless turned off."""
    if os.environ.get("AFM_STRUCT_PAD_ROWS", "1") == "0":
        return False
    return mx.default_device().type == mx.cpu and blas == "openblas"


def pad_small_batches(model: nn.Module) -> int:
    """Switch the model's float ``Linear`` and ``Embedding`` layers to their row-padded
    versions in place (parameters untouched); return how many layers changed."""
    changed = 0
    for _, module in model.named_modules():
        if type(module) is nn.Linear:
            module.__class__ = RowPaddedLinear
            changed += 1
        elif type(module) is nn.Embedding:
            module.__class__ = RowPaddedEmbedding
            changed += 1
    return changed
