"""The CPU exponential and SwiGLU agree with float32 math; the MLP swap keeps the logits."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models.activations import swiglu as mlx_lm_swiglu

from afm_struct.models import cpu_exp


def test_exp_matches_float32_exp_to_its_precision() -> None:
    x = mx.concatenate([mx.linspace(-87.0, 88.0, 350_001), mx.array([-1e-9, 0.0, 1e-9])])
    got, want = np.array(cpu_exp.exp(x)), np.exp(np.array(x).astype(np.float64))
    assert np.max(np.abs(got - want) / want) < 4e-7
    # Outside [-87, 88] it saturates instead of reaching 0 or overflowing.
    ends = np.array(cpu_exp.exp(mx.array([-1e4, 1e4])))
    np.testing.assert_allclose(ends, [np.exp(-87.0), np.exp(88.0)], rtol=1e-5)


@pytest.mark.parametrize("rows", [1, 3, 8, 40])
def test_swiglu_matches_mlx_lm(rows: int) -> None:
    mx.random.seed(rows)
    gate = mx.concatenate([mx.random.normal((rows, 1, 1536)) * 6,
                           mx.array([-200.0, -90.0, 0.0, 90.0] * 384).reshape(1, 1, 1536)])
    x = mx.random.normal(gate.shape)
    np.testing.assert_allclose(np.array(cpu_exp.swiglu(gate, x)), np.array(mlx_lm_swiglu(gate, x)),
                               rtol=1e-5, atol=1e-6)


def test_small_calls_keep_mlx_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(cpu_exp, "exp_parts", lambda x: calls.append(x.size) or (x, x))
    gate = mx.ones((1, 1, 1536))
    cpu_exp.swiglu(gate, gate)
    assert calls == []  # one decode row: under MIN_ELEMENTS
    cpu_exp.swiglu(mx.ones((4, 1, 1536)), mx.ones((4, 1, 1536)))
    assert calls == [4 * 1536]


def test_wanted_on_the_cpu_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpu_exp.wanted() == (mx.default_device().type == mx.cpu)
    monkeypatch.setenv("AFM_STRUCT_CPU_EXP", "0")
    assert not cpu_exp.wanted()


def test_fast_swiglu_mlp_keeps_the_embedded_models_logits(embedded) -> None:
    from mlx_lm.models import llama

    model, tok = embedded.model, embedded.tokenizer
    layers = model.model.layers
    texts = ("Hello there, friend", "The JSON object", "A third one here", "x y z w")
    prompts = [tok.encode(t) for t in texts]
    batch = mx.array([p[:3] for p in prompts])  # 4 rows x 3 positions: above MIN_ELEMENTS
    originals = [type(layer.mlp) for layer in layers]
    try:
        for layer in layers:
            layer.mlp.__class__ = llama.MLP
        want = np.array(model(batch)[:, -1])
        assert cpu_exp.use_fast_swiglu(model) == len(layers)
        assert cpu_exp.use_fast_swiglu(model) == len(layers)  # idempotent
        got = np.array(model(batch)[:, -1])
    finally:
        for layer, original in zip(layers, originals, strict=True):
            layer.mlp.__class__ = original
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert (got.argmax(-1) == want.argmax(-1)).all()


def test_other_model_structures_are_left_alone() -> None:
    class Other:
        model = None

    assert cpu_exp.use_fast_swiglu(Other()) == 0
