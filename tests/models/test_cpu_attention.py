"""The CPU attention kernel computes what ``mx.fast.scaled_dot_product_attention`` computes."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from afm_struct.models import cpu_attention
from afm_struct.models.cpu_attention import attention


def _reference(q: mx.array, k: mx.array, v: mx.array, scale: float, mask: object) -> np.ndarray:
    return np.array(mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask=mask))


def _inputs(b: int, hq: int, hk: int, lq: int, lk: int, seed: int = 0) -> tuple[mx.array, ...]:
    mx.random.seed(seed)
    return (mx.random.normal((b, hq, lq, 64)) * 2, mx.random.normal((b, hk, lk, 64)) * 2,
            mx.random.normal((b, hk, lk, 64)))


@pytest.mark.parametrize("shape", [(8, 9, 3, 1, 150), (1, 9, 3, 1, 7), (2, 4, 4, 5, 5), (3, 6, 2, 4, 40)])
def test_no_mask_and_causal_match_mlx(shape: tuple[int, ...]) -> None:
    b, hq, hk, lq, lk = shape
    q, k, v = _inputs(b, hq, hk, lq, lk)
    for mask in (None, "causal"):
        np.testing.assert_allclose(np.array(attention(q, k, v, 0.125, mask)),
                                   _reference(q, k, v, 0.125, mask), rtol=2e-5, atol=2e-5)


def test_boolean_and_additive_masks_per_row_match_mlx() -> None:
    # What RaggedKVCache builds: (rows, 1, n, S), row i seeing keys up to lengths[i] + j.
    lengths, n = [5, 12, 9], 3
    span = max(lengths) + n
    limit = mx.array(lengths)[:, None, None, None] + mx.arange(n)[None, None, :, None]
    mask = mx.arange(span)[None, None, None, :] <= limit
    q, k, v = _inputs(3, 9, 3, n, span, seed=1)
    np.testing.assert_allclose(np.array(attention(q, k, v, 0.125, mask)),
                               _reference(q, k, v, 0.125, mask), rtol=2e-5, atol=2e-5)
    additive = mx.where(mask, 0.0, -1e9)
    np.testing.assert_allclose(np.array(attention(q, k, v, 0.125, additive)),
                               _reference(q, k, v, 0.125, additive), rtol=2e-5, atol=2e-5)
    per_head = mx.broadcast_to(mask, (3, 9, n, span))  # a mask per query head
    np.testing.assert_allclose(np.array(attention(q, k, v, 0.125, per_head)),
                               _reference(q, k, v, 0.125, per_head), rtol=2e-5, atol=2e-5)


def test_a_fully_masked_row_stays_finite() -> None:
    q, k, v = _inputs(2, 4, 2, 1, 6)
    mask = mx.array([[True] * 6, [False] * 6]).reshape(2, 1, 1, 6)
    out = np.array(attention(q, k, v, 0.125, mask))
    assert np.isfinite(out).all()


def test_routing_keeps_mlx_lm_for_large_steps_and_when_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(cpu_attention, "attention", lambda *a, **k: calls.append("cpu") or a[0])
    monkeypatch.setattr(cpu_attention, "MIN_SCORES", 16)
    q, k, v = _inputs(1, 4, 2, 2, 8)
    cpu_attention.scaled_dot_product_attention(q, k, v, cache=None, scale=0.1, mask=None, enabled=True)
    assert calls == ["cpu"]
    out = cpu_attention.scaled_dot_product_attention(q, k, v, cache=None, scale=0.1, mask=None,
                                                     enabled=False)
    assert calls == ["cpu"] and out.shape == q.shape
    monkeypatch.setattr(cpu_attention, "MAX_SCORES", 32)  # 1 x 4 x 2 x 8 = 64 scores: too many
    cpu_attention.scaled_dot_product_attention(q, k, v, cache=None, scale=0.1, mask=None, enabled=True)
    assert calls == ["cpu"]
    monkeypatch.setattr(cpu_attention, "MAX_SCORES", 64)
    monkeypatch.setattr(cpu_attention, "MIN_SCORES", 128)  # too few
    cpu_attention.scaled_dot_product_attention(q, k, v, cache=None, scale=0.1, mask=None, enabled=True)
    assert calls == ["cpu"]
    monkeypatch.setenv("AFM_STRUCT_CPU_EXP", "0")
    assert not cpu_attention.wanted()


def test_embedded_model_logits_match_mlx_lm_attention(embedded, monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator's attention layers (packing class, CPU kernel forced on for every size)
    give the logits of mlx-lm's own attention, for a prefill and a 3-row decode step."""
    from mlx_lm.models import llama

    from afm_struct.decoding.packed import enable_packing

    model, tok = embedded.model, embedded.tokenizer
    layers = model.model.layers
    prompts = [tok.encode(t) for t in ("Hello there, friend", "JSON: {", "A third prompt")]
    width = min(len(p) for p in prompts)
    batch = mx.array([p[:width] for p in prompts])

    def run() -> tuple[np.ndarray, np.ndarray]:
        cache = embedded.make_cache()
        first = model(batch, cache=cache)[:, -1]
        step = model(mx.array([[11], [12], [13]]), cache=cache)[:, -1]
        return np.array(first), np.array(step)

    originals = [type(layer.self_attn) for layer in layers]
    for layer in layers:
        layer.self_attn.__class__ = llama.Attention
    try:
        want = run()
        assert enable_packing(model)
        cls = type(layers[0].self_attn)
        monkeypatch.setattr(cls, "use_cpu_attention", True)
        monkeypatch.setattr(cpu_attention, "MIN_SCORES", 1)
        got = run()
    finally:
        for layer, original in zip(layers, originals, strict=True):
            layer.self_attn.__class__ = original
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=2e-3)
        assert (g.argmax(-1) == w.argmax(-1)).all()
