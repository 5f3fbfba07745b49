"""Row padding for CPU matmuls: same numbers, only the batch shape handed to BLAS changes."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from afm_struct.models import row_padding
from afm_struct.models.row_padding import RowPaddedEmbedding, RowPaddedLinear, pad_small_batches


@pytest.mark.parametrize("shape", [(1, 8), (2, 8), (4, 8), (3, 5, 8), (8, 1, 8), (15, 8), (16, 8), (40, 8)])
def test_padded_linear_and_head_equal_the_plain_layers(shape):
    mx.random.seed(0)
    plain = nn.Linear(8, 12)
    padded = nn.Linear(8, 12)
    padded.update(plain.parameters())
    padded.__class__ = RowPaddedLinear
    x = mx.random.normal(shape)
    assert padded(x).shape == plain(x).shape
    assert np.allclose(np.array(padded(x)), np.array(plain(x)), atol=1e-5)
    emb = nn.Embedding(30, 8)
    pemb = nn.Embedding(30, 8)
    pemb.update(emb.parameters())
    pemb.__class__ = RowPaddedEmbedding
    assert np.allclose(np.array(pemb.as_linear(x)), np.array(emb.as_linear(x)), atol=1e-5)
    assert mx.array_equal(pemb(mx.array([1, 2])), emb(mx.array([1, 2])))


def test_pad_small_batches_switches_float_layers_only():
    model = nn.Sequential(nn.Embedding(30, 8), nn.Linear(8, 8), nn.QuantizedLinear(64, 64))
    assert pad_small_batches(model) == 2
    kinds = [type(m).__name__ for m in model.layers]
    assert kinds == ["RowPaddedEmbedding", "RowPaddedLinear", "QuantizedLinear"]


def test_wanted_only_for_openblas_and_can_be_turned_off(monkeypatch):
    monkeypatch.delenv("AFM_STRUCT_PAD_ROWS", raising=False)
    assert not row_padding.wanted("reference")
    assert row_padding.wanted("openblas") == (mx.default_device().type == mx.cpu)
    monkeypatch.setenv("AFM_STRUCT_PAD_ROWS", "0")
    assert not row_padding.wanted("openblas")


def test_embedded_model_is_padded_under_openblas(embedded):
    from afm_struct.models.blas import blas_in_use

    padded = type(embedded.model.model.layers[0].mlp.gate_proj) is RowPaddedLinear
    assert padded == row_padding.wanted(blas_in_use())
