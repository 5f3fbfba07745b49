"""Sampling filters and seeded samplers."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest

from afm_struct.decoding.sampling import (
    SamplingParams,
    apply_min_p,
    apply_top_k,
    apply_top_p,
    make_repetition_penalty,
    make_sampler,
)
from afm_struct.errors import InvalidRequestError

LOGITS = mx.array([[2.0, 1.0, 0.0, -1.0, 3.0]])


def kept(x: mx.array) -> list[int]:
    return [i for i, v in enumerate(x[0].tolist()) if v != -math.inf]


def test_top_k_keeps_the_k_largest():
    assert kept(apply_top_k(LOGITS, 2)) == [0, 4]
    assert kept(apply_top_k(LOGITS, 0)) == [0, 1, 2, 3, 4]


def test_top_p_keeps_the_smallest_nucleus():
    probs = mx.softmax(LOGITS, axis=-1)[0].tolist()  # ~[.23, .09, .03, .01, .64]
    assert kept(apply_top_p(LOGITS, 0.5)) == [4]
    assert kept(apply_top_p(LOGITS, probs[4] + 0.01)) == [0, 4]
    assert kept(apply_top_p(LOGITS, 1.0)) == [0, 1, 2, 3, 4]


def test_min_p_is_relative_to_the_top_token():
    # p(token)/p(top) = exp(l - 3): 0.37, 0.14, 0.05, 0.02, 1
    assert kept(apply_min_p(LOGITS, 0.1)) == [0, 1, 4]
    assert kept(apply_min_p(LOGITS, 0.5)) == [4]


def test_greedy_and_seeded_sampling():
    assert make_sampler(SamplingParams(temperature=0))(LOGITS).item() == 4
    a = [make_sampler(SamplingParams(temperature=1.5, seed=7)) for _ in range(2)]
    draws = [[int(s(LOGITS).item()) for _ in range(30)] for s in a]
    assert draws[0] == draws[1]
    other = make_sampler(SamplingParams(temperature=1.5, seed=8))
    assert [int(other(LOGITS).item()) for _ in range(30)] != draws[0]
    assert len(set(draws[0])) > 1


def test_filters_bound_what_can_be_sampled():
    s = make_sampler(SamplingParams(temperature=5.0, top_k=2, seed=1))
    assert {int(s(LOGITS).item()) for _ in range(50)} == {0, 4}


def test_repetition_penalty_lowers_seen_tokens():
    proc = make_repetition_penalty(2.0)
    out = proc([0, 3], mx.array(LOGITS))
    assert out[0].tolist() == [1.0, 1.0, 0.0, -2.0, 3.0]


@pytest.mark.parametrize("field,value", [
    ("temperature", -1), ("top_p", 0), ("top_k", -2), ("min_p", 1.5), ("max_tokens", 0),
    # seeds outside mx.random.key's 64 bits were its raw TypeError at admission (a 500)
    ("seed", -1), ("seed", 2 ** 64), ("seed", 1.5), ("seed", "7"), ("seed", True),
    ("temperature", math.nan), ("temperature", math.inf), ("top_p", math.nan),
    ("repetition_penalty", math.inf), ("repetition_penalty", math.nan), ("min_p", math.nan),
    ("top_k", 1.5), ("max_tokens", 2.0), ("temperature", "hot"), ("repetition_context", 0),
    ("stop", "x"), ("stop", (1,)),
    # penalties that scale float32 logits to inf or 0/0
    ("repetition_penalty", 1e-300), ("repetition_penalty", 1e300), ("repetition_penalty", 101),
])
def test_invalid_parameters_are_request_errors(field, value):
    with pytest.raises(InvalidRequestError) as err:
        SamplingParams(**{field: value})
    assert err.value.param == field
    assert err.value.status == 400 and err.value.code == "invalid_value"


@pytest.mark.parametrize("temperature", [1e-300, 1e-45, 1e-38, 1e-7])
def test_a_tiny_temperature_samples_the_argmax(temperature):
    """Before: logits / 1e-300 were inf and NaN in float32, and the draw picked token 4 (the
    least likely) or a random one."""
    s = make_sampler(SamplingParams(temperature=temperature, seed=1))
    assert all(math.isfinite(v) for v in s.distribution(LOGITS)[0].tolist())
    assert {int(s(LOGITS).item()) for _ in range(20)} == {4}


@pytest.mark.parametrize("p", [1e-300, 1e-46, 1e-9])
def test_a_tiny_top_p_keeps_the_most_likely_token(p):
    """Before: a p below float32's smallest number kept no token, and every draw was token 0."""
    assert kept(apply_top_p(LOGITS, p)) == [4]
    s = make_sampler(SamplingParams(temperature=1.0, top_p=p, seed=3))
    assert {int(s(LOGITS).item()) for _ in range(20)} == {4}


@pytest.mark.parametrize("penalty", [0.01, 0.5, 2.0, 100.0])
def test_a_penalty_in_range_keeps_logits_finite(penalty):
    out = make_repetition_penalty(penalty)([0, 1, 3, 4], mx.array(LOGITS))
    assert all(math.isfinite(v) for v in out[0].tolist())


@pytest.mark.parametrize("seed", [0, 1, 2 ** 63, 2 ** 64 - 1, np.uint64(2 ** 64 - 1), None])
def test_every_64_bit_seed_samples(seed):
    first = make_sampler(SamplingParams(temperature=1.0, seed=seed))
    draws = [int(first(LOGITS).item()) for _ in range(8)]
    assert all(0 <= d < 5 for d in draws)
    if seed is not None:  # the same seed, the same draws
        again = make_sampler(SamplingParams(temperature=1.0, seed=seed))
        assert [int(again(LOGITS).item()) for _ in range(8)] == draws


def test_find_loop_detects_degenerate_cycles_only():
    from afm_struct.decoding.sampling import find_loop

    assert find_loop([5, 7] + [0] * 10) == 0  # a run of one token
    assert find_loop([9] + [3, 4, 5] * 4) == 3  # a period-3 cycle: 3 continues it
    assert find_loop([0] * 9) is None  # too short to call a loop
    assert find_loop([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]) is None
    assert find_loop([3, 4, 5] * 3 + [6]) is None  # the cycle was already broken


def test_loop_breaker_demotes_only_the_continuing_token():
    from afm_struct.decoding.sampling import make_loop_breaker

    out = make_loop_breaker()([0] * 12, mx.array([[5.0, 4.0, -math.inf]]))
    assert out[0, 0].item() < -1000 and out[0, 1].item() == 4.0
    # When the mask leaves only the looping token, it still wins (finite penalty).
    only = make_loop_breaker()([0] * 12, mx.array([[5.0, -math.inf, -math.inf]]))
    assert int(mx.argmax(only, axis=-1).item()) == 0
